"""Document boundaries of one token file: from an end-of-document id or a lengths sidecar.

NOTE [ document boundaries ]
A file's documents are described by the array of their end offsets (exclusive, in
tokens, strictly increasing, the last equal to the file's token count): 8 bytes per
document, so a corpus opens in O(files) work once each file's array exists, and a token's
document is a binary search. Each file ends a document: documents never span files.

- With ``lengths=`` the array is the cumulative sum of the sidecar's lengths, which must
  be positive and sum to the file's tokens exactly (an error names the sidecar).
- With ``eod_id=`` a document ends after each end-of-document token (the token belongs to
  its document, as nanoGPT and OLMo write it), and tokens after the last one form a last
  document. Finding them scans the whole file once, in blocks of ``SCAN_BLOCK`` tokens
  with a progress bar, and the array is cached beside the file as
  ``<file>.eod<id>.npy``: later opens memory-map it after checking it (a regular file
  newer than the token file, int64, increasing, ending at the file's token count), and
  rebuild it otherwise. Where the folder is read-only the array stays in memory. Scanning
  lazily per block instead would make every lookup of a document by number a scan of all
  blocks before it; the index costs one pass and 8 bytes per document (80 MB at 1e7
  documents, paged in on demand from the cache).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._files import open_npy

__all__ = [
    "LENGTH_DTYPES",
    "SCAN_BLOCK",
    "ends_of_lengths",
    "eod_ends",
    "lengths_ends",
    "scan_ends",
    "scanned_ends",
    "sound_ends",
    "store_ends",
]

I64 = npt.NDArray[np.int64]
#: Tokens compared per step of an end-of-document scan (32 MB of uint16).
SCAN_BLOCK = 1 << 24
#: The dtypes a lengths sidecar may hold.
LENGTH_DTYPES = ("uint16", "uint32", "uint64", "int32", "int64")


def lengths_ends(tokens: npt.NDArray[Any], path: Path | str, sidecar: Path) -> I64:
    """Document ends from the lengths in ``sidecar`` (NOTE [ document boundaries ]).

    Raises:
        ValueError: the sidecar fails the file checks, holds a length below 1, or its
            lengths do not sum to the token count of ``path``.
    """
    lengths = open_npy(sidecar, LENGTH_DTYPES, what="document lengths file")
    return ends_of_lengths(lengths, len(tokens), path, sidecar)


def ends_of_lengths(lengths: npt.NDArray[Any], count: int, path: Any, sidecar: Any) -> I64:
    """Document ends from ``lengths``, checked to sum to ``count`` (the tokens of ``path``).

    Raises:
        ValueError: a length is below 1, or they do not sum to ``count`` (names ``sidecar``).
    """
    if int(lengths.min()) < 1:
        at = int(np.argmin(lengths))
        raise ValueError(
            f"document lengths file {sidecar} should hold lengths of at least 1 token, but "
            f"document {at} has length {int(lengths[at])}; drop empty documents when writing it"
        )
    # One int64 copy summed in place: a cumsum that casts as it goes is 2.5 times slower
    # and holds a second array of the same size at its peak.
    ends = np.array(lengths, dtype=np.int64)
    np.cumsum(ends, out=ends)
    if int(ends[-1]) != count:
        raise ValueError(
            f"document lengths file {sidecar} should sum to the {count} tokens of "
            f"{path}, but its {len(lengths)} lengths sum to {int(ends[-1])}; pair each token "
            "file with its own lengths file, in the same order"
        )
    return ends


def _cache_path(path: Path, eod_id: int) -> Path:
    return path.with_name(f"{path.name}.eod{eod_id}.npy")


def _cached(path: Path, cache: Path, count: int) -> I64 | None:
    """The cached ends if the cache is sound and newer than ``path``, else None."""
    try:
        info = os.stat(cache)
        if not stat.S_ISREG(info.st_mode) or info.st_mtime_ns < os.stat(path).st_mtime_ns:
            return None
        ends = open_npy(cache, ("int64",), what="document index")
    except (OSError, ValueError):
        return None
    return ends if sound_ends(ends, count) else None


def sound_ends(ends: npt.NDArray[Any], count: int) -> bool:
    """Whether ``ends`` can be the document ends of ``count`` tokens (increasing, to ``count``)."""
    return (
        len(ends) > 0
        and int(ends[-1]) == count
        and int(ends[0]) >= 1
        and bool((ends[1:] > ends[:-1]).all())  # no temporary of differences
    )


def store_ends(cache: Path, ends: I64) -> None:
    """Write ``ends`` to ``cache`` atomically; a folder that refuses leaves it in memory."""
    try:
        fd, temporary = tempfile.mkstemp(dir=cache.parent, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            np.save(handle, ends, allow_pickle=False)
        os.replace(temporary, cache)
    except OSError:
        Path(temporary).unlink(missing_ok=True)


def scan_ends(tokens: npt.NDArray[Any], eod_id: int, progress: Any) -> I64:
    """The offsets just after each ``eod_id`` of ``tokens``, read ``SCAN_BLOCK`` tokens a step."""
    found: list[I64] = []
    for start in range(0, len(tokens), SCAN_BLOCK):
        block = np.asarray(tokens[start : start + SCAN_BLOCK])
        found.append(np.flatnonzero(block == eod_id).astype(np.int64) + (start + 1))
        progress.update(len(block))
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def eod_ends(tokens: npt.NDArray[Any], path: Path, eod_id: int, progress: Any, cache: bool) -> I64:
    """Document ends after each ``eod_id`` token of ``tokens`` (NOTE [ document boundaries ]).

    Args:
        tokens: The file's tokens (memory-mapped).
        path: The token file, for the cache's place and the messages.
        eod_id: The end-of-document token id.
        progress: A tqdm bar advanced by the tokens scanned.
        cache: Read and write the index beside the file.

    Raises:
        ValueError: ``eod_id`` never occurs in the file.
    """
    count = len(tokens)
    where = _cache_path(path, eod_id)
    if cache:
        ends = _cached(path, where, count)
        if ends is not None:
            progress.update(count)
            return ends
    ends = scanned_ends(tokens, path, eod_id, progress)
    if cache:
        store_ends(where, ends)
    return ends


def scanned_ends(tokens: npt.NDArray[Any], path: Any, eod_id: int, progress: Any) -> I64:
    """Document ends of ``tokens`` by one scan for ``eod_id`` (``path`` names the file).

    Raises:
        ValueError: ``eod_id`` never occurs in the file.
    """
    count = len(tokens)
    ends = scan_ends(tokens, eod_id, progress)
    if len(ends) == 0:
        raise ValueError(
            f"eod_id={eod_id} should end the documents of {path}, but it never occurs in "
            f"its {count} tokens; pass the tokenizer's end-of-document id, or lengths= "
            "sidecars when the documents have no separator"
        )
    if int(ends[-1]) != count:  # tokens after the last end-of-document form a document
        ends = np.append(ends, np.int64(count))
    return ends
