"""Run a function on W ranks with ``torch.distributed.run`` (gloo, 127.0.0.1), collect JSON.

A peer that reads its world size from ``torch.distributed`` or from torchrun's environment
(litdata, Mosaic streaming) can only be checked on several ranks by starting several
processes. ``on_ranks`` starts ``benchmarks/harness/rank_worker.py`` on ``world`` ranks; each
rank imports ``module``, calls ``function(world=W, rank=r, **kwargs)`` and writes what it
returns (JSON) to a file; the parent returns the list of those, one per rank. An exception on
a rank comes back as ``{"error": "Type: message"}`` for that rank.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("rank_worker.py")


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def on_ranks(
    world: int, module: str, function: str, kwargs: dict[str, Any], *, timeout: float = 300.0
) -> list[Any]:
    """``module.function(world=world, rank=r, **kwargs)`` on each rank r of a torchrun.

    Raises:
        RuntimeError: when the run times out or a rank wrote nothing (its stderr is quoted).
    """
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}",
            "--master_addr=127.0.0.1", f"--master_port={free_port()}", str(WORKER),
            module, function, json.dumps(kwargs), out,
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, env=env, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(
                f"{world} ranks of {module}.{function}: no end in {timeout:g} s"
            ) from exc
        results = []
        for rank in range(world):
            path = Path(out, f"rank-{rank}.json")
            if not path.exists():
                tail = done.stderr.strip().splitlines()[-5:]
                raise RuntimeError(f"rank {rank} of {module}.{function} wrote nothing: {tail}")
            results.append(json.loads(path.read_text(encoding="utf-8")))
        return results
