"""Document boundaries of one token file: from an end-of-document id or a lengths sidecar.

NOTE [ document boundaries ]
A file's documents are described by the array of their end offsets (exclusive, in
tokens, strictly increasing, the last equal to the file's token count): 8 bytes per
document, so a corpus opens in O(files) work once each file's array exists, and a token's
document is a binary search. Each file ends a document: documents never span files.

- With ``lengths=`` the array is the cumulative sum of the sidecar's lengths, which must
  be positive and sum to the file's tokens exactly (an error names the sidecar). The
  first open caches it beside the sidecar as ``<sidecar>.ends.npy`` (NOTE [ cached
  document ends ]).
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

NOTE [ cached document ends ]
Summing a sidecar's lengths costs O(documents) at every open (3 to 6 ms at 1e6
documents), more than the rest of a resume. The sum is written once as
``<sidecar>.ends.npy``: an int64 ``.npy`` of ``ENDS_HEADER`` binding values (a magic
number, the size and ``st_mtime_ns`` of the sidecar and of the token file) followed by
the ends. A later open memory-maps it only if: it is a regular ``.npy`` of int64 whose
header matches its size (NOTE [ token files ]); its binding equals the two files' stat
now; it holds one end per length of the sidecar; its first end is the sidecar's first
length, its last the file's token count; ``ENDS_SAMPLES`` more ends, at positions drawn
from the binding, differ from the end before them by the sidecar's length there; and
its ends increase. Any failure rebuilds it from the sidecar, with the sidecar's full
checks, and rewrites it (a read-only folder keeps the array in memory; ``cache=False``
neither reads nor writes it).

Detected: a cache of another sidecar or token file (binding, count, first or last end),
a truncated or padded one (its size against its header and its count), a stale one (a
rewrite changes size or mtime), and a wrong middle that breaks the increase or falls on
a sampled position. Not detected: interior ends that still increase and avoid the
samples, with a binding forged to the current stat. Such a cache is harmless in the
sense that matters: the ends it gives increase from at least 1 to the file's token
count, so they are a valid partition of the file's tokens into documents. Every read
stays inside the file and every length is positive; only where some documents split
changes. Writing a file beside the corpus already gives that power (edit the
sidecar). The positions depend on the binding and not on a random draw, so every rank
and worker that opens the same files makes the same decision and reads the same
corpus. The increase check is what makes an undetected cache harmless. For a cache of
at most ``CHECK_WHOLE`` ends it is done at open, a vectorised comparison over the mapped
pages (no temporary of differences); above that it is done per region on first read
(NOTE [ lazy ends check ]), so that an open is O(1) and a region that fails names the
cache in an error instead of being rebuilt.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._ends_check import CHECK_WHOLE, mapped_from, read_at, read_file_at
from ._ends_passed import passed, store_passed
from ._files import npy_values, open_npy
from ._remembered import Remembered, identities

__all__ = [
    "ENDS_HEADER",
    "ENDS_SAMPLES",
    "LENGTH_DTYPES",
    "SCAN_BLOCK",
    "ends_of_lengths",
    "eod_ends",
    "lengths_ends",
    "scan_ends",
    "scanned_ends",
    "sidecar_ends",
    "sound_ends",
    "store_ends",
]

I64 = npt.NDArray[np.int64]
#: Tokens compared per step of an end-of-document scan (32 MB of uint16).
SCAN_BLOCK = 1 << 24
#: The dtypes a lengths sidecar may hold.
LENGTH_DTYPES = ("uint16", "uint32", "uint64", "int32", "int64")
#: The binding values before the ends in ``<sidecar>.ends.npy``.
ENDS_HEADER = 5
#: Ends of a cached ``<sidecar>.ends.npy`` checked against the sidecar at each open.
ENDS_SAMPLES = 64
_ENDS_MAGIC = 0x646574656E647331  # "detends1"
#: Ends caches that passed their checks, by their files' identities (NOTE [ facts of
#: unchanged files ]): the count of ends and whether their increase was checked.
_PASSED = Remembered()


def lengths_ends(
    tokens: npt.NDArray[Any], path: Path | str, sidecar: Path, cache: bool = True
) -> I64:
    """Document ends from the lengths in ``sidecar`` (NOTE [ document boundaries ]).

    With ``cache``, read from ``<sidecar>.ends.npy`` when it passes its checks, else
    summed and written there (NOTE [ cached document ends ]). The ends returned are
    checked whole; :func:`sidecar_ends` leaves the increase check of a large cache to
    the reads (NOTE [ lazy ends check ]).

    Raises:
        ValueError: the sidecar fails the file checks, holds a length below 1, or its
            lengths do not sum to the token count of ``path``.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> tokens = np.arange(6, dtype=np.uint16)
        >>> np.save(folder / "t.npy", tokens)
        >>> np.save(folder / "t.lengths.npy", np.array([2, 3, 1], dtype=np.uint32))
        >>> lengths_ends(tokens, folder / "t.npy", folder / "t.lengths.npy").tolist()
        [2, 5, 6]
        >>> (folder / "t.lengths.npy.ends.npy").exists()
        True
    """
    ends, checked = sidecar_ends(tokens, path, sidecar, cache)
    if checked or sound_ends(ends, len(tokens)):
        return ends
    lengths = open_npy(sidecar, LENGTH_DTYPES, what="document lengths file")
    return ends_of_lengths(lengths, len(tokens), path, sidecar)


def sidecar_ends(
    tokens: npt.NDArray[Any], path: Path | str, sidecar: Path, cache: bool = True
) -> tuple[I64, bool]:
    """:func:`lengths_ends`, and whether the ends' increase was checked.

    A cache of more than ``CHECK_WHOLE`` ends is returned with every check of NOTE
    [ cached document ends ] but the increase, which the corpus makes per region on
    first read (NOTE [ lazy ends check ]); anything else comes back checked whole.
    """
    if not cache:
        return ends_of_lengths(_lengths(sidecar), len(tokens), path, sidecar), True
    where = sidecar.with_name(f"{sidecar.name}.ends.npy")
    # A cache that passed its checks and whose files have not changed since, passes again
    # without them (NOTE [ facts of unchanged files ]); the map is made anew.
    files = identities([Path(path), sidecar, where])
    key = ("ends", str(path), str(sidecar), len(tokens), files and files[0])
    known = _PASSED.get(key) if files is not None else None
    if known is not None:
        try:
            stored = open_npy(where, ("int64",), what="document ends cache")
        except (OSError, ValueError):
            stored = None
        if stored is not None and len(stored) == ENDS_HEADER + known[0]:
            return mapped_from(stored, where).view(np.ndarray)[ENDS_HEADER:], known[1]
    # The sidecar's header only: a cache that passes needs 65 of its lengths, read by
    # position (NOTE [ ends read by position ]); it is mapped whole only to sum it.
    layout = npy_values(sidecar, LENGTH_DTYPES, what="document lengths file")
    if layout[2] == 0:  # no document: its own error, from the lengths
        return ends_of_lengths(_lengths(sidecar), len(tokens), path, sidecar), True
    try:
        binding = _binding(sidecar, Path(path))
    except OSError:
        return ends_of_lengths(_lengths(sidecar), len(tokens), path, sidecar), True
    if files is not None and passed(where, layout[2], files[0]):  # NOTE [ ends check kept on disk ]
        found = _marked_ends(where, layout[2], len(tokens))
    else:
        found = _cached_lengths_ends(where, binding, (str(sidecar), *layout), len(tokens))
        if found is not None and files is not None and files[1]:
            store_passed(where, layout[2], files[0])
    if found is not None:
        if files is not None and files[1]:
            _PASSED.put(key, (layout[2], found[1]))
        return found
    ends = ends_of_lengths(_lengths(sidecar), len(tokens), path, sidecar)
    stored = np.empty(ENDS_HEADER + len(ends), dtype=np.int64)
    stored[:ENDS_HEADER] = binding
    stored[ENDS_HEADER:] = ends
    store_ends(where, stored)
    return ends, True


def _lengths(sidecar: Path) -> npt.NDArray[Any]:
    """The sidecar's lengths, memory-mapped after its checks (NOTE [ token files ])."""
    return open_npy(sidecar, LENGTH_DTYPES, what="document lengths file")


def _binding(sidecar: Path, path: Path) -> I64:
    """What binds a cache to its files: a magic number, their sizes and ``st_mtime_ns``."""
    side, token = os.stat(sidecar), os.stat(path)
    values = [_ENDS_MAGIC, side.st_size, side.st_mtime_ns, token.st_size, token.st_mtime_ns]
    return np.array(values, dtype=np.int64)


def _cached_lengths_ends(
    where: Path, binding: I64, lengths: tuple[str, np.dtype[Any], int, int], count: int
) -> tuple[I64, bool] | None:
    """The ends in ``where`` if they pass NOTE [ cached document ends ]'s checks, else None.

    ``lengths`` is where the sidecar's lengths lie: its name, dtype, data offset and
    count (:func:`~._files.npy_values`). With the ends, whether their increase was
    checked: not above ``CHECK_WHOLE`` ends (NOTE [ lazy ends check ]).
    """
    sidecar, kind, offset, n = lengths
    try:
        if not stat.S_ISREG(os.stat(where).st_mode):
            return None
        stored = open_npy(where, ("int64",), what="document ends cache")
    except (OSError, ValueError):
        return None
    if len(stored) != ENDS_HEADER + n:
        return None
    # The checked values are read from the files, not through their maps (NOTE [ ends
    # read by position ]): the open makes neither file resident.
    stored = mapped_from(stored, where).view(np.ndarray)
    key = np.random.SeedSequence([int(v) & 0xFFFFFFFF for v in binding[1:]] + [n])
    samples = min(ENDS_SAMPLES, n - 1)
    at: I64 = np.random.default_rng(key).integers(1, max(n, 2), size=samples, dtype=np.int64)
    head = np.arange(ENDS_HEADER, dtype=np.int64)
    picked = read_at(stored, np.concatenate((head, ENDS_HEADER + np.array([0, n - 1]),
                                             ENDS_HEADER + at, ENDS_HEADER + at - 1)))  # fmt: skip
    if not np.array_equal(picked[:ENDS_HEADER], binding):
        return None
    first, last = int(picked[ENDS_HEADER]), int(picked[ENDS_HEADER + 1])
    given = read_file_at(sidecar, offset, kind, np.concatenate(([0], at)).astype(np.int64))
    if last != count or first != int(given[0]) or first < 1:
        return None
    middle = ENDS_HEADER + 2 + len(at)
    steps = picked[ENDS_HEADER + 2 : middle] - picked[middle:]
    if not np.array_equal(steps, given[1:]):
        return None
    ends = stored[ENDS_HEADER:]
    if n > CHECK_WHOLE:
        return ends, False
    if not bool((ends[1:] > ends[:-1]).all()):  # no temporary of differences
        return None
    return ends, True


def _marked_ends(where: Path, n: int, count: int) -> tuple[I64, bool] | None:
    """The ends in ``where`` whose sampled check a marker vouches for, else None.

    What makes a cache harmless is still checked (NOTE [ ends check kept on disk ]): its
    size, its first end at least 1 and its last the token count ``count``, and its
    increase (whole up to ``CHECK_WHOLE`` ends, else per region on first read).
    """
    try:
        stored = open_npy(where, ("int64",), what="document ends cache")
    except (OSError, ValueError):
        return None
    if len(stored) != ENDS_HEADER + n:
        return None
    stored = mapped_from(stored, where).view(np.ndarray)
    first, last = read_at(stored, ENDS_HEADER + np.array([0, n - 1], dtype=np.int64)).tolist()
    if first < 1 or last != count:
        return None
    ends = stored[ENDS_HEADER:]
    if n > CHECK_WHOLE:
        return ends, False
    if not bool((ends[1:] > ends[:-1]).all()):
        return None
    return ends, True


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
        ends = mapped_from(open_npy(cache, ("int64",), what="document index"), cache)
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
