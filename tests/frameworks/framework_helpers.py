"""Launch a framework's example script under torchrun and count the records it trained."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.helpers import run_agent

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HERE = Path(__file__).resolve().parent
TIMEOUT = 240  # seconds a launch may take on a loaded machine before the test fails
COPY = "--copy"  # as the script of a run in turn: ``(COPY, [from, to])`` copies a finished run


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
    launch(HERE / "run_twice.py", ranks, args, log, runs=2 + len(then))


def torchrun_in_turn(ranks: int, runs: Sequence[tuple[str, list[str]]], log: Path) -> None:
    """Each ``(script, args)`` of ``runs`` (``examples/<script>``), one after the other, in one
    launch on ``ranks`` processes (tests/frameworks/run_in_turn.py)."""
    (script, args), *then = runs
    command = [str(EXAMPLES / script), *args, *next_runs(then)]
    launch(HERE / "run_in_turn.py", ranks, command, log, runs=len(runs))


def next_runs(runs: Sequence[tuple[str, list[str]]]) -> list[str]:
    """The runner's arguments for ``runs``: ``--next SCRIPT ARGS...`` or ``--copy FROM TO``."""
    found = []
    for script, args in runs:
        found += [COPY, *args] if script == COPY else ["--next", str(EXAMPLES / script), *args]
    return found


class Shared:
    """A module's shared launches: a failed run fails its own tests, each naming its scenario.

    ``run(name, launcher, *args)`` keeps a launch's error instead of raising it in a module
    fixture (which would error every test alike); each test calls ``check`` before its
    assertions, which fails naming the scenario when one of its runs did not end.
    """

    def __init__(self, work: Path) -> None:
        self.work = work
        self.launched: set[str] = set()
        self.errors: dict[str, str] = {}

    def run(self, name: str, launcher: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        self.launched.add(name)
        try:
            launcher(*args, **kwargs)
        except AssertionError as error:
            self.errors[name] = str(error)

    def ended(self, out: Path) -> bool:
        """Whether every run into ``out`` (its ``--out``) ended on every rank (the launches'
        journals: tests/frameworks/run_twice.py), and at least one ran."""
        started: Counter[tuple[str, str, int]] = Counter()
        ended: Counter[tuple[str, str, int]] = Counter()
        for journal in self.work.glob("*.journal"):
            for line in journal.read_text().splitlines():
                row = json.loads(line)
                if row["out"] == str(out):
                    key = (journal.name, row["run"], int(row["world"]))
                    (ended if row["ended"] else started)[key] += 1
        return bool(started) and all(ended[key] == key[2] for key in started)

    def check(self, scenario: str, launches: Sequence[str], outs: Sequence[Path]) -> None:
        """Fail naming ``scenario`` unless each of ``launches`` was made and every run into
        one of ``outs`` ended on every rank."""
        if not self.errors:
            return
        not_made = [name for name in launches if name not in self.launched]
        unfinished = [out.name for out in outs if not self.ended(out)]
        if not_made or unfinished:
            raise AssertionError(
                f"{scenario} did not finish in its shared launches (launches not made:"
                f" {not_made}, runs that did not end: {unfinished}):\n"
                + "\n".join(f"{name}: {error}" for name, error in self.errors.items())
            )


def launch(path: Path, ranks: int, args: list[str], log: Path, runs: int = 1) -> None:
    """Run the script at ``path`` on ``ranks`` processes (gloo on 127.0.0.1); fail, never hang.

    ``runs`` is how many runs the launch makes in turn: each may take ``TIMEOUT``.
    """
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
    env["DETSAMPLERS_TEST_JOURNAL"] = str(log.with_suffix(".journal"))  # runs that ended
    code = run_agent(
        command, log, env, TIMEOUT + 90 * max(0, runs - 3)
    )  # a hang fails with every process's stacks
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
