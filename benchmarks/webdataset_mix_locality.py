"""Bytes served for a pass of a WebDatasetMix over nginx, with and without parts (issue 23).

Run ``python benchmarks/webdataset_mix_locality.py`` (or ``--quick`` for CI). It writes two
shard sets of 16 shards of 2-8 KB samples (40 and 25 samples per shard, weights 640 : 400)
with ``webdataset.TarWriter``, serves them with nginx on 127.0.0.1 (Debian's
``nginx-light``, ``make nginx``; its access log counts ``$body_bytes_sent``), and reads
one pass of the mixture less 256 positions (so that no lane of NOTE [ mixture lanes ]
reaches a set's second epoch) on W ranks, built one after the other in this process:
either sharing one cache folder (one node) or with a folder each (a node per rank), or,
for the plain order, with range reads and no cache. It prints the bytes served over the
sets' bytes, and the GET requests.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import webdataset as wds
from locality_table import served, start_nginx  # nginx on 127.0.0.1, its bytes counted

from detsamplers.loader import WebDatasetMix

SHARDS = 16
PER_SHARD = (40, 25)
BATCH = 8
MARGIN = 256


def write(root: Path) -> None:
    rng = random.Random(0)
    for k, count in enumerate(PER_SHARD):
        (root / f"m{k}").mkdir(parents=True)
        label = k * 100_000
        for shard in range(SHARDS):
            with wds.TarWriter(str(root / f"m{k}" / f"d-{shard:02d}.tar")) as sink:
                for _ in range(count):
                    payload = rng.randbytes(rng.randint(2048, 8192))
                    sink.write({"__key__": f"k{label:06d}", "bin": payload, "cls": label})
                    label += 1


def label(sample: dict[str, Any]) -> int:
    return int(sample["cls"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="W=2 only, tar order (CI)")
    parser.add_argument(
        "--parts",
        type=int,
        nargs="+",
        default=[0, 8, 12],
        help="parts counts to run (8 cuts no shard; 12 cuts parts inside shards)",
    )
    options = parser.parse_args()
    worlds = (2,) if options.quick else (2, 4)
    shuffles: list[dict[str, Any]] = [{}] if options.quick else [{}, {"shuffle_block_shards": 2}]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write(folder / "root")
        (folder / "run").mkdir()
        nginx, port = start_nginx(folder / "root", folder / "run")
        try:
            urls = [f"http://127.0.0.1:{port}/m{k}/d-{{00..{SHARDS - 1:02d}}}.tar" for k in (0, 1)]
            sizes = [SHARDS * n for n in PER_SHARD]
            data = sum(p.stat().st_size for p in (folder / "root").glob("m*/*.tar"))
            log = folder / "run" / "access.log"
            index = str(folder / "index")
            # Index the shards before any row counts (the first row counted the indexing).
            WebDatasetMix(urls, sizes, seed=0, batch_size=BATCH, index_dir=index)
            load = os.getloadavg()[0]
            print(f"{os.cpu_count()} CPUs, load {load:.2f}; 2 sets of {SHARDS} shards, {data:,} B")
            print("configuration                                   W  bytes / data  GETs")
            for parts in options.parts:
                for world in worlds:
                    for shuffle in shuffles:
                        caches = ("per node", "per rank") if parts else ("none",)
                        for cache in caches:
                            steps = (sum(sizes) - MARGIN) // (BATCH * world)
                            mark = log.stat().st_size if log.exists() else 0
                            node = tempfile.mkdtemp(dir=tmp)
                            for rank in range(world):
                                extra: dict[str, Any] = {}
                                if cache != "none":
                                    folder_r = node if cache == "per node" else f"{node}/{rank}"
                                    extra = {"cache_dir": folder_r, "prefetch": 1}
                                source = WebDatasetMix(
                                    urls,
                                    sizes,
                                    seed=0,
                                    batch_size=BATCH,
                                    world_size=world,
                                    rank=rank,
                                    decode=(),
                                    map=label,
                                    index_dir=index,
                                    parts=parts,
                                    **shuffle,
                                    **extra,
                                )
                                iterator = iter(source)
                                for _ in range(steps):
                                    next(iterator)
                                iterator.close()  # type: ignore[attr-defined]
                            sent, gets = served(log, mark)
                            name = (
                                f"parts={parts}, {'block 2' if shuffle else 'tar'}, cache {cache}"
                            )
                            print(f"{name:<46} {world:>2}  {sent / data:>11.3f}x  {gets:>4}")
            print(f"load average at the end: {os.getloadavg()[0]:.2f}")
        finally:
            nginx.terminate()
            nginx.wait(timeout=10)


if __name__ == "__main__":
    main()
