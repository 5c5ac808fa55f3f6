"""A batch of ``chunk`` windows read at once: one token copy per row, one search per batch.

NOTE [ batched chunk windows ]
``chunk`` sequence ``k`` is corpus tokens ``[k w, (k + 1) w)`` with ``w = L + 1``
(NOTE [ token sequences ]). Read one by one, each costs a search for its file, two
searches in the file's document ends, a few small arrays and a slice converted to int64:
about ten numpy calls per sequence, which is most of a batch when ``L`` is a few thousand.
When every window of a batch lies inside one memory-mapped file (always, for a corpus of
one file), the batch needs only:

- the tokens: each window's bytes read from the file by one ``preadv`` straight into its
  row of one ``(B, w)`` table of the file's own dtype (no bytes object, no conversion per
  row), and checked against ``vocab_size`` in one pass; a bad id re-reads its row by
  :meth:`TokenCorpus.read`, whose error names the file and offset. The table stays in
  the file's dtype: :func:`features_rows` converts it to int64 once per output, straight
  into each output's contiguous ``(B, L)`` table (NOTE [ batch rows ]), so a batch of
  ``input_ids`` and ``labels`` writes two int64 tables, not three. Read by position, not
  through the map: a window's first touch of the map faults in the whole page-cache folio
  holding it (NOTE [ ends read by position ]), so that shuffled windows made about half of
  a 1.6 GB file resident in 300 batches and cost more CPU than the reads (``pread``: 67
  to 70 us per batch of 8 x 2049 uint16 tokens, the map 109 to 123 us, 32 MB against 807
  to 825 MB resident, load 24). The file is opened per batch and must be the one the
  corpus mapped (device and inode); a file replaced since, or a map that records no file,
  is read through the map as before, and a file that shrank is an error naming it;
- the pieces: the windows' first and last documents are two ``searchsorted`` calls over
  the batch, the documents between them one ``arange`` and their ends one gather.

The lazy check of the cached ends (NOTE [ lazy ends check ]) covers the same regions as
``documents_in`` does row by row (those holding each window's documents and the end
before the first), and the same bracketing test of the search's answer runs on the whole
batch. The pieces equal ``TokenCorpus.documents_in``'s, the tokens ``read``'s; a batch
that crosses files, or a remote file, returns ``None`` and the caller reads row by row.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ._ends_check import mapped_file

if TYPE_CHECKING:
    from ._corpus import TokenCorpus

__all__ = ["chunk_windows", "open_mapped"]

I64 = npt.NDArray[np.int64]
#: The windows' tokens ``(B, w)`` (the file's dtype) and pieces (documents, counts,
#: closes, pieces per row).
Windows = tuple[npt.NDArray[np.integer[Any]], I64, I64, npt.NDArray[np.bool_], I64]


def chunk_windows(corpus: TokenCorpus, starts: I64, width: int) -> Windows | None:
    """Windows ``[starts[j], starts[j] + width)`` of ``corpus``, or ``None`` if not one file.

    Args:
        corpus: The corpus read.
        starts: Each window's first corpus token.
        width: The tokens per window.

    Returns:
        The ``(B, width)`` tokens in the file's dtype, and the windows' pieces one row
        after the other: each piece's document, its token count, whether it ends its
        document, and how many pieces each row has (what :func:`features_rows` takes).

    Raises:
        ValueError: a token id lies outside ``[0, vocab_size)`` (as ``read`` says it).

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> from detsamplers.tokens import TokenCorpus
        >>> path = Path(tempfile.mkdtemp()) / "t.npy"
        >>> np.save(path, np.array([5, 6, 0, 7, 0, 8, 9, 9, 0], dtype=np.uint16))
        >>> tokens, docs, counts, closes, pieces = chunk_windows(
        ...     TokenCorpus(path, eod_id=0), np.array([4, 0]), 4)
        >>> tokens.tolist(), docs.tolist(), counts.tolist(), pieces.tolist()
        ([[0, 8, 9, 9], [5, 6, 0, 7]], [1, 2, 0, 1], [1, 3, 3, 1], [2, 2])
        >>> closes.tolist()
        [True, False, True, False]
    """
    token_start = corpus._token_start
    files = np.searchsorted(token_start, starts, side="right") - 1
    f = int(files[0])
    mapped = corpus._tokens[f]
    if not isinstance(mapped, np.ndarray) or bool((files != f).any()):
        return None
    base = int(token_start[f])
    if int(starts.max()) + width > int(token_start[f + 1]):
        return None
    local = starts - base
    tokens: npt.NDArray[Any] = np.empty((len(starts), width), dtype=mapped.dtype)
    found = mapped_file(mapped)
    if found is None or not _read_rows(tokens, found, local, corpus._identity[f]):
        for row, first in zip(tokens, local.tolist(), strict=True):
            row[:] = mapped[first : first + width]
    if corpus.vocab_size is not None and bool(((tokens >= corpus.vocab_size) | (tokens < 0)).any()):
        for start in starts.tolist():
            corpus.read(start, start + width)  # raises, naming the file and the offset
    return (tokens, *_pieces(corpus, f, local, width))


def _read_rows(
    tokens: npt.NDArray[np.integer[Any]], found: tuple[str, int], local: I64, identity: Any
) -> bool:
    """Fill each row of ``tokens`` (the file's dtype) from ``found`` (name, first byte).

    Row ``j`` is read at token ``local[j]`` of the file. False, and nothing read, if the
    file there is not the one mapped (``identity``) or is gone.

    Raises:
        ValueError: the file ends before a window (it shrank while open).
    """
    name, offset = found
    item = tokens.itemsize
    size = tokens.shape[1] * item
    fd = open_mapped(name, identity)
    if fd is None:
        return False
    try:
        for row, first in zip(tokens, local.tolist(), strict=True):
            got = _read_into(fd, row, offset + first * item)
            if got != size:
                raise ValueError(
                    f"token file {name} should hold {size} bytes at byte "
                    f"{offset + first * item}, but it ends {got} bytes in; it changed "
                    "while open, open the corpus again"
                )
    finally:
        os.close(fd)
    return True


def open_mapped(name: str, identity: Any) -> int | None:
    """A descriptor of file ``name`` if it is still the regular file mapped (``identity``).

    ``None`` if it is gone or another file now: the map still reads the file it opened.
    """
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO never blocks
    except OSError:  # removed or renamed since
        return None
    try:
        now = os.fstat(fd)
        if stat.S_ISREG(now.st_mode) and (now.st_dev, now.st_ino) == identity:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _read_into(fd: int, row: npt.NDArray[Any], at: int) -> int:
    """Read ``row``'s bytes from ``fd`` at byte ``at`` into it; the bytes read."""
    if hasattr(os, "preadv"):  # straight into the row, no bytes object
        return os.preadv(fd, [row.data], at)
    data = os.pread(fd, row.nbytes, at)  # pragma: no cover (platforms without preadv)
    row[: len(data) // row.itemsize] = np.frombuffer(data, dtype=row.dtype)  # pragma: no cover
    return len(data)  # pragma: no cover


def _pieces(
    corpus: TokenCorpus, f: int, local: I64, width: int
) -> tuple[I64, I64, npt.NDArray[np.bool_], I64]:
    """The pieces of windows ``[local[j], local[j] + width)`` of file ``f`` (its offsets)."""
    ends: Any = corpus._ends[f]
    last = len(ends)
    stops = local + width
    low = np.searchsorted(ends, local, side="right")
    high = np.minimum(np.searchsorted(ends, stops, side="left") + 1, last)
    pieces = high - low  # int64 (intp) already: searchsorted's
    row = np.repeat(np.arange(len(local), dtype=np.int64), pieces)
    total = np.cumsum(pieces)
    begins = total - pieces
    docs = np.arange(int(total[-1]), dtype=np.int64) + (low - begins)[row]
    check = corpus._checks[f]
    if not check.complete:  # each document by its two ends (NOTE [ pair check ]), then the brackets
        check.cover_reads(ends, docs, np.asarray(ends[np.maximum(docs - 1, 0)], np.int64))
        if not _brackets(ends, low, high, local, stops):
            check.cover(ends, 0, last)  # not increasing: names it
    doc_ends = np.asarray(ends[docs], dtype=np.int64)
    row_stops = stops[row]
    cut = np.minimum(doc_ends, row_stops)
    firsts = np.empty_like(cut)
    firsts[1:] = cut[:-1]
    firsts[begins] = local
    return docs + int(corpus._doc_start[f]), cut - firsts, doc_ends <= row_stops, pieces


def _brackets(ends: Any, low: I64, high: I64, start: I64, stop: I64) -> bool:
    """``_corpus._brackets`` of every window at once."""
    last = len(ends)
    if not bool(((low < high) & (high <= last)).all()):
        return False
    before = np.asarray(ends[np.maximum(low - 1, 0)])
    closing = np.asarray(ends[high - 1])
    inner = np.asarray(ends[np.maximum(high - 2, 0)])
    return bool(
        (
            ((low == 0) | (before <= start))
            & (np.asarray(ends[low]) > start)
            & ((high == last) | (closing >= stop))
            & ((high - 1 == low) | (inner < stop))
        ).all()
    )
