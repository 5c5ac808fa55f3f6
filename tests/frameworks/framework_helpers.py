"""Launch a framework's example script under torchrun and count the records it trained."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from tests.helpers import run_agent

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HERE = Path(__file__).resolve().parent
TIMEOUT = 240  # seconds a launch may take on a loaded machine before the test fails


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(script: str, ranks: int, args: list[str], log: Path) -> None:
    """Run ``examples/<script>`` on ``ranks`` processes (gloo on 127.0.0.1); fail, never hang."""
    launch(EXAMPLES / script, ranks, args, log)


def torchrun_twice(
    script: str,
    ranks: int,
    runs: tuple[Path, Path],
    first: list[str],
    second: list[str],
    log: Path,
    checks: Path | None = None,
    then: Sequence[tuple[str, list[str]]] = (),
) -> None:
    """Run ``examples/<script>`` into ``runs[0]``, then resume a copy of it, ``runs[1]``.

    Both in one launch on ``ranks`` processes (tests/frameworks/run_twice.py); ``checks``
    is a file whose ``check(runs[0])`` runs first; each ``(script, args)`` of ``then`` runs
    after them, in turn, in the same launch.
    """
    args = [str(EXAMPLES / script), *map(str, runs)]
    if checks is not None:
        args += ["--checks", str(checks)]
    args += ["--first-args", *first, "--second-args", *second, *next_runs(then)]
    launch(HERE / "run_twice.py", ranks, args, log)


def torchrun_in_turn(ranks: int, runs: Sequence[tuple[str, list[str]]], log: Path) -> None:
    """Each ``(script, args)`` of ``runs`` (``examples/<script>``), one after the other, in one
    launch on ``ranks`` processes (tests/frameworks/run_in_turn.py)."""
    (script, args), *then = runs
    command = [str(EXAMPLES / script), *args, *next_runs(then)]
    launch(HERE / "run_in_turn.py", ranks, command, log)


def next_runs(runs: Sequence[tuple[str, list[str]]]) -> list[str]:
    return [arg for script, args in runs for arg in ("--next", str(EXAMPLES / script), *args)]


def launch(path: Path, ranks: int, args: list[str], log: Path) -> None:
    """Run the script at ``path`` on ``ranks`` processes (gloo on 127.0.0.1); fail, never hang."""
    script = path.name
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={ranks}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(path),
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    code = run_agent(command, log, env, TIMEOUT)  # a hang fails with every process's stacks
    if code != 0:
        raise AssertionError(
            f"{script} on {ranks} ranks exited {code}:\n" + log.read_text()[-4000:]
        )


def rows(out: Path) -> list[dict[str, object]]:
    """Every ``records-rank<r>.jsonl`` row of a run, in file order."""
    found = []
    for path in sorted(out.glob("records-rank*.jsonl")):
        found += [json.loads(line) for line in path.read_text().splitlines()]
    return found


def per_epoch(out: Path, steps_per_epoch: int) -> dict[int, Counter[int]]:
    """How often each record was trained in each epoch (rows carry their optimizer step)."""
    counts: dict[int, Counter[int]] = {}
    for row in rows(out):
        epoch = int(row["step"]) // steps_per_epoch  # type: ignore[call-overload]
        counts.setdefault(epoch, Counter()).update(row["indices"])  # type: ignore[arg-type]
    return counts
