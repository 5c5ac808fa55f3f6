"""The loaders' worker processes: shielded from stop signals, released when the rank fails.

NOTE [ failing rank exits ]
The stop agreement (NOTE [ stop agreement ]) needs the loaders' worker processes to live
through a SIGTERM that torchrun's agent or Slurm sends to a rank's whole process group,
so :func:`shield_workers` gives each worker a handler for the stop signals instead of
torch's default (a worker dies of them, and the next batch raises). That handler alone
would make a failing rank hang: when ``fit`` raises (a bug in ``train_batch``, a peer
rank lost and gloo's "Connection reset by peer"), the traceback still holds the loader's
iterator, so at interpreter exit ``multiprocessing`` ends the workers with SIGTERM and
waits for them; a worker that ignores SIGTERM is waited for forever, and torchrun never
sees the rank fail.

So the shield is conditional. Every ``fit`` owns one *failure flag*, a byte of shared
memory that its workers inherit (fork) or receive (spawn, forkserver). A worker's handler
ignores a stop signal while the flag is clear and its parent alive; ``fit`` sets the flag
when it raises anything (``BaseException``: a ``KeyboardInterrupt`` too), and from then on
a stop signal ends the worker at once, with status 0 (so that torch's SIGCHLD check in
the parent reports nothing of its own). The exit of the failing process then sends that
SIGTERM and returns within seconds, with the exception's non-zero status; a pause that
the ranks agreed on never sets the flag and keeps its workers.

A worker that ends inside a handler must not take a lock of its parent's with it. torch's
worker checks its ``done_event`` (a ``multiprocessing`` Event, whose Condition is a
semaphore shared with the parent) once per index; a stop signal landing inside that check
ended the worker with the semaphore held, and the parent's next ``_shutdown_workers`` (an
explicit stop, or the iterator's ``__del__`` in a process that goes on after ``fit``
raised) waited in ``done_event.set()`` forever, torch's SIGCHLD check being silent for a
status 0. So :class:`ShieldedInit` finds that event in torch's worker loop, and the handler
releases whatever part of it this process holds (``SemLock._count``) before ``os._exit``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from multiprocessing.sharedctypes import RawValue
from types import FrameType
from typing import Any

__all__ = ["ShieldedInit", "failure_flag", "shield_workers"]


def failure_flag() -> Any:
    """A shared byte that a ``fit`` sets when it fails, read by its loaders' workers.

    Examples:
        >>> flag = failure_flag()
        >>> flag.value
        False
    """
    return RawValue(ctypes.c_bool, False)


def _shared_locks() -> list[Any]:
    """The semaphores of torch's ``done_event`` in the worker loop that calls this, if any.

    A worker holds them only inside ``done_event.is_set()``; the parent takes them in
    ``done_event.set()`` (NOTE [ failing rank exits ]).

    Examples:
        >>> _shared_locks()  # not inside a torch worker
        []
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_worker_loop":
            event = frame.f_locals.get("done_event")
            condition = getattr(event, "_cond", None)
            locks = [getattr(condition, "_lock", None), getattr(event, "_flag", None)]
            return [lock for lock in locks if hasattr(lock, "_semlock")]
        frame = frame.f_back
    return []


class _Handler:
    """A worker's handler of the stop signals (NOTE [ failing rank exits ])."""

    def __init__(self, failed: Any, shared: list[Any]) -> None:
        self.failed = failed
        self.parent = os.getppid()
        self.shared = shared  # torch's done_event semaphores, from _shared_locks()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.failed.value or os.getppid() != self.parent:
            for lock in self.shared:  # held only if the signal landed inside is_set()
                if lock._semlock._count() > 0:
                    lock.release()
            os._exit(0)


class ShieldedInit:
    """A ``worker_init_fn``: shield the stop signals, then run the user's (picklable)."""

    def __init__(self, signals: tuple[signal.Signals, ...], failed: Any, user: Any) -> None:
        self.signals = signals
        self.failed = failed
        self.user = user

    def __call__(self, worker_id: int) -> None:
        if self.signals:
            handler = _Handler(self.failed, _shared_locks())
            for number in self.signals:
                signal.signal(number, handler)
        if self.user is not None:
            self.user(worker_id)


def shield_workers(loader: Any, signals: tuple[signal.Signals, ...], failed: Any) -> Any:
    """Make ``loader``'s workers live through ``signals`` until ``failed`` is set.

    Returns ``loader``, whose ``worker_init_fn`` now wraps the user's.

    Examples:
        >>> import signal, torch.utils.data as tud
        >>> loader = tud.DataLoader(range(4), num_workers=1)
        >>> loader = shield_workers(loader, (signal.SIGTERM,), failure_flag())
        >>> loader.worker_init_fn.signals
        (<Signals.SIGTERM: 15>,)
    """
    user = getattr(loader, "worker_init_fn", None)
    workers = getattr(loader, "num_workers", 0)
    if signals and workers and not isinstance(user, ShieldedInit):
        loader.worker_init_fn = ShieldedInit(signals, failed, user)
    return loader
