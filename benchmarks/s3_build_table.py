"""Building a WebDatasetSource over shards on S3: requests and time, with and without a set index.

Run ``python benchmarks/s3_build_table.py`` (or ``--quick`` for CI, a few seconds). It
writes ``--shards`` small shards (4 samples each) with ``webdataset.ShardWriter``, uploads
them to moto's S3 server on 127.0.0.1 (``moto[server]``, from the dev extra) behind the
tests' counting proxy (``tests/webdataset/s3_server.py``), runs ``python -m detsamplers
index`` against it with ``--endpoint-url``, then builds a fresh ``WebDatasetSource`` (an
empty index cache each time) three ways and prints the requests the server got and the
wall time (median of 3):

1. with the folder's set index (``detsamplers-set.index.npz``, NOTE [ set index ]);
2. with the shards' own index files only (the set index deleted);
3. with no index file at all (the shards scanned, their indexes cached).

The server runs in this process, so the times include its work; they show the scale
of the difference, not S3's latency.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import load_average

from detsamplers.__main__ import main as cli
from detsamplers.loader import WebDatasetSource

TESTS = Path(__file__).resolve().parent.parent / "tests" / "webdataset"


def build(server: Any, url: str, runs: int) -> tuple[int, float]:
    """Requests of one build, and the median wall time of ``runs`` builds."""
    times, requests = [], 0
    for _ in range(runs):
        server.reset()
        start = time.perf_counter()
        WebDatasetSource(
            url, seed=0, batch_size=4, storage_options=server.options, index_dir=tempfile.mkdtemp()
        )
        times.append(time.perf_counter() - start)
        requests = sum(server.served.requests.values())
    return requests, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=1024)
    parser.add_argument("--quick", action="store_true", help="32 shards, one run each")
    args = parser.parse_args()
    shards, runs = (32, 1) if args.quick else (args.shards, 3)
    sys.path.insert(0, str(TESTS))
    server = importlib.import_module("s3_server").S3Server()
    write_shards = importlib.import_module("wds_helpers").write_shards
    folder = Path(tempfile.mkdtemp())
    write_shards(folder, [4] * shards)
    server.create_bucket("bench")
    for i in range(shards):
        name = f"data-{i:06d}.tar"
        server.put("bench", f"s/{name}", (folder / name).read_bytes())
    url = f"s3://bench/s/data-{{000000..{shards - 1:06d}}}.tar"
    argv = ["index", url, "--endpoint-url", server.endpoint]
    argv += ["--storage-option", "key=testing", "--storage-option", "secret=testing"]
    with contextlib.redirect_stdout(io.StringIO()):  # the command prints a line per shard
        status = cli(argv)
    if status != 0:
        raise SystemExit(f"python -m detsamplers index failed with status {status}")
    print(f"{shards} shards on moto S3 (127.0.0.1), load average {load_average()}")
    print(f"{'build':<30} {'requests':>9} {'seconds':>9}")
    client = server.client()
    for label in ("set index", "per-shard index files only", "no index files (scans)"):
        if label.startswith("per-shard"):
            client.delete_object(Bucket="bench", Key="s/detsamplers-set.index.npz")
        elif label.startswith("no index"):
            for i in range(shards):
                client.delete_object(Bucket="bench", Key=f"s/data-{i:06d}.tar.index.npz")
        requests, seconds = build(server, url, runs)
        print(f"{label:<30} {requests:>9} {seconds:>9.2f}")
    server.close()


if __name__ == "__main__":
    main()
