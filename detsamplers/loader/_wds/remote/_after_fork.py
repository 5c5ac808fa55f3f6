"""A forked DataLoader worker must not unregister its parent's sockets from the parent's epoll.

NOTE [ fsspec loop after fork ]
fsspec runs every async filesystem (s3fs, HTTP, gcsfs) on one event loop in a thread of
the process. A DataLoader worker started by ``fork`` inherits that loop object with its
``epoll`` file descriptor, which refers to the *same* kernel epoll instance as the
parent's, and the parent's pooled keep-alive connections. fsspec gives the child a new
loop, but the parent's filesystem objects still live in the child, and when the child
drops or collects them their finalizers close their connections, and each close
unregisters the socket from the old loop's selector: an ``epoll_ctl(DEL)`` on the
parent's epoll instance. The parent's next request on that pooled connection then never
sees its answer and waits the whole ``timeout`` (60 s by default) before a retry: every
S3 or HTTP build or read in the main process after a loader with workers did.

So when this package first reads a remote file it registers an ``os.register_at_fork``
hook: before a fork it notes fsspec's loop, and in the child it gives that (dead) loop a
fresh selector of the child's own and closes the child's copy of the old one. Whatever
the inherited objects close in the child then touches only the child's epoll instance;
the parent's loop, sockets and selector are never changed.
"""

from __future__ import annotations

import os
import selectors
import threading
from typing import Any

__all__ = ["guard_fork"]

_state: dict[str, Any] = {"registered": False, "loops": []}
_lock = threading.Lock()


def _before() -> None:
    try:
        import fsspec.asyn
    except ImportError:  # pragma: no cover - registered only once fsspec was imported
        return
    _state["loops"] = [loop for loop in fsspec.asyn.loop if loop is not None]


def _in_child() -> None:
    for loop in _state["loops"]:
        old = getattr(loop, "_selector", None)
        if old is None:
            continue
        loop._selector = selectors.DefaultSelector()
        old.close()  # the child's descriptor only: the parent's epoll instance lives on
    _state["loops"] = []


def _after_in_parent() -> None:
    _state["loops"] = []


def guard_fork() -> None:
    """Register the hooks of NOTE [ fsspec loop after fork ] once per process.

    Examples:
        >>> guard_fork(); guard_fork()  # idempotent
        >>> _state["registered"]
        True
    """
    with _lock:
        if _state["registered"]:
            return
        os.register_at_fork(
            before=_before, after_in_child=_in_child, after_in_parent=_after_in_parent
        )
        _state["registered"] = True
