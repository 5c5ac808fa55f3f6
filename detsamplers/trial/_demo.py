"""``python -m detsamplers demo``: pause 2 ranks midway, resume on 1, verify the batches.

Four torchrun launches of the demo trial, ``examples/demo_trial.py`` (gloo on 127.0.0.1):

1. an uninterrupted reference run on ``ranks`` ranks;
2. the full run again, paused by preemption: once the last rank has trained ``pause_at``
   batches it gets SIGTERM (as ``kill`` on its pid, or a cluster's preemption, would send
   it), and every rank stops after the same batch, checkpoints and exits 0;
3. a resume from a copy of that checkpoint with ``latest_checkpoint="auto"`` on
   ``resume_ranks`` ranks, to the end;
4. the command of step 2 relaunched, resuming with ``"auto"`` on ``ranks`` ranks.

Each rank logs the indices of its share of every global batch; the demo rebuilds the
global batches (rank ``r`` of ``W`` holds positions ``j * W + r``) and prints a
verification table. The exit status is 1 if any check fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ._checkpoint import find_latest_checkpoint

__all__ = [
    "DEMO_TRIAL",
    "descendants",
    "end_run",
    "examples_dir",
    "global_batches",
    "launch",
    "processes",
    "run_demo",
    "run_env",
    "seen_once_per_epoch",
    "torchrun",
]


#: The demo trial's module: ``examples/demo_trial.py``, run with the examples on the path.
DEMO_TRIAL = "demo_trial"
#: A folder holding ``demo_trial.py``, for an install without the repository's examples/.
EXAMPLES_ENV = "DETSAMPLERS_EXAMPLES"
#: How long the processes of a hung run get to print their stacks (:func:`end_run`).
STACKS_SECONDS = 10.0
#: The most of those stacks that an error message carries.
STACKS_CHARS = 40_000


def examples_dir() -> str:
    """The folder of the runnable examples that holds the demo trial.

    In order: the folder ``$DETSAMPLERS_EXAMPLES`` names; ``examples/`` beside the
    ``detsamplers`` folder (a checkout, or an editable install such as ``make install``);
    the copy a wheel carries, ``detsamplers/_examples/`` (setup.py puts it there).

    Raises:
        FileNotFoundError: none holds ``demo_trial.py``; the message says where to get it.
    """
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    given = os.environ.get(EXAMPLES_ENV)
    if given:
        candidates = [given]
    else:
        candidates = [os.path.join(os.path.dirname(package), "examples")]
        candidates.append(os.path.join(package, "_examples"))
    for folder in candidates:
        if os.path.isfile(os.path.join(folder, f"{DEMO_TRIAL}.py")):
            return folder
    where = f"${EXAMPLES_ENV}={given!r}" if given else f"{candidates[0]!r} (beside the package)"
    raise FileNotFoundError(
        f"the demo trial examples/{DEMO_TRIAL}.py is not in {where}, nor in the package: "
        "this install was built without the repository's examples/; run the demo from a "
        f"checkout (make demo), or set {EXAMPLES_ENV} to a folder holding a copy of "
        f"examples/{DEMO_TRIAL}.py"
    )


def run_env() -> dict[str, str]:
    """The environment of a torchrun launch: one thread per rank, the examples importable."""
    # PYTHONFAULTHANDLER: a hung run ended by end_run(process, log) prints where it hung.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    try:
        folder = examples_dir()
    except FileNotFoundError:
        return env  # a module of the caller's own (its launch fails by name if it is missing)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (folder, env.get("PYTHONPATH")) if p)
    return env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(
    ranks: int,
    args: list[str],
    module: str = DEMO_TRIAL,
    options: Sequence[str] | None = None,
) -> list[str]:
    """The torchrun command for ``module`` on ``ranks`` ranks of this node.

    ``options`` replace the single-node rendezvous on 127.0.0.1, e.g. with
    ``--nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:PORT``.
    """
    if options is None:
        options = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    return [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
        *options, "-m", module, *args,
    ]  # fmt: skip


def _stat(pid: int | str) -> tuple[str, int, int] | None:
    """``(state, parent, process group)`` of ``pid`` from Linux ``/proc``; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def processes() -> dict[int, tuple[str, int, int]]:
    """Every process's ``(state, parent, process group)`` by pid (Linux ``/proc``, else {})."""
    out = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        stat = _stat(entry) if entry.isdigit() else None
        if stat is not None:
            out[int(entry)] = stat
    return out


def descendants(pid: int) -> list[int]:
    """The processes below ``pid``, children first."""
    children: dict[int, list[int]] = {}
    for child, (_, parent, _) in processes().items():
        children.setdefault(parent, []).append(child)
    out, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        out.append(child)
        todo += children.get(child, [])
    return out


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive and not a zombie (Linux ``/proc``; elsewhere, False)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def _no_core_dump(pid: int) -> None:
    """Turn off core dumps of ``pid`` where the system lets us (Linux ``prlimit``)."""
    with contextlib.suppress(ImportError, AttributeError, OSError):
        import resource

        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))


def end_run(process: subprocess.Popen[Any], stacks_log: str | None = None) -> str:
    """SIGKILL a torchrun agent and every process below it (its ranks and their workers).

    With ``stacks_log``, the run's log, they are first frozen (SIGSTOP), then one at a
    time, the agent first and a worker after its rank, named in the log and sent SIGABRT
    with core dumps off: a Python process started with ``PYTHONFAULTHANDLER`` (as
    :func:`run_env` starts them) prints every thread's stack to its stderr, that log, and
    ends. Frozen until its turn, and ended before its children, none reacts to another's
    end (torch's check of its workers would raise in a rank whose worker died) before its
    own stacks are out; one at a time, their lines do not interleave. This takes at most
    ``STACKS_SECONDS``.

    Returns:
        What they printed into ``stacks_log`` meanwhile (at most ``STACKS_CHARS``), or
        ``""`` without it.
    """
    pids = [process.pid, *descendants(process.pid)]
    start = os.path.getsize(stacks_log) if stacks_log is not None else 0
    if stacks_log is not None:
        for _ in range(2):  # again for a process forked before its parent froze
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGSTOP)
            pids = [process.pid, *descendants(process.pid)]
        table = processes()
        deadline = time.monotonic() + STACKS_SECONDS
        for pid in pids:  # parents first: a rank before its workers
            parent = table.get(pid, ("", 0, 0))[1]
            with open(stacks_log, "a") as log:
                log.write(f"\n--- process {pid}, child of {parent} ---\n")
            _no_core_dump(pid)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGABRT)
                os.kill(pid, signal.SIGCONT)
            while time.monotonic() < deadline and _running(pid):
                time.sleep(0.02)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)  # frozen or not
    process.wait()
    if stacks_log is None:
        return ""
    with open(stacks_log, "rb") as f:
        f.seek(start)
        return f.read(STACKS_CHARS).decode(errors="replace")


def launch(
    ranks: int,
    args: list[str],
    log: str,
    module: str = DEMO_TRIAL,
    options: Sequence[str] | None = None,
    timeout: float = 600.0,
) -> float:
    """Run ``module`` on ``ranks`` ranks with torchrun; its output goes to ``log``; seconds.

    A run that does not exit within ``timeout`` seconds, or whose wait is interrupted
    (Ctrl-C, a test's time limit), is ended with :func:`end_run` after every process
    printed its stacks to ``log``; an interruption is raised again, with those stacks in
    a note.

    Raises:
        RuntimeError: torchrun exited non-zero, or did not exit within ``timeout``
            seconds (then the run, its ranks and their workers are killed, and the
            message holds their stacks): a hang fails.
    """
    command = torchrun(ranks, args, module, options)
    env = run_env()
    started = time.perf_counter()
    tail = stacks = ""
    with open(log, "a") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            returncode: int | str = process.wait(timeout=timeout)
        except BaseException as error:
            tail = _tail(log)
            stacks = end_run(process, stacks_log=log)
            if not isinstance(error, subprocess.TimeoutExpired):
                if hasattr(error, "add_note"):  # Python 3.11+
                    error.add_note(f"{module} on {ranks} ranks was stopped; its stacks:\n{stacks}")
                raise
            returncode = f"no exit within {timeout:g} s (killed)"
    if returncode != 0:
        if stacks:
            tail = f"{tail}\n--- the stacks of its processes when they were stopped ---\n{stacks}"
        else:
            tail = _tail(log)
        raise RuntimeError(f"{module} on {ranks} ranks exited with {returncode}:\n{tail}")
    return time.perf_counter() - started


def _tail(log: str) -> str:
    """The last 3,000 characters of ``log``."""
    with open(log, "rb") as f:
        return f.read().decode(errors="replace")[-3000:]


def global_batches(record_dir: str, ranks: int) -> dict[int, list[int]]:
    """The global batches a run trained, from its ranks' records (the last write wins).

    Examples:
        >>> d = tempfile.mkdtemp()
        >>> for r in range(2):
        ...     with open(os.path.join(d, f"records-rank{r}.jsonl"), "w") as f:
        ...         _ = f.write(json.dumps({"batch": 0, "rank": r, "indices": [r, r + 2]}))
        >>> global_batches(d, 2)
        {0: [0, 1, 2, 3]}
    """
    shares: dict[int, dict[int, list[int]]] = {}
    for rank in range(ranks):
        with open(os.path.join(record_dir, f"records-rank{rank}.jsonl")) as f:
            for line in f:
                row = json.loads(line)
                shares.setdefault(row["batch"], {})[rank] = row["indices"]
    out = {}
    for batch, by_rank in sorted(shares.items()):
        width = max(len(share) for share in by_rank.values())
        out[batch] = [
            by_rank[r][j] for j in range(width) for r in range(ranks) if j < len(by_rank[r])
        ]
    return out


def seen_once_per_epoch(batches: list[list[int]], records: int) -> bool:
    """Whether every complete epoch of the stream holds each record exactly once.

    Examples:
        >>> seen_once_per_epoch([[1, 0], [3, 2], [0, 1]], 4), seen_once_per_epoch([[0, 0]], 2)
        (True, False)
    """
    stream = [index for batch in batches for index in batch]
    epochs = len(stream) // records
    return epochs > 0 and all(
        sorted(stream[e * records : (e + 1) * records]) == list(range(records))
        for e in range(epochs)
    )


def _size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path))


def _resume_seconds(checkpoint_dir: str) -> float:
    with open(os.path.join(checkpoint_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return float([r for r in rows if r["type"] == "resume"][-1]["metrics"]["seconds"])


@dataclass
class Preempted:
    """What the SIGTERM step saw."""

    folder: str
    returncode: int
    stop_batch: int | None  # batches trained at the stop checkpoint
    last_batches: list[int]  # each rank's last batch index before the stop
    exit_seconds: float  # from SIGTERM to the exit of every rank (torchrun's exit)
    resume_seconds: float


def _rows(path: str) -> list[dict[str, Any]]:
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


def _preempt(
    ranks: int, pause_at: int, max_batches: int, common: list[str], folder: str, log: str
) -> tuple[int, float]:
    """Step 2: SIGTERM to the last rank once it trained ``pause_at``; exit status, seconds."""
    first = os.path.join(folder, "first")
    base = [f"--checkpoint-dir={folder}", *common, f"--max-batches={max_batches}", "--resume"]
    env = run_env()
    victim = os.path.join(first, f"records-rank{ranks - 1}.jsonl")
    command = torchrun(ranks, [*base, f"--record-dir={first}"])
    with open(log, "a") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        while process.poll() is None and len(_rows(victim)) < pause_at:
            time.sleep(0.005)
        signalled = time.perf_counter()
        if process.poll() is None:
            with open(os.path.join(first, f"pid-rank{ranks - 1}")) as f:
                os.kill(int(f.read()), signal.SIGTERM)
        try:
            returncode = process.wait(timeout=600)
        except subprocess.TimeoutExpired:
            end_run(process, stacks_log=log)
            returncode = -signal.SIGKILL
    return returncode, time.perf_counter() - signalled


def _relaunch(
    ranks: int,
    max_batches: int,
    common: list[str],
    folder: str,
    log: str,
    preempted: tuple[int, float],
) -> Preempted:
    """Step 4: the preempted command again, on ``ranks`` ranks; what steps 2 and 4 saw."""
    first, second = os.path.join(folder, "first"), os.path.join(folder, "second")
    base = [f"--checkpoint-dir={folder}", *common, f"--max-batches={max_batches}", "--resume"]
    weights = os.path.join(second, "weights.pt")
    again = [*base, f"--record-dir={second}", f"--weights-out={weights}"]
    resume_seconds = launch(ranks, again, log)
    files = [os.path.join(first, f"records-rank{rank}.jsonl") for rank in range(ranks)]
    last = [max((r["batch"] for r in _rows(path)), default=-1) for path in files]
    returncode, exit_seconds = preempted
    stop_batch = _stop_batch(folder)
    return Preempted(folder, returncode, stop_batch, last, exit_seconds, resume_seconds)


def _stop_batch(folder: str) -> int | None:
    """Batches trained at the newest stop checkpoint in ``folder``, if any."""
    stops = [r for r in _rows(os.path.join(folder, "metrics.jsonl")) if r["type"] == "stop"]
    return int(stops[-1]["batches_trained"]) if stops else None


def _preemption_checks(
    run: Preempted, expected: dict[int, list[int]], ranks: int, max_batches: int, reference: str
) -> list[Check]:
    """The SIGTERM step's rows of the verification table."""
    first, second = os.path.join(run.folder, "first"), os.path.join(run.folder, "second")
    trained = {
        rank: [r["batch"] for d in (first, second)
               for r in _rows(os.path.join(d, f"records-rank{rank}.jsonl"))]
        for rank in range(ranks)
    }  # fmt: skip
    once = all(sorted(batches) == list(range(max_batches)) for batches in trained.values())
    stitched = {**global_batches(first, ranks), **global_batches(second, ranks)}
    same = sum(stitched.get(b) == expected.get(b) for b in range(max_batches))
    a = torch.load(os.path.join(reference, "weights.pt"), weights_only=True)
    b = torch.load(os.path.join(second, "weights.pt"), weights_only=True)
    stop = run.stop_batch
    return [
        Check("SIGTERM to one rank: every rank exited 0", run.returncode == 0,
              f"torchrun exit status {run.returncode}, {run.exit_seconds:.2f} s after the signal"),
        Check("SIGTERM to one rank: all stopped after one batch",
              stop is not None and run.last_batches == [stop - 1] * ranks,
              f"checkpoint at batch {stop}; last batch per rank {run.last_batches}"),
        Check("SIGTERM + auto resume: no batch twice or skipped", once,
              f"{ranks} ranks x {max_batches} batches over both launches"),
        Check("SIGTERM + auto resume: global batches identical", same == max_batches,
              f"{same}/{max_batches} global batches"),
        Check("SIGTERM + auto resume: final weights bit-identical",
              all(torch.equal(a[k], b[k]) for k in a), f"{len(a)} tensors"),
    ]  # fmt: skip


@dataclass
class Check:
    """One row of the verification table."""

    name: str
    passed: bool | None  # None: information only
    detail: str


def run_demo(
    ranks: int = 2,
    pause_at: int = 20,
    resume_ranks: int = 1,
    max_batches: int = 48,
    num_workers: int = 1,
    workdir: str | None = None,
    echo: Callable[[str], Any] = print,
) -> bool:
    """Run the four launches and print the verification table; True if every check passes."""
    records, global_batch = 256, 16
    if not 0 < pause_at < max_batches:
        raise ValueError(
            f"pause_at should be in (0, max_batches), but got pause_at={pause_at} "
            f"with max_batches={max_batches}"
        )
    for name, value in (("ranks", ranks), ("resume_ranks", resume_ranks)):
        if value < 1 or global_batch % value:
            raise ValueError(
                f"{name} should divide the global batch of {global_batch} records, but got "
                f"{name}={value}; use 1, 2, 4, 8 or 16"
            )
    if num_workers < 0:
        raise ValueError(f"num_workers should be >= 0, but got num_workers={num_workers}")
    examples_dir()  # the demo trial is found before anything runs (a wheel: $DETSAMPLERS_EXAMPLES)
    work = workdir or tempfile.mkdtemp(prefix="detsamplers-demo-")
    common = [f"--num-workers={num_workers}", f"--records={records}"]
    common.append(f"--global-batch-size={global_batch}")
    log = os.path.join(work, "runs.log")
    reference, paused = os.path.join(work, "reference"), os.path.join(work, "paused")
    sigterm = os.path.join(work, "sigterm")
    weights = os.path.join(reference, "weights.pt")
    args = [f"--checkpoint-dir={reference}", f"--record-dir={reference}", *common]
    seconds = launch(
        ranks, [*args, f"--max-batches={max_batches}", f"--weights-out={weights}"], log
    )
    echo(f"[1/4] uninterrupted reference on {ranks} rank(s): {seconds:.1f} s")
    stopped = _preempt(ranks, pause_at, max_batches, common, sigterm, log)
    echo(f"[2/4] SIGTERM to rank {ranks - 1} after batch {pause_at} on {ranks} rank(s): "
         f"exit {stopped[0]}, {stopped[1]:.1f} s after it")  # fmt: skip
    pause = _stop_batch(sigterm) or pause_at  # where the preempted run stopped
    shutil.copytree(sigterm, paused)  # its checkpoints, and its records in first/
    weights = os.path.join(paused, "second", "weights.pt")
    args = [f"--checkpoint-dir={paused}", f"--record-dir={os.path.join(paused, 'second')}"]
    args += [*common, f"--max-batches={max_batches}", "--resume", f"--weights-out={weights}"]
    resume_seconds = launch(resume_ranks, args, log)
    echo(f"[3/4] resumed from the latest checkpoint on {resume_ranks} rank(s): "
         f"{resume_seconds:.1f} s")  # fmt: skip
    preempted = _relaunch(ranks, max_batches, common, sigterm, log, stopped)
    echo(f"[4/4] relaunched with latest_checkpoint=\"auto\" on {ranks} rank(s): "
         f"{preempted.resume_seconds:.1f} s")  # fmt: skip

    expected = global_batches(reference, ranks)
    first = global_batches(os.path.join(paused, "first"), ranks)
    second = global_batches(os.path.join(paused, "second"), resume_ranks)
    resumed = {**{b: v for b, v in first.items() if b < pause}, **second}
    same = [b for b in range(max_batches) if resumed.get(b) == expected.get(b)]
    latest = find_latest_checkpoint(paused)
    pause_ckpt = os.path.join(paused, f"batch-{pause:06d}")
    checks = [
        Check("records seen exactly once per epoch (reference)",
              seen_once_per_epoch([expected[b] for b in sorted(expected)], records),
              f"{len(expected) * global_batch // records} epochs of {records} records"),
        Check("records seen exactly once per epoch (paused + resumed)",
              seen_once_per_epoch([resumed[b] for b in sorted(resumed)], records),
              f"{ranks} ranks for batches 0-{pause - 1}, {resume_ranks} after"),
        Check("resume started at the pause point", min(second, default=-1) == pause,
              f"first resumed batch {min(second, default=-1)}"),
        Check("global batches identical to the uninterrupted run",
              len(same) == max_batches == len(expected),
              f"{len(same)}/{max_batches} global batches of {global_batch} records"),
        Check("latest checkpoint is the final one", latest is not None
              and latest.endswith(f"batch-{max_batches:06d}"), os.path.basename(latest or "none")),
    ]  # fmt: skip
    if resume_ranks == ranks:
        a = torch.load(os.path.join(reference, "weights.pt"), weights_only=True)
        b = torch.load(os.path.join(paused, "second", "weights.pt"), weights_only=True)
        equal = all(torch.equal(a[k], b[k]) for k in a)
        checks.append(Check("final weights bit-identical", equal, f"{len(a)} tensors"))
    else:
        why = f"not expected: world size {ranks} -> {resume_ranks} re-seeds dropout"
        checks.append(Check("final weights bit-identical", None, why))
    checks += _preemption_checks(preempted, expected, ranks, max_batches, reference)
    size = _size(pause_ckpt) if os.path.isdir(pause_ckpt) else 0
    checks.append(Check("checkpoint size", None, f"{size / 1024:.1f} KiB ({ranks} rank files)"))
    checks.append(Check("time to resume", None,
                        f"{_resume_seconds(paused):.2f} s in fit to the first resumed batch; "
                        f"{resume_seconds:.1f} s launch to exit"))  # fmt: skip

    width = max(len(check.name) for check in checks)
    echo("")
    echo(f"{'check':<{width}}  result  detail")
    for check in checks:
        mark = {True: "PASS", False: "FAIL", None: "info"}[check.passed]
        echo(f"{check.name:<{width}}  {mark:<6}  {check.detail}")
    ok = all(check.passed is not False for check in checks)
    echo("")
    if ok and workdir is None:
        shutil.rmtree(work, ignore_errors=True)
        echo("all checks passed")
    else:
        echo(f"{'all checks passed' if ok else 'SOME CHECKS FAILED'}; the runs are in {work}")
    return ok
