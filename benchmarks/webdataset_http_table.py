"""WebDatasetSource over loopback HTTP against plain webdataset reading the same URLs (issue 15).

Run ``python benchmarks/webdataset_http_table.py`` (or ``--quick`` for CI, under 30 s). It
writes shards into a temporary folder with ``webdataset.ShardWriter`` (full mode: 50
shards, 100,000 samples of a tiny PNG plus a label, as ``webdataset_table.py``), serves
them from a separate process with aiohttp's static file route on 127.0.0.1
(``benchmarks/_http_server.py``, which logs every GET's byte range), writes their index
files with ``python -m detsamplers index``, then measures:

1. samples/s over one epoch: plain ``wds.WebDataset(urls, shardshuffle=False)`` (which
   streams each shard with ``curl``) against ``WebDatasetSource(repeat=False)`` over the
   same ``http://`` URLs, both decoding with webdataset's default decoder, mapping to
   ``(png bytes, label)`` and batching 64 with ``default_collate``; in the main process
   and with 2 DataLoader workers; the median of several runs, alternating which goes first;
2. a resume in the middle of epoch 3 (global position ``2.5 N``): the time from building
   the source to its first batch, and the shard bytes the server sent for it, split into
   bytes before the resumed sample and at or after it; against the same resume of a
   source over the local files, and one HTTP round trip (a 1-byte range GET, median); the
   median of 5 resumes each, in a process that has already read over HTTP; then the same
   resume with the folder's set index (``detsamplers-set.index.npz``, NOTE [ set index ]).
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

from detsamplers.loader._wds._fetch import RemoteOptions
from detsamplers.loader._wds._remote_index import write_index
from detsamplers.loader._wds._set_index import SET_INDEX_NAME, encode_set, forget_absence
from detsamplers.loader._wds._urls import expand_urls

HERE = os.path.dirname(os.path.abspath(__file__))


def served(base: str) -> list[tuple[str, int, int]]:
    """The GETs the server logged since the last call: (path, start, stop)."""
    with urllib.request.urlopen(base + "/__log__") as response:
        return [tuple(x) for x in json.loads(response.read())]


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
            for url in expand_urls(urls):
                write_index(url, RemoteOptions(), out=folder)
            indexed = time.perf_counter() - start
            print(
                f"{shards} shards, {total:,} samples over loopback HTTP, batch {BATCH}, "
                f"load average {load_average()}"
            )
            print(f"index files: written in {indexed:.2f} s (one scan of each shard over HTTP)")
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
            ours(local)  # the local index cache, as a local run would have it
            local_times, http_times, logs = [], [], []
            for _ in range(5):  # cheap even in quick mode
                local_times.append(resume(local, target)[0])
                served(base)
                seconds, (source, _) = resume(urls, target)
                http_times.append(seconds)
                logs.append(served(base))
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
            name = names[shard]
            log = logs[-1]
            shard_gets = [(p, a, b) for p, a, b in log if p.endswith(".tar")]
            before = sum(max(0, min(b, needed.get(p, b)) - a) for p, a, b in shard_gets)
            after = sum(b - a for p, a, b in shard_gets) - before
            index_bytes = sum(b - a for p, a, b in log if p.endswith(".index.npz"))
            rtt = round_trip(f"{base}/{name.lstrip('/')}")
            local_time, http_time = statistics.median(local_times), statistics.median(http_times)
            # The same resume with the folder's set index (what `python -m detsamplers index`
            # writes besides the shards' files): the shards' index files are then fetched
            # when a shard is first read, so a resume fetches only the first batch's.
            entries = [
                (u.rsplit("/", 1)[-1], s.size, s.version, len(s))
                for u, s in zip(expand_urls(urls), source.shards, strict=True)
            ]
            with open(os.path.join(folder, SET_INDEX_NAME), "wb") as handle:
                handle.write(encode_set(entries))
            forget_absence(base + "/")  # this process looked for it before it was written
            set_times, set_logs = [], []
            for _ in range(5):
                served(base)
                set_times.append(resume(urls, target)[0])
                set_logs.append(served(base))
            set_time = statistics.median(set_times)
            set_index_files = [
                p
                for p, _, _ in set_logs[-1]
                if p.endswith(".index.npz") and not p.endswith(SET_INDEX_NAME)
            ]
            print(f"resume at sample {target:,} (mid epoch 3), build + load + first batch:")
            print(f"  local files:  {local_time * 1000:8.1f} ms")
            print(
                f"  HTTP:         {http_time * 1000:8.1f} ms   (target <= 2 x local + 1 round "
                f"trip = {(2 * local_time + rtt) * 1000:.1f} ms; round trip "
                f"{rtt * 1e6:.0f} us)"
            )
            print(
                f"  shard bytes before the resumed sample: {before:,} (one sample is "
                f"{sample_bytes:,} bytes); at or after it: {after:,} in {len(shard_gets)} "
                f"range request(s); index files: {index_bytes:,} bytes, "
                f"{len(log) - len(shard_gets)} request(s)"
            )
            print(
                f"  HTTP with the folder's set index: {set_time * 1000:8.1f} ms ("
                f"the set index and {len(set_index_files)} shard index file(s))"
            )
        finally:
            server.terminate()
            server.wait(10)


if __name__ == "__main__":
    main()
