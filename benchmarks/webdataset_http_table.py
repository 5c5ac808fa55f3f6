"""WebDatasetSource over loopback HTTP against plain webdataset reading the same URLs (issue 15).

Run ``python benchmarks/webdataset_http_table.py`` (or ``--quick`` for CI, under 30 s). It
writes shards into a temporary folder with ``webdataset.ShardWriter`` (full mode: 50
shards, 100,000 samples of a tiny PNG plus a label, as ``webdataset_table.py``), serves
them from a separate process with aiohttp's static file route on 127.0.0.1
(``benchmarks/_http_server.py``, which logs every GET's byte range), indexes them as the
docs tell a user (``python -m detsamplers index URLS --out FOLDER``, that is
``write_indexes``: each shard's ``.index.npz`` and the folder's set index
``detsamplers-set.index.npz`` with those files embedded, NOTE [ set index ]), then measures:

1. samples/s over one epoch: plain ``wds.WebDataset(urls, shardshuffle=False)`` (which
   streams each shard with ``curl``) against ``WebDatasetSource(repeat=False)`` over the
   same ``http://`` URLs, both decoding with webdataset's default decoder, mapping to
   ``(png bytes, label)`` and batching 64 with ``default_collate``; in the main process
   and with 2 DataLoader workers; the median of several runs, alternating which goes first;
2. a resume in the middle of epoch 3 (global position ``2.5 N``): the time from building
   the source to its first batch, the requests the server answered for it and the shard
   bytes it sent, split into bytes before the resumed sample and at or after it; with the
   folder's set index (what a user has), with the shards' index files only (the set index
   moved aside), and over the local files; and one HTTP round trip (a 1-byte range GET on
   a new connection, median). The median of 5 resumes each (15 in quick mode), the three
   interleaved, in a process that has already read over HTTP. Issue 15's target for the
   HTTP resume is at most twice the local resume plus one round trip.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

from _common import load_average
from webdataset_table import BATCH, ours, plain, rate, write

from detsamplers.loader._wds.index._remote_index import write_indexes
from detsamplers.loader._wds.index._set_index_file import SET_INDEX_NAME, forget_absence
from detsamplers.loader._wds.remote._remote_reads import RemoteOptions
from detsamplers.loader._wds.remote._urls import expand_urls

HERE = os.path.dirname(os.path.abspath(__file__))


def served(base: str) -> list[tuple[str, int, int]]:
    """The GETs the server logged since the last call: (path, start, stop)."""
    with urllib.request.urlopen(base + "/__log__") as response:
        return [tuple(x) for x in json.loads(response.read())]


def other_requests(base: str) -> int:
    """The requests other than GETs (HEADs) the server answered since the last call."""
    with urllib.request.urlopen(base + "/__other__") as response:
        return len(json.loads(response.read()))


def round_trip(url: str, runs: int = 21) -> float:
    times = []
    for _ in range(runs):
        request = urllib.request.Request(url, headers={"Range": "bytes=0-0"})
        start = time.perf_counter()
        with urllib.request.urlopen(request) as response:
            response.read()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def resume(urls: str, target: int, **kwargs: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    source = ours(urls, **kwargs)
    source.load_state_dict({**source.state_dict(), "position": target})
    batch = next(iter(source))
    return time.perf_counter() - start, (source, batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples and runs (CI)")
    args = parser.parse_args()
    shards, per_shard, runs = (8, 500, 1) if args.quick else (50, 2000, 5)
    total = shards * per_shard
    with tempfile.TemporaryDirectory() as folder:
        local = write(folder, shards, per_shard)
        server = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "_http_server.py"), folder],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            base = f"http://127.0.0.1:{server.stdout.readline().strip()}"
            urls = f"{base}/{os.path.basename(local)}"
            start = time.perf_counter()
            # What `python -m detsamplers index URLS --out FOLDER` does.
            write_indexes(expand_urls(urls), RemoteOptions(), out=folder)
            indexed = time.perf_counter() - start
            print(
                f"{shards} shards, {total:,} samples over loopback HTTP, batch {BATCH}, "
                f"load average {load_average()}"
            )
            print(
                f"index files and the set index: written in {indexed:.2f} s (one scan of each "
                "shard over HTTP)"
            )
            print(
                f"{'num_workers':>11}  {'webdataset (samples/s)':>22}  {'detsamplers':>11}  ratio"
            )
            for workers in (0, 2):
                makers = {
                    "webdataset": lambda: plain(urls),
                    "ours": lambda: ours(urls, repeat=False),
                }
                rates: dict[str, list[float]] = {"webdataset": [], "ours": []}
                for i in range(runs):
                    for name in sorted(makers, reverse=i % 2 == 1):  # alternate who goes first
                        rates[name].append(rate(makers[name], workers, total, 1))
                theirs, mine = rates["webdataset"], rates["ours"]
                base_rate, our_rate = statistics.median(theirs), statistics.median(mine)
                print(
                    f"{workers:>11}  {base_rate:>22,.0f}  {our_rate:>11,.0f}  "
                    f"{our_rate / base_rate:.2f}x"
                )

            target = 2 * total + total // 2 // BATCH * BATCH  # mid epoch 3, a batch boundary
            # The local index cache, as a local run would have it: in a folder of its own,
            # since next to the shards it would replace the index files the server sends
            # (written for the local files: no ETag, so each HTTP read could not check it).
            local_index = os.path.join(folder, "local-index")
            ours(local, index_dir=local_index)
            set_file = os.path.join(folder, SET_INDEX_NAME)
            resumes = 15 if args.quick else 5
            times: dict[str, list[float]] = {"local": [], "set": [], "files": []}
            logs: dict[str, list[tuple[str, int, int]]] = {}
            heads: dict[str, int] = {}
            for round_ in range(resumes):  # interleaved; cheap even in quick mode
                for name in ("local", "set", "files")[:: 1 if round_ % 2 == 0 else -1]:
                    if name == "local":
                        times[name].append(resume(local, target, index_dir=local_index)[0])
                        continue
                    if name == "files":  # the set index moved aside: the shards' own files
                        os.replace(set_file, set_file + ".aside")
                    served(base), other_requests(base)
                    seconds, (source, _) = resume(urls, target)
                    times[name].append(seconds)
                    logs[name], heads[name] = served(base), other_requests(base)
                    if name == "files":
                        os.replace(set_file + ".aside", set_file)
                        forget_absence(base + "/")  # it is back: look for it again
            # The first byte the first batch needs in each shard it reads; anything the
            # server sent below it, or from another shard, was read before the sample.
            needed: dict[str, int] = {}
            names = ["/" + u.rsplit("/", 1)[-1] for u in expand_urls(urls)]
            for shard, index in source.locate(range(target, target + BATCH)):
                offset = source.shards[shard].members[index][0][1]
                needed[names[shard]] = min(offset, needed.get(names[shard], offset))
            [(shard, index)] = source.locate([target])
            members = source.shards[shard].members[index]
            sample_bytes = members[-1][1] + members[-1][2] - members[0][1]
            rtt = round_trip(f"{base}/{names[shard].lstrip('/')}")
            median = {name: statistics.median(t) * 1000 for name, t in times.items()}
            print(f"resume at sample {target:,} (mid epoch 3), build + load + first batch:")
            print(f"  local files:                       {median['local']:8.1f} ms")
            goal = 2 * median["local"] + rtt * 1000
            print(
                f"  HTTP, the folder's set index:      {median['set']:8.1f} ms   (target <= 2 x "
                f"local + 1 round trip = {goal:.1f} ms; round trip {rtt * 1e6:.0f} us)"
            )
            print(f"  HTTP, the shards' index files only: {median['files']:7.1f} ms")
            for name, what in (("set", "set index"), ("files", "index files only")):
                log = logs[name]
                shard_gets = [(p, a, b) for p, a, b in log if p.endswith(".tar")]
                before = sum(max(0, min(b, needed.get(p, b)) - a) for p, a, b in shard_gets)
                after = sum(b - a for p, a, b in shard_gets) - before
                index_gets = [(p, a, b) for p, a, b in log if p.endswith(".index.npz")]
                index_bytes = sum(b - a for _, a, b in index_gets)
                print(
                    f"  {what}: {len(log) + heads[name]} requests ({heads[name]} HEAD); "
                    f"index files {index_bytes:,} bytes in {len(index_gets)} GET(s); shard "
                    f"bytes before the resumed sample {before:,} (one sample is "
                    f"{sample_bytes:,} bytes), at or after it {after:,} in "
                    f"{len(shard_gets)} range GET(s)"
                )
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
