"""A ``concat`` order's block starts kept on disk, for a fresh process's resume.

NOTE [ block starts on disk ]
A ``concat`` order reads the start of every ``B``-th document when it is built (one
``pread`` a block of the ends cache: about 1,100 for 1e6 documents, 3 ms CPU). A process
keeps them for its next open (NOTE [ facts of unchanged files ]), but a preempted job
resumes in a *fresh* process, which read them all again. They are written once beside the
first token file, ``<file>.blocks-<digest>.npy`` (``digest``: the block size, ``dtype``,
end-of-document id and document count), an ``int64`` ``.npy`` of a header and the starts:

- the header binds it: a magic number, a version, the block size, the document and token
  counts, the number of files the corpus reads and every such file's identity
  ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)`` taken *before* the starts were
  read; it is written only when every file is settled (older than ``RACY_NS``), as the
  facts of unchanged files are kept;
- a later open uses it only if its size is the one expected (checked before anything is
  read), the header equals the files' identities now, and the starts are ``0``, then
  increasing, then the token count. Anything else (a stale, truncated, foreign or hostile
  file, a folder that refuses writes) is ignored and the starts are read again (and the
  file rewritten, atomically);
- the starts read from it are still checked wherever a block is built from its ends, in
  a corpus of one file or several: the block's start and the next block's are compared
  with the ends read for its documents (``ConcatOrder._agree``), and a disagreement that
  the ends' own check does not explain is an error naming this file. What is not checked
  is the start of a block no batch has built: a forged pair of starts moving tokens
  between two such blocks moves the windows that the cumulative totals locate past them
  (the bytes read are still the corpus's, checked); a one-read check of every start
  would cost what this file saves.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._boundaries import store_ends
from ._files import npy_values

__all__ = ["block_file", "load_blocks", "store_blocks"]

I64 = npt.NDArray[np.int64]
_MAGIC = 0x646574626C6B3031  # "detblk01"
_VERSION = 1


def block_file(first: Path, size: int, dtype: str | None, eod_id: Any, documents: int) -> Path:
    """Where the block starts of a corpus whose first file is ``first`` are kept.

    Examples:
        >>> name = block_file(Path("/d/c.bin"), 1024, "uint16", None, 10).name
        >>> name.startswith("c.bin.blocks-"), name.endswith(".npy"), len(name)
        (True, True, 33)
        >>> name == block_file(Path("/d/c.bin"), 2048, "uint16", None, 10).name
        False
    """
    key = f"{size}|{dtype}|{eod_id}|{documents}".encode()
    digest = hashlib.blake2b(key, digest_size=8).hexdigest()
    return first.with_name(f"{first.name}.blocks-{digest}.npy")


def _header(size: int, documents: int, tokens: int, seen: Sequence[Sequence[int]]) -> list[int]:
    flat = [int(value) for identity in seen for value in identity]
    return [_MAGIC, _VERSION, size, documents, tokens, len(seen), *flat]


def load_blocks(
    path: Path, size: int, documents: int, tokens: int, seen: Sequence[Sequence[int]]
) -> I64 | None:
    """The block starts kept in ``path`` if they pass NOTE [ block starts on disk ]'s checks.

    ``None`` (never an error) for a missing, stale, foreign or malformed file.
    """
    head = _header(size, documents, tokens, seen)
    count = len(head) + -(-documents // size) + 1
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        kind, offset, found = npy_values(path, ("int64",), "block starts")
        if found != count or kind != np.dtype(np.int64):  # before anything is read
            return None
        stored = np.fromfile(path, dtype=np.int64, count=count, offset=offset)
    except (OSError, ValueError):
        return None
    if len(stored) != count or stored[: len(head)].tolist() != head:
        return None
    starts = stored[len(head) :]
    if int(starts[0]) != 0 or int(starts[-1]) != tokens:
        return None
    if not bool((starts[1:] > starts[:-1]).all()):
        return None
    return starts


def store_blocks(
    path: Path, starts: I64, size: int, documents: int, tokens: int, seen: Sequence[Sequence[int]]
) -> None:
    """Write ``starts`` with their header to ``path`` atomically (a refusing folder: nothing)."""
    head = np.array(_header(size, documents, tokens, seen), dtype=np.int64)
    store_ends(path, np.concatenate([head, starts.astype(np.int64, copy=False)]))
