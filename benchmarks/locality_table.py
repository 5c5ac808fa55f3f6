"""Bytes served per epoch over nginx, by rank-local parts and the node cache (issue 23).

Run ``python benchmarks/locality_table.py`` (or ``--quick`` for CI, about a minute). It
writes 32 shards of 8,192 samples of 2-8 KB (``--quick``: 16 shards, 640 samples) with
``webdataset.TarWriter``, serves them with nginx on 127.0.0.1 (Debian's ``nginx-light``,
``make nginx``; its access log counts ``$body_bytes_sent``), and for each configuration
and W = 1 and 4 ranks, each rank a process of its own (all ranks sharing one cache folder,
as the ranks of one node do), measures:

- epoch 1 and epoch 2 shard bytes served, over the dataset's bytes, and requests;
- samples/s over epoch 1 and epoch 2 (all ranks' samples over the wall time of the
  slowest rank, batch 64, no decoding);
- the time from building a source resumed at the middle of epoch 1 to its first batch
  (rank 0, with the cache emptied first: the worst case for the cache).

The rows: the plain order (positions dealt to ranks in turn, ranged reads, no cache), with
and without its block shuffle, against ``parts=720`` with the node cache, with and without
the part block shuffle; those rows read epoch 0 twice (a restart), from a cache shared by
the ranks. The "a node per rank" rows give each rank a cache folder of its own, as ranks
on different nodes have, and read the run's epochs 0 and 1 (``skip_samples``, the epoch's
whole global batches): with parts, a rank reads the same shards in both (NOTE [ fixed part
cover ]).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator
from itertools import islice
from pathlib import Path
from typing import Any, cast

import webdataset as wds

from detsamplers.loader import WebDatasetSource

BATCH = 64
CONFIGS: dict[str, dict[str, Any]] = {
    "plain, tar order": {"parts": 0},
    "plain, shuffle_block_shards=4": {"parts": 0, "shuffle_block_shards": 4},
    "parts=720 + cache, tar order": {"parts": 720, "cache": True},
    "parts=720 + cache, shuffle_block_shards=4": {
        "parts": 720,
        "cache": True,
        "shuffle_block_shards": 4,
    },
    "parts=720 + a node per rank, tar order": {"parts": 720, "cache": "rank"},
    "parts=720 + a node per rank, shuffle_block_shards=4": {
        "parts": 720,
        "cache": "rank",
        "shuffle_block_shards": 4,
    },
}
NGINX = """daemon off; master_process off; worker_processes 1; pid {run}/nginx.pid;
error_log {run}/error.log warn; events {{ worker_connections 512; }}
http {{ log_format bytes '$request_method $uri $status $body_bytes_sent';
access_log {run}/access.log bytes; client_body_temp_path {run}/body;
proxy_temp_path {run}/proxy; fastcgi_temp_path {run}/fcgi; uwsgi_temp_path {run}/uwsgi;
scgi_temp_path {run}/scgi; keepalive_requests 100000;
server {{ listen 127.0.0.1:{port}; root {root}; }} }}
"""


def write(folder: Path, shards: int, total: int) -> None:
    rng = random.Random(0)
    folder.mkdir(parents=True)
    for shard in range(shards):
        with wds.TarWriter(str(folder / f"d-{shard:03d}.tar")) as sink:
            for label in range(shard * total // shards, (shard + 1) * total // shards):
                payload = rng.randbytes(rng.randint(2048, 8192))
                sink.write({"__key__": f"k{label:06d}", "bin": payload, "cls": label})


def start_nginx(root: Path, run: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(binary):
        sys.exit("nginx is not installed: make nginx (Debian's nginx-light)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (run / "nginx.conf").write_text(NGINX.format(run=run, port=port, root=root))
    process = subprocess.Popen(
        [binary, "-p", str(run), "-c", str(run / "nginx.conf"), "-e", str(run / "stderr.log")]
    )
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    sys.exit("nginx did not start")


def served(log: Path, since: int) -> tuple[int, int]:
    time.sleep(0.1)
    with open(log, "rb") as handle:
        handle.seek(since)
        rows = [line.split(" ") for line in handle.read().decode().splitlines()]
    gets = [int(r[3]) for r in rows if r[0] == "GET" and r[1].endswith(".tar")]
    return sum(gets), len(gets)


def make(args: dict[str, Any], rank: int, world: int, **extra: Any) -> WebDatasetSource:
    options = dict(args["config"])
    cache = options.pop("cache", False)
    folder = args["cache_dir"] + (f"/rank-{rank}" if cache == "rank" else "")
    return WebDatasetSource(
        args["urls"],
        seed=0,
        batch_size=BATCH,
        world_size=world,
        rank=rank,
        collate_fn=len,
        index_dir=args["index_dir"],
        cache_dir=folder if cache else None,
        **options,
        **extra,
    )


def rank_main(spec: str) -> None:
    """One rank: read one epoch, print its samples and seconds."""
    args = json.loads(spec)
    if args.get("epoch") is None:
        source = make(args, args["rank"], args["world"], repeat=False)
        batches = iter(source)
    else:  # the run's epoch: its whole global batches
        skip = args["epoch"] * args["total"]
        source = make(args, args["rank"], args["world"], skip_samples=skip)
        batches = islice(source, args["total"] // (BATCH * args["world"]))
    started = time.perf_counter()
    count = sum(batches)
    print(json.dumps({"samples": count, "seconds": time.perf_counter() - started}))


def epoch(args: dict[str, Any], world: int) -> tuple[int, float]:
    ranks = [
        subprocess.Popen(
            [sys.executable, __file__, "--rank", json.dumps({**args, "rank": r, "world": world})],
            stdout=subprocess.PIPE,
        )
        for r in range(world)
    ]
    outs = [json.loads(p.communicate(timeout=600)[0]) for p in ranks]
    return sum(o["samples"] for o in outs), max(max(o["seconds"] for o in outs), 1e-9)


def resume_ms(args: dict[str, Any], world: int, total: int) -> float:
    shutil.rmtree(args["cache_dir"], ignore_errors=True)
    started = time.perf_counter()
    source = make(args, 0, world, skip_samples=(total // 2 // (BATCH * world)) * BATCH * world)
    batches = cast(Generator[Any, None, None], source.iter_worker(0, 1))
    next(batches)
    took = 1000 * (time.perf_counter() - started)
    batches.close()  # stops the prefetch (its current download ends first)
    time.sleep(1.0)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small dataset (CI)")
    parser.add_argument("--only", default="", help="the rows whose configuration holds this")
    parser.add_argument("--rank", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.rank:
        rank_main(options.rank)
        return
    shards, total = (16, 640) if options.quick else (32, 8192)
    folder = Path(tempfile.mkdtemp(prefix="locality-"))
    try:
        write(folder / "root" / "s", shards, total)
        (folder / "run").mkdir()
        nginx, port = start_nginx(folder / "root", folder / "run")
        try:
            data = sum(p.stat().st_size for p in (folder / "root" / "s").glob("*.tar"))
            base: dict[str, Any] = {
                "urls": f"http://127.0.0.1:{port}/s/d-{{000..{shards - 1:03d}}}.tar",
                "index_dir": str(folder / "index"),
            }
            WebDatasetSource(
                base["urls"], seed=0, batch_size=1, index_dir=base["index_dir"], parts=0
            )
            size = f"{data / 1e6:.1f} MB"
            print(f"# {total} samples of 2-8 KB in {shards} shards, {size}; batch {BATCH}")
            print(
                "| configuration | W | epoch 1 bytes / data (GETs) | epoch 1 samples/s |"
                " epoch 2 bytes / data | epoch 2 samples/s | first batch after resume |"
            )
            print("|---|---|---|---|---|---|---|")
            log = folder / "run" / "access.log"
            for name, config in CONFIGS.items():
                if options.only not in name:
                    continue
                for world in (1, 4):
                    args = {**base, "config": config, "cache_dir": str(folder / f"cache-{world}")}
                    shutil.rmtree(args["cache_dir"], ignore_errors=True)
                    row = []
                    for number in range(2):
                        mark = log.stat().st_size
                        if config.get("cache") == "rank":
                            args = {**args, "epoch": number, "total": total}
                        count, seconds = epoch(args, world)
                        whole = total // (BATCH * world) * BATCH * world
                        assert count == (whole if "epoch" in args else total), (count, total)
                        sent, gets = served(log, mark)
                        row.append((sent / data, gets, count / seconds))
                    resume = resume_ms(args, world, total)
                    (b1, g1, r1), (b2, _, r2) = row
                    print(
                        f"| {name} | {world} | {b1:.2f}x ({g1}) | {r1:,.0f} | {b2:.2f}x |"
                        f" {r2:,.0f} | {resume:,.0f} ms |"
                    )
        finally:
            nginx.terminate()
            nginx.wait(timeout=10)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
