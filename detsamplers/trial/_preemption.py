"""Pausing a run: stop signals, the ranks' stop agreement, automatic resume, the metrics log.

NOTE [ stop agreement ]
A stop has two sources: a stop signal (SIGTERM and SIGUSR1 by default, as Slurm and
Kubernetes send them before a kill) caught by :class:`StopSignals`, which only sets a
flag, and ``context.set_stop_requested(True)`` from the trial or a callback. Either may
reach one rank only (``kill`` on one pid, early stopping decided on one rank), so the
ranks agree: at a *check* every rank contributes its flag to one ``all_reduce(MAX)`` and
all of them stop after the same batch, checkpoint there and return from ``fit``.

A check costs one small collective (0.2 to 1.8 ms with gloo on loopback on our shared
2-core machine, ``benchmarks/preemption_table.py``), so with several ranks
:class:`StopAgreement` spaces the checks. Each check also carries every rank's seconds
per batch since the last check and the cost of that check; from the largest time per
batch and the smallest cost (a rank that arrives early also waits for the others, which
is their imbalance, not the check's cost), the same numbers on every rank and so the
same schedule, it places the next check so that checks cost at most 1% of training
time, and at most about a second of training apart.
A check also follows every validation, so that early stopping decided there takes
effect after that very batch. A single process checks after every batch, for free.
``stop_check_period`` fixes the spacing instead.

The handler does nothing but record the signal, so a second signal during the
checkpoint write is absorbed and cannot interrupt it; the previous handlers come back
when ``fit`` returns or raises; if it raises after a signal came, the signal is sent again
so that it takes its usual effect. The loaders' worker processes ignore the stop signals
(:func:`shield_workers`): torchrun's agent and Slurm signal a worker's whole process
group, and torch's workers die on a SIGTERM that does not come from their parent, which
makes the next batch raise. They still exit with the main process, and at once once
``fit`` has failed (NOTE [ failing rank exits ]).
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from collections.abc import Iterable
from types import FrameType, TracebackType
from typing import Any

import torch
import torch.distributed as dist

from . import _shield
from ._checkpoint import find_latest_checkpoint, read_metadata
from ._distributed import DistributedContext

__all__ = [
    "AUTO",
    "DEFAULT_STOP_SIGNALS",
    "REQUESTED",
    "SIGNALLED",
    "STOP_REASONS",
    "StopAgreement",
    "StopSignals",
    "resolve_latest",
    "shield_workers",
    "truncate_metrics",
]

AUTO = "auto"
DEFAULT_STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1)
REQUESTED, SIGNALLED = 1, 2  # a rank's stop code; the ranks agree on the largest
STOP_REASONS = {REQUESTED: "stop requested", SIGNALLED: "signal"}
_BUDGET = 0.01  # the share of training time the checks may cost
_MAX_SECONDS_APART = 1.0  # ... and the most training time between two checks


def _check_signals(stop_signals: Any) -> tuple[signal.Signals, ...]:
    if isinstance(stop_signals, (str, bytes)) or not isinstance(stop_signals, Iterable):
        raise TypeError(
            "stop_signals should be a tuple of signals, e.g. (signal.SIGTERM, signal.SIGUSR1), "
            f"but got stop_signals={stop_signals!r}"
        )
    out = []
    for value in stop_signals:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(
                "stop_signals should hold signal numbers such as signal.SIGTERM, but got "
                f"{value!r} of type {type(value).__name__}"
            )
        try:
            number = signal.Signals(value)
        except ValueError:
            raise ValueError(
                f"stop_signals should hold valid signal numbers, but got {value!r}"
            ) from None
        if number in (signal.SIGKILL, signal.SIGSTOP):
            raise ValueError(
                f"stop_signals cannot hold {number.name}, which no process can catch; "
                "use SIGTERM or SIGUSR1"
            )
        out.append(number)
    return tuple(out)


class StopSignals:
    """While entered, the ``stop_signals`` set a flag instead of ending the process.

    Handlers can only be installed from the main thread; elsewhere the signals keep their
    handlers and only stop requests stop the run.

    Examples:
        >>> import os, signal
        >>> with StopSignals((signal.SIGUSR1,)) as signals:
        ...     os.kill(os.getpid(), signal.SIGUSR1)
        ...     signals.received, signals.count
        ('SIGUSR1', 1)
        >>> signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL
        True
    """

    def __init__(self, stop_signals: Iterable[int] = DEFAULT_STOP_SIGNALS) -> None:
        self.signals = _check_signals(stop_signals)
        self.received: str | None = None
        self.received_at: float | None = None
        self.count = 0
        self._previous: dict[signal.Signals, Any] = {}
        self._failed: Any = None

    @property
    def failed(self) -> Any:
        """The failure flag of the loaders' workers (NOTE [ failing rank exits ])."""
        if self._failed is None:
            self._failed = _shield.failure_flag()
        return self._failed

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.received is None:
            self.received = signal.Signals(signum).name
            self.received_at = time.perf_counter()

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for number in self.signals:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()
        if error is not None and self._failed is not None:
            self._failed.value = True  # the workers now exit on a stop signal
        if error is not None and self.received is not None:
            # ``fit`` failed before it could pause (a rank died, say): the signal gets its
            # usual effect now, so that torchrun's agent need not wait to kill the process.
            os.kill(os.getpid(), signal.Signals[self.received])


def shield_workers(loader: Any, signals: StopSignals) -> Any:
    """Make ``loader``'s workers live through the stop signals; returns ``loader``.

    Until ``fit`` fails: then a stop signal ends them (NOTE [ failing rank exits ]).

    Examples:
        >>> import signal, torch.utils.data as tud
        >>> loader = shield_workers(tud.DataLoader(range(4), num_workers=1), StopSignals())
        >>> loader.worker_init_fn.signals == (signal.SIGTERM, signal.SIGUSR1)
        True
    """
    if not signals.signals or not getattr(loader, "num_workers", 0):
        return loader
    return _shield.shield_workers(loader, signals.signals, signals.failed)


class StopAgreement:
    """When the ranks check for a stop, and the check itself (NOTE [ stop agreement ]).

    Args:
        distributed: The ranks.
        start: Batches trained when the loop starts.
        period: Check every ``period`` batches; ``None`` spaces the checks by their
            measured cost.

    Examples:
        >>> agreement = StopAgreement(DistributedContext(), start=0, period=None)
        >>> agreement.due(1), agreement.agree(1, 0), agreement.agree(2, REQUESTED)
        (True, 0, 1)
    """

    def __init__(self, distributed: DistributedContext, start: int, period: int | None) -> None:
        self.distributed = distributed
        self.period = period
        self.checks = 0
        self._next = start + (period or 1)
        self._since_batches = start
        self._since = time.perf_counter()
        self._cost = 0.0
        self._group: Any = None
        if distributed.get_size() > 1:  # a CPU group of its own, also beside nccl
            self._group = dist.new_group(backend="gloo")

    def due(self, batches: int) -> bool:
        """Whether the ranks check after ``batches`` batches (always, on one process)."""
        return self.distributed.get_size() == 1 or batches >= self._next

    def agree(self, batches: int, code: int) -> int:
        """The largest stop code of the ranks, 0 to go on (a collective: every rank calls it).

        ``code`` is this rank's: 0, :data:`REQUESTED` or :data:`SIGNALLED`.
        """
        self.checks += 1
        if self.distributed.get_size() == 1:
            return code
        started = time.perf_counter()
        per_batch = (started - self._since) / max(1, batches - self._since_batches)
        # The smallest cost: a rank that arrives early also waits for the others, which is
        # their imbalance, not the check's cost; the last rank to arrive measures the check.
        values = torch.tensor([float(code), per_batch, -self._cost], dtype=torch.float64)
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self._group)
        flag, per_batch, cost = values.tolist()
        cost = -cost
        self._since = time.perf_counter()
        self._cost = self._since - started
        self._since_batches = batches
        self._next = batches + self._spacing(per_batch, cost)
        return int(flag)

    def _spacing(self, per_batch: float, cost: float) -> int:
        if self.period is not None:
            return self.period
        if per_batch <= 0:
            return 1
        cheap = math.ceil(cost / (_BUDGET * per_batch))
        soon = math.floor(_MAX_SECONDS_APART / per_batch)
        return max(1, min(cheap, soon))


def resolve_latest(
    latest_checkpoint: Any, checkpoint_dir: str, distributed: DistributedContext
) -> str | None:
    """The checkpoint to resume from; ``"auto"`` is rank 0's newest complete one.

    A collective for ``"auto"``: rank 0 looks, every rank checks that it sees the same
    complete folder, so a checkpoint directory that is not shared fails here.

    Examples:
        >>> import tempfile
        >>> resolve_latest("auto", tempfile.mkdtemp(), DistributedContext()) is None
        True
        >>> resolve_latest(5, "checkpoints", DistributedContext())
        Traceback (most recent call last):
        ...
        TypeError: latest_checkpoint should be a checkpoint folder path (str or os.PathLike), "auto" or None, but got latest_checkpoint=5 of type int; pass find_latest_checkpoint(checkpoint_dir), or "auto" to resume the newest checkpoint in checkpoint_dir
    """  # noqa: E501
    if latest_checkpoint is None or latest_checkpoint == AUTO:
        pass
    elif isinstance(latest_checkpoint, bytes) or not isinstance(
        latest_checkpoint, (str, os.PathLike)
    ):
        raise TypeError(
            "latest_checkpoint should be a checkpoint folder path (str or os.PathLike), "
            f'"{AUTO}" or None, but got latest_checkpoint={latest_checkpoint!r} of type '
            f"{type(latest_checkpoint).__name__}; pass find_latest_checkpoint(checkpoint_dir), "
            f'or "{AUTO}" to resume the newest checkpoint in checkpoint_dir'
        )
    if latest_checkpoint != AUTO:
        return None if latest_checkpoint is None else os.fspath(latest_checkpoint)
    here = find_latest_checkpoint(checkpoint_dir) if distributed.is_chief else None
    found: str | None = distributed.broadcast(here)
    if found is not None and read_metadata(found) is None:
        raise FileNotFoundError(
            f"rank {distributed.get_rank()} cannot read the checkpoint {found!r} that rank 0 "
            "resumes from; checkpoint_dir should be a directory every rank shares (one node, "
            "or a shared filesystem mounted at the same path on every node)"
        )
    return found


def truncate_metrics(checkpoint_dir: str, batches_trained: int) -> int:
    r"""Drop the rows a resume from ``batches_trained`` supersedes; the number dropped.

    Rows after the checkpoint belong to training that the resume repeats, and a
    ``"resume"`` row at the checkpoint belongs to an earlier resume that crashed before
    its next checkpoint; both go, so that every batch is reported once. The file is
    rewritten through a temporary file and ``os.replace``.

    Examples:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> rows = [("training", 4), ("resume", 4), ("training", 8)]
        >>> with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        ...     for kind, b in rows:
        ...         _ = f.write(json.dumps({"type": kind, "batches_trained": b}) + "\n")
        >>> truncate_metrics(folder, 4)
        2
    """
    path = os.path.join(checkpoint_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        return 0
    with open(path) as f:
        lines = f.readlines()
    kept = []
    for line in lines:
        try:
            row = json.loads(line)
            batches, kind = int(row["batches_trained"]), row["type"]
        except (ValueError, KeyError, TypeError, OverflowError):
            continue  # a line cut short by a crash
        if batches < batches_trained or (batches == batches_trained and kind != "resume"):
            kept.append(line if line.endswith("\n") else line + "\n")
    if len(kept) != len(lines):
        temporary = path + ".tmp"
        with open(temporary, "w") as f:
            f.writelines(kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    return len(lines) - len(kept)
