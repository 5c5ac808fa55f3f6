"""Facts about unchanged local files, kept for the process's next open of them.

NOTE [ facts of unchanged files ]
A resume opens the same corpus again in the same process (a trainer's evaluation loop, a
retry, a benchmark's repeated resume), and each open repeated work whose answer depends
only on the files' bytes: the sampled check of the ends cache (about 130 ``pread``s), a
``concat`` order's block starts (one read per block), a ``pack`` window's bins (its
documents' ends read and packed again). Each such answer is kept here under the files'
identities: ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` of every file it was
computed from, taken *before* it was computed. A later open recomputes the identities (one
``stat`` a file) and uses the answer only if they are all equal.

Why that suffices: a write to a file, a rename over it or a ``utime`` sets its
``st_ctime_ns`` to the clock of that moment, and nothing but the kernel sets it (a forger who
restores ``st_mtime_ns`` cannot restore it). The clock is coarse (a few ms), so a file
written in the same tick as its identity was taken could change unseen: as git does with
"racily clean" entries, an answer is kept only when every file's ``st_ctime_ns`` is at
least ``RACY_NS`` older than the moment the identities were taken; a newer file is checked
at every open until it has aged. What is kept is small (flags, O(documents / B) block
starts, a few packed windows, each store bounded by ``KEPT`` entries, least recently used
out first) and holds no map or descriptor, so a file deleted stays freed.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["KEPT", "RACY_NS", "Remembered", "identities"]

#: Entries each store keeps at most.
KEPT = 64
#: How much older than the identities' moment a file's ``st_ctime_ns`` must be (100 ms).
RACY_NS = 100_000_000

Identity = tuple[int, int, int, int, int]


def identities(paths: Sequence[Path | str]) -> tuple[tuple[Identity, ...], bool] | None:
    """The identities of local ``paths``, and whether all are old enough to key an answer.

    ``None`` if a path is remote (a URL) or cannot be stat'ed: nothing is remembered then.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "t.bin"
        >>> _ = path.write_bytes(b"12")
        >>> found = identities([path])
        >>> found is not None and found[0][0][2], found is not None and found[1]
        (2, False)
    """
    now = time.time_ns()
    out: list[Identity] = []
    for path in paths:
        if not isinstance(path, Path):
            return None
        try:
            found = os.stat(path)
        except OSError:
            return None
        out.append((found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns,
                    found.st_ctime_ns))  # fmt: skip
    settled = all(identity[4] <= now - RACY_NS for identity in out)
    return tuple(out), settled


class Remembered:
    """A bounded, thread-safe store of answers keyed by files' identities.

    Examples:
        >>> store = Remembered()
        >>> store.get(("a", 1)) is None
        True
        >>> store.put(("a", 1), 42)
        >>> store.get(("a", 1))
        42
    """

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The answer kept under ``key``, or ``None``."""
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: Hashable, value: Any) -> None:
        """Keep ``value`` under ``key`` (the least recently used entry goes past ``kept``)."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._kept:
                self._items.popitem(last=False)

    def clear(self) -> None:
        """Forget every answer."""
        with self._lock:
            self._items.clear()
