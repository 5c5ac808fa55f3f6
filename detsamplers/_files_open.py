"""Open only a regular file: never block on a FIFO, never read a device without end.

NOTE [ regular files only ]
Every file the library reads because a user or a file named it (a shard, an index file, a
token file, a saved state) is opened the same way: with ``O_NONBLOCK`` (a FIFO opens at
once instead of waiting for a writer) and ``O_CLOEXEC``, then checked with ``fstat`` on the
descriptor, so what is read is what was checked even if the path was swapped meanwhile.
Anything but a regular file (a FIFO, a device such as a symlink to ``/dev/zero``, a socket,
a folder) raises :class:`NotRegularFileError`, which each caller turns into its own message
naming the file and the fix; a regular file's descriptor is made blocking again. A caller
may ``stat`` the path first (``stat_first``), so that the common refusals open nothing.
A whole file read under a bound (:func:`read_bounded`) asks for what ``fstat`` says it
holds, not for the bound: ``read(bound + 1)`` allocates the bound before it reads.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

__all__ = [
    "NotRegularFileError",
    "file_kind",
    "open_regular_fd",
    "read_bounded",
    "stat_regular",
]

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words, when it is no regular file.

    Examples:
        >>> file_kind(os.stat("/dev/null").st_mode)
        'a character device'
    """
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class NotRegularFileError(Exception):
    """``path`` is no regular file, of ``st_mode`` ``mode``.

    Callers catch it and raise their own error (NOTE [ regular files only ]).
    """

    def __init__(self, path: str | os.PathLike[str], mode: int) -> None:
        super().__init__(f"{os.fspath(path)!r} is {file_kind(mode)}, not a regular file")
        self.path = path
        self.mode = mode


def stat_regular(path: str | os.PathLike[str]) -> os.stat_result:
    """``os.stat(path)``, once it says a regular file: nothing is opened.

    Raises:
        NotRegularFileError: it is a folder, a FIFO, a device or a socket.
        OSError: it cannot be ``stat``-ed (``FileNotFoundError`` when it does not exist).

    Examples:
        >>> stat_regular("/dev/null")
        Traceback (most recent call last):
        ...
        detsamplers._files_open.NotRegularFileError: '/dev/null' is a character device, ...
    """
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFileError(path, info.st_mode)
    return info


def open_regular_fd(
    path: str | os.PathLike[str], *, stat_first: bool = True
) -> tuple[int, os.stat_result]:
    """A blocking read-only descriptor of ``path`` and its ``fstat``, once it is a regular file.

    Args:
        path: The file (a symlink is followed).
        stat_first: :func:`stat_regular` the path before opening it: a FIFO or a device is
            then refused without being opened.

    Raises:
        NotRegularFileError: it is a folder, a FIFO, a device or a socket.
        OSError: it cannot be read (``FileNotFoundError`` when it does not exist).

    Examples:
        >>> open_regular_fd("/dev/zero")
        Traceback (most recent call last):
        ...
        detsamplers._files_open.NotRegularFileError: '/dev/zero' is a character device, ...
        >>> fd, info = open_regular_fd(__file__); os.close(fd); info.st_size > 0
        True
    """
    if stat_first:  # cheap, and no device is opened on the common refusals
        stat_regular(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)  # what was opened, if the path was swapped meanwhile
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(path, info.st_mode)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def read_bounded(handle: BinaryIO, limit: int) -> bytes:
    """The rest of the regular file ``handle``, or its first ``limit + 1`` bytes if longer.

    As ``handle.read(limit + 1)``, but allocating what the file holds (by ``fstat``), not
    the bound; a file that grew since is read on, never past ``limit + 1`` bytes. The caller
    refuses a result longer than ``limit``.

    Examples:
        >>> with open(__file__, "rb") as handle:
        ...     len(read_bounded(handle, 10))
        11
    """
    size = os.fstat(handle.fileno()).st_size - handle.tell()
    data = handle.read(max(0, min(size, limit)) + 1)
    if size < len(data) <= limit:  # it grew since the fstat: the rest, still bounded
        data += handle.read(limit + 1 - len(data))
    return data
