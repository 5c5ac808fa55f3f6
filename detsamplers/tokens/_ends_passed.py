"""That an ends cache passed its sampled check, kept on disk for a fresh process's open.

NOTE [ ends check kept on disk ]
An open checks a cached ``<sidecar>.ends.npy`` against its sidecar at ``ENDS_SAMPLES``
positions (NOTE [ cached document ends ]: about 130 ``pread``s). A process remembers that
the check passed for its next open of unchanged files (NOTE [ facts of unchanged files ]),
but a preempted job resumes in a *fresh* process, which checked again. That it passed is
written once beside the cache, ``<sidecar>.ends.npy.passed``: ``WORDS`` raw int64 (a magic
number, a version, the count of ends, and the identities ``(st_dev, st_ino, st_size,
st_mtime_ns, st_ctime_ns)`` of the token file, the sidecar and the cache, taken *before*
the check), written only when all three are settled (older than ``RACY_NS``), exactly as
the process keeps it in memory.

A later open skips the sampled check only if the file is a regular file of exactly that
size (opened without blocking, read by one bounded ``read``) and every value equals what
the files give now. Anything else (stale, truncated, foreign, another corpus's, a folder,
a FIFO, a folder refusing writes) is ignored: the check runs, and a pass rewrites it.

It vouches for the sampled check only, never for what makes a cache harmless: the cache's
first end is still at least 1, its last still the token count, and its increase is still
checked (whole at open up to ``CHECK_WHOLE`` ends, per region on first read above it,
NOTE [ lazy ends check ]). A forged marker bound to the files is thus worth what a forged
cache bound to them is (NOTE [ cached document ends ]: a valid partition of the tokens).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["WORDS", "passed", "passed_file", "store_passed"]

_MAGIC = 0x6465747061737331  # "detpass1"
_VERSION = 1
#: Values in a marker: magic, version, count, then three identities of five values.
WORDS = 3 + 3 * 5


def passed_file(cache: Path) -> Path:
    """Where the marker of the ends cache ``cache`` is kept.

    Examples:
        >>> passed_file(Path("/d/t.lengths.npy.ends.npy")).name
        't.lengths.npy.ends.npy.passed'
    """
    return cache.with_name(f"{cache.name}.passed")


def _values(count: int, seen: Sequence[Sequence[int]]) -> list[int]:
    return [_MAGIC, _VERSION, count, *(int(value) for identity in seen for value in identity)]


def passed(cache: Path, count: int, seen: Sequence[Sequence[int]]) -> bool:
    """Whether ``cache``'s marker says its sampled check passed for the files ``seen``.

    ``False`` (never an error) for a missing, stale, foreign or malformed marker.
    """
    expected = _values(count, seen)
    if len(expected) != WORDS:
        return False
    try:
        fd = os.open(passed_file(cache), os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != WORDS * 8:
            return False
        data = os.read(fd, WORDS * 8 + 1)
    except OSError:
        return False
    finally:
        os.close(fd)
    if len(data) != WORDS * 8:
        return False
    return bool(np.frombuffer(data, dtype="<i8").tolist() == expected)


def store_passed(cache: Path, count: int, seen: Sequence[Sequence[int]]) -> None:
    """Write the marker of ``cache`` atomically (a refusing folder: nothing)."""
    values = _values(count, seen)
    if len(values) != WORDS:
        return
    target = passed_file(cache)
    try:
        fd, temporary = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(np.array(values, dtype="<i8").tobytes())
        os.replace(temporary, target)
    except OSError:
        Path(temporary).unlink(missing_ok=True)
