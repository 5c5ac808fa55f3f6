"""Token files opened as data: ``.npy`` and raw ``.bin``, memory-mapped after their checks.

NOTE [ token files ]
A token file is read back, never trusted (docs/security.md): it is opened only if it is
a regular file (a FIFO would block ``open`` and ``/dev/zero`` would never end), through
``O_NONBLOCK`` and re-checked with ``fstat`` on the descriptor, so that a file swapped for
a FIFO between the two checks cannot hang the open either. Its size then bounds
everything: a ``.bin`` holds ``size / itemsize`` tokens of the dtype given (a remainder is
an error), and a ``.npy`` header is parsed by numpy's header reader (a literal, never
code; ``allow_pickle`` never enters) and must describe a 1-D array of an allowed integer
dtype whose bytes end exactly at the end of the file; a header that claims more or fewer
bytes than the file holds is an error naming both. Only then is the file memory-mapped:
nothing is allocated from a size the file claims, and the pages are read on demand.
A header's parse is kept in the process by its bytes (at most ``PARSED_HEADERS``): a
reopen reads the same bytes and finds the same shape and dtype, and the checks against
the dtypes allowed and the file's size run at every open.
"""

from __future__ import annotations

import os
import tokenize
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._files_open import NotRegularFileError, open_regular_fd, stat_regular

__all__ = [
    "BIN_DTYPES",
    "NPY_DTYPES",
    "bin_count",
    "check_path",
    "npy_layout",
    "npy_values",
    "open_bin",
    "open_npy",
    "open_tokens",
]

#: The dtypes of a raw ``.bin`` token file (nanoGPT writes uint16, OLMo uint16 or uint32).
BIN_DTYPES = ("uint16", "uint32")
#: The dtypes a ``.npy`` token file may hold.
NPY_DTYPES = ("uint16", "uint32", "int32", "int64")
#: A ``.npy`` header is a short dict literal: anything longer is refused unread.
MAX_HEADER = 10_000


def check_path(value: Any, name: str) -> Path:
    """``value`` as a :class:`~pathlib.Path`, or a ``TypeError`` naming ``name``."""
    if isinstance(value, Path):
        return value
    if isinstance(value, str):
        return Path(value)
    raise TypeError(
        f"{name} should be a path (str or pathlib.Path), but got {name}={value!r} "
        f"of type {type(value).__name__}"
    )


def _open_regular(path: Path) -> Any:
    """A binary file object for ``path`` if it is a regular file, never blocking."""
    try:  # NOTE [ regular files only ]
        stat_regular(path)
    except NotRegularFileError:
        raise ValueError(
            f"token file {path} should be a regular file, but it is a FIFO, device, socket "
            "or directory, which could block or never end; pass the path of a .npy or .bin file"
        ) from None
    except OSError as error:
        raise ValueError(f"token file {path} cannot be read: {error.strerror}") from error
    try:
        fd, _ = open_regular_fd(path, stat_first=False)
    except NotRegularFileError:  # swapped for a FIFO after the stat
        raise ValueError(
            f"token file {path} should be a regular file, but it changed to another"
        ) from None
    return os.fdopen(fd, "rb")


def _memmap(
    handle: Any, path: Path, dtype: np.dtype[Any], offset: int, count: int, what: str = "token file"
) -> Any:
    if count == 0:
        if what == "token file":
            raise ValueError(f"token file {path} holds no tokens; remove it from the corpus")
        raise ValueError(f"{what} {path} holds no values; write it again beside its token file")
    return np.memmap(handle, dtype=dtype, mode="r", offset=offset, shape=(count,))


def open_bin(path: Path, dtype: str) -> npt.NDArray[Any]:
    """Memory-map a raw ``.bin`` of ``dtype`` tokens (NOTE [ token files ]).

    Raises:
        ValueError: the file is not regular, is empty, or its size is not a multiple of
            the dtype's size.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "t.bin"
        >>> np.array([5, 6, 7], dtype=np.uint16).tofile(path)
        >>> open_bin(path, "uint16").tolist()
        [5, 6, 7]
    """
    kind = np.dtype(dtype)
    with _open_regular(path) as handle:
        count = bin_count(os.fstat(handle.fileno()).st_size, path, dtype)
        return _memmap(handle, path, kind, 0, count)  # type: ignore[no-any-return]


def bin_count(size: int, path: Path | str, dtype: str) -> int:
    """The tokens of a raw ``.bin`` of ``size`` bytes, or an error naming ``path``.

    Raises:
        ValueError: ``size`` is not a multiple of the dtype's size.

    Examples:
        >>> bin_count(6, "t.bin", "uint16")
        3
        >>> bin_count(7, "t.bin", "uint16")
        Traceback (most recent call last):
        ...
        ValueError: token file t.bin should hold whole uint16 tokens (2 bytes each), but ...
    """
    itemsize = np.dtype(dtype).itemsize
    if size % itemsize:
        raise ValueError(
            f"token file {path} should hold whole {dtype} tokens ({itemsize} bytes "
            f"each), but its size is {size} bytes, {size % itemsize} past the last "
            "whole token; check dtype= (uint16 or uint32) or whether the file was cut short"
        )
    return size // itemsize


def open_npy(
    path: Path, allowed: tuple[str, ...] = NPY_DTYPES, what: str = "token file"
) -> npt.NDArray[Any]:
    """Memory-map a 1-D ``.npy`` of an ``allowed`` dtype, its header checked against the file.

    Raises:
        ValueError: the file is not regular, not a ``.npy``, its dtype is not allowed
            (object arrays included), it is not 1-D, or its header's size differs from the
            file's.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "t.npy"
        >>> np.save(path, np.array([1, 2], dtype=np.uint32))
        >>> open_npy(path).tolist()
        [1, 2]
    """
    with _open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        kind, offset, count = npy_layout(handle, size, path, allowed, what)
        return _memmap(handle, path, kind, offset, count, what)  # type: ignore[no-any-return]


def npy_values(path: Path, allowed: tuple[str, ...], what: str) -> tuple[np.dtype[Any], int, int]:
    """The dtype, data offset and count of a 1-D ``.npy``, checked as :func:`open_npy` does.

    Nothing is mapped: for a file of which only a few values are read, by position
    (NOTE [ ends read by position ]).

    Raises:
        ValueError: as :func:`open_npy`.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "t.npy"
        >>> np.save(path, np.array([1, 2, 3], dtype=np.uint32))
        >>> kind, offset, count = npy_values(path, NPY_DTYPES, "token file")
        >>> str(kind), offset, count
        ('uint32', 128, 3)
    """
    with _open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        return npy_layout(handle, size, path, allowed, what)


def npy_layout(
    handle: Any, size: int, path: Path | str, allowed: tuple[str, ...], what: str
) -> tuple[np.dtype[Any], int, int]:
    """The dtype, data offset and count of the ``.npy`` whose first bytes ``handle`` reads.

    ``size`` is the whole file's size; ``path`` names it in errors (a local path or a URL).
    Shared by local files and remote ones (whose header is fetched by a range read).

    Raises:
        ValueError: the header cannot be read, its dtype is not in ``allowed``, the array
            is not 1-D, or its bytes do not end exactly at ``size``.

    Examples:
        >>> import io, numpy as np
        >>> buffer = io.BytesIO()
        >>> np.save(buffer, np.array([1, 2], dtype=np.uint16))
        >>> kind, offset, count = npy_layout(io.BytesIO(buffer.getvalue()), 132, "t.npy",
        ...                                  NPY_DTYPES, "token file")
        >>> str(kind), offset, count
        ('uint16', 128, 2)
    """
    # numpy's parse is a pure function of the header's bytes: a resume's reopen of the
    # same files finds it kept (ast.literal_eval, a third of an open's CPU otherwise).
    start = handle.tell()
    key = _header_bytes(handle)
    parsed = _PARSED.get(key) if key is not None else None
    if parsed is not None:
        shape, kind = parsed
    else:
        handle.seek(start)
        shape, kind = _parse_header(handle, path, what)
    if kind.hasobject or kind.name not in allowed:
        raise ValueError(
            f"{what} {path} should hold one of the dtypes {', '.join(allowed)}, but its "
            f"header says dtype {kind}; object arrays are never loaded (no pickles)"
        )
    if len(shape) != 1:
        raise ValueError(
            f"{what} {path} should hold a 1-D array, but its header says shape {shape}; "
            "flatten it before saving"
        )
    offset = handle.tell()
    if key is not None and parsed is None and offset == start + len(key):
        if len(_PARSED) >= PARSED_HEADERS:
            _PARSED.clear()
        _PARSED[key] = (shape, kind)
    count = int(shape[0])
    if offset + count * kind.itemsize != size:
        raise ValueError(
            f"{what} {path} should be {offset + count * kind.itemsize} bytes as its header "
            f"says ({count} values of {kind} after a {offset}-byte header), but it is "
            f"{size} bytes; the file is truncated or its header lies"
        )
    return kind, offset, count


#: Headers parsed in this process, by their bytes (NOTE [ token files ]).
_PARSED: dict[bytes, tuple[tuple[int, ...], np.dtype[Any]]] = {}
#: Parsed headers kept at most (the dict is emptied when full).
PARSED_HEADERS = 256


def _header_bytes(handle: Any) -> bytes | None:
    """The whole ``.npy`` header at ``handle`` (magic to padding), read past it; else None.

    None for anything but a version 1 to 3 header of at most ``MAX_HEADER`` bytes read
    in full: numpy's reader then parses it from the start and says why not.
    """
    head = handle.read(10)
    width = {1: 2, 2: 4, 3: 4}.get(head[6], 0) if len(head) == 10 else 0
    if head[:6] == b"\x93NUMPY" and width == 4:
        head += handle.read(2)
    if head[:6] == b"\x93NUMPY" and width and len(head) == 8 + width:
        length = int.from_bytes(head[8:], "little")
        if 0 < length <= MAX_HEADER:
            rest = handle.read(length)
            if len(rest) == length:
                return bytes(head + rest)
    return None


def _parse_header(handle: Any, path: Path | str, what: str) -> tuple[Any, np.dtype[Any]]:
    """The shape and dtype of the header at ``handle``, by numpy's reader (a literal)."""
    try:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, _, kind = np.lib.format.read_array_header_1_0(handle, max_header_size=MAX_HEADER)
        elif version in ((2, 0), (3, 0)):
            shape, _, kind = np.lib.format.read_array_header_2_0(handle, max_header_size=MAX_HEADER)
        else:
            raise ValueError(f"unknown format version {version}")
    except (ValueError, OSError, SyntaxError, TypeError, tokenize.TokenError) as error:
        # numpy re-reads a header it cannot parse as a Python 2 one, by tokenize: its error too
        raise ValueError(
            f"{what} {path} should be a .npy array file, but its header cannot be read "
            f"({error}); write it with numpy.save"
        ) from error
    return shape, kind


def open_tokens(path: Path, dtype: str | None) -> npt.NDArray[Any]:
    """Memory-map a token file by its suffix: ``.npy`` (its own dtype) or ``.bin`` (``dtype``).

    Raises:
        ValueError: the suffix is neither, a ``.bin`` comes without ``dtype``, or the file
            fails its checks (NOTE [ token files ]).
    """
    if path.suffix == ".npy":
        return open_npy(path)
    if path.suffix == ".bin":
        if dtype is None:
            raise ValueError(
                f"dtype should be given for the raw token file {path}, but got dtype=None; "
                "pass dtype='uint16' (nanoGPT, OLMo) or dtype='uint32', or the .idx of a "
                "Megatron pair"
            )
        return open_bin(path, dtype)
    raise ValueError(
        f"token file {path} should end in .npy or .bin (or .idx for a Megatron pair), but "
        f"it ends in {path.suffix!r}; other formats are not read yet"
    )
