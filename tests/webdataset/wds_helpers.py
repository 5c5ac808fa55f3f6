"""Shared shards and helpers for the webdataset source tests (module-level: workers pickle them)."""

from __future__ import annotations

import os
import random
import socket
import struct
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch
import webdataset as wds

from detsamplers.loader import WebDatasetSource

#: 7 shards of 3 to 20 samples: 71 samples, uneven on purpose.
COUNTS = [3, 20, 7, 11, 5, 16, 9]
TOTAL = sum(COUNTS)
PATTERN = "data-{000000..000006}.tar"


def write_small_samples(folder: Path, shards: int) -> int:
    """``shards`` shards ``d-NN.tar`` of 30 to 50 samples of 2-8 KB; returns the sample count.

    Sample ``k{label:05d}`` holds random bytes under ``bin`` and its running label under
    ``cls`` (so ``decode=()`` and ``map=label`` give the label).
    """
    folder.mkdir(parents=True)
    rng = random.Random(0)
    count = 0
    for shard in range(shards):
        with wds.TarWriter(str(folder / f"d-{shard:02d}.tar")) as sink:
            for _ in range(rng.randint(30, 50)):
                payload = rng.randbytes(rng.randint(2048, 8192))
                sink.write({"__key__": f"k{count:05d}", "bin": payload, "cls": count})
                count += 1
    return count


def png_bytes(value: int) -> bytes:
    """A valid 2x2 8-bit greyscale PNG whose pixels are ``value % 256``."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0)
    rows = b"".join(b"\x00" + bytes([value % 256]) * 2 for _ in range(2))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def write_shards(folder: Path, counts: list[int] = COUNTS) -> str:
    """Write one shard per count with webdataset.ShardWriter; return the brace pattern.

    Sample ``j`` of shard ``s`` has key ``s{s}-{j:03d}``, a PNG under ``png`` and its
    global id (the running count over shards) under ``cls``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    label = 0
    for shard, count in enumerate(counts):
        pattern = str(folder / "data-%06d.tar")
        with wds.ShardWriter(pattern, maxcount=count, verbose=0, start_shard=shard) as sink:
            for j in range(count):
                sink.write({"__key__": f"s{shard}-{j:03d}", "png": png_bytes(label), "cls": label})
                label += 1
    return str(folder / f"data-{{{0:06d}..{len(counts) - 1:06d}}}.tar")


def label(sample: dict[str, Any]) -> int:
    """The map stage of most tests: the decoded ``cls`` label."""
    return int(sample["cls"])


def noisy_label(sample: dict[str, Any]) -> tuple[int, float, float, float]:
    """The label plus one draw from each of torch, numpy and random."""
    return (int(sample["cls"]), torch.rand(()).item(), float(np.random.rand()), random.random())


def make(urls: str, **kwargs: Any) -> WebDatasetSource:
    """A source of labels (``decode=()`` turns ``cls`` into an int) with test defaults.

    ``parts=0``: the plain order, as the default ``parts=None`` gives local and remote
    shards alike, but without taking a loaded state's parts (NOTE [ parts chosen at
    load ], tested in test_wds_part_cover.py and test_wds_one_order.py).
    """
    options: dict[str, Any] = {
        "seed": 0,
        "batch_size": 2,
        "decode": (),
        "map": label,
        "parts": 0,
    }
    options.update(kwargs)
    return WebDatasetSource(urls, **options)


def ids(batch: Any) -> list[int]:
    return [int(x) for x in batch]


def take(iterator: Any, count: int) -> list[list[int]]:
    return [ids(b) for b in islice(iterator, count)]


def simulate(source: WebDatasetSource, num_workers: int, count: int) -> list[list[int]]:
    """What a DataLoader with ``num_workers`` yields: each worker's batches, round-robin."""
    if num_workers == 0:
        return take(iter(source), count)
    workers = [source.iter_worker(w, num_workers) for w in range(num_workers)]
    out: list[list[int]] = []
    for step in range(count):
        batch = next(workers[step % num_workers], None)
        if batch is None:
            break
        out.append(ids(batch))
    return out


def global_stream(sources: list[WebDatasetSource], num_workers: int, steps: int) -> list[int]:
    """Reassemble the global sample stream from every rank's first ``steps`` batches.

    Rank ``r``'s batch ``t`` holds positions ``(t * B + i) * W + r``, so the global
    stream interleaves the ranks' batches sample by sample.
    """
    per_rank = [simulate(s, num_workers, steps) for s in sources]
    out: list[int] = []
    for step in range(steps):
        batches = [rank[step] for rank in per_rank]
        for i in range(max(len(b) for b in batches)):
            out.extend(b[i] for b in batches if i < len(b))
    return out


def shard_of(label_value: int) -> tuple[int, int]:
    """(shard, index in shard) of a global id."""
    start = 0
    for shard, count in enumerate(COUNTS):
        if label_value < start + count:
            return shard, label_value - start
        start += count
    raise ValueError(label_value)


def member_bytes(paths: Any) -> int:
    """The bytes of the tars' members' data: what any reading of all their samples fetches.

    Ranged fetches (NOTE [ node fetches ]) leave out the end blocks and the padding between
    samples, so a node's bytes lie between this and the files' sizes.
    """
    total = 0
    for path in paths:
        with tarfile.open(path) as tar:
            total += sum(m.size for m in tar.getmembers())
    return total


def cached_shards(folder: Path) -> set[str]:
    """The shards a cache folder holds, whole (`<key>.tar`) or as ranges (`<key>.<a>-<b>.part`)."""
    if not folder.exists():
        return set()
    found = [*folder.rglob("*.tar"), *folder.rglob("*.part")]
    return {p.name.split(".", 1)[0] for p in found}


def file_size(path: str) -> int:
    return os.path.getsize(path)


def run_two_agents(
    tmp_path: Path, module: str, node_args: Callable[[int], list[str]], *, static: bool = False
) -> None:
    """Run ``module`` under two torchrun agents (``--nnodes=2``, one process each), as two
    machines would, and assert both exit 0 (their logs in the message otherwise).

    ``node_args(n)`` are agent ``n``'s arguments to the module. A c10d rendezvous ranks the
    agents as they arrive; ``static`` gives agent ``n`` node rank ``n`` (``--node-rank``),
    as a cluster's launcher does on every restart.
    """
    # Here, not at the top: benchmarks/s3_build_table.py imports this module without the
    # repository's root on the path.
    from tests.helpers import wait_agents

    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}  # stacks on a hang
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rendezvous = (
        ["--rdzv-backend=static", "--master-addr=127.0.0.1", f"--master-port={port}"]
        if static
        else ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={module}"]
    )
    agents = []
    for node in range(2):
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
            *rendezvous, *([f"--node-rank={node}"] if static else []),
            "-m", module, *node_args(node),
        ]  # fmt: skip
        log = open(tmp_path / f"agent{node}.log", "a")  # noqa: SIM115 - closed below
        agents.append(
            (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), log)
        )
    try:  # a hang fails with every process's stacks
        codes = wait_agents([(agent, Path(log.name)) for agent, log in agents], 180)
    finally:
        for _, log in agents:
            log.close()
    logs = [(tmp_path / f"agent{n}.log").read_text()[-2000:] for n in range(2)]
    assert codes == [0, 0], logs
