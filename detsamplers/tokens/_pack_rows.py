"""A batch of packed sequences' features, computed for the batch at once.

NOTE [ packed batch rows ]
A packed sequence is its bin's pieces from column 0, then padding up to ``L + 1`` tokens
(NOTE [ packed sequences ]); the padding is one more piece of token 0 and document ``-1``
whose positions restart at 0 and whose labels are ``IGNORE_INDEX`` (NOTE [ sequence
features ]). :func:`window_rows` builds the ``B`` rows' arrays directly at their final
``(B, L)`` shape, each one contiguous (so ``collate_tokens`` converts them without a
copy), and only the ``outputs`` asked for:

- ``input_ids`` and ``labels``: the ``B L`` inputs are one ``np.concatenate`` of the
  batch's slices of its mapped files (each piece one slice, each row's padding a slice of
  zeros, a full row's last token left out: it is no input), cast to int64 in the same
  pass; the labels are the same values one place on (one copy), a full row's last label
  its left-out token, ``IGNORE_INDEX`` from the row's last real token on when it has
  padding (a piece that does not close a document fills its bin, so that token closes
  one) and at every other closing piece's last token (one scatter for the batch).
- ``position_ids`` and ``document_ids``: one ``np.repeat`` each over the batch's pieces
  with each row's padding piece put after its pieces (a padding of 0 tokens where the
  bin is full), the last piece of a full row one token shorter, so that these spans fill
  the ``B L`` values in place.
- ``cu_seqlens``: each row's piece ends below ``L`` at columns ``1, 2, ...`` (the ends
  of a row's pieces rise, so those below ``L`` come first), ``L`` after them. The
  batch's flattened offsets, which ``collate_tokens`` would make from that table, are the
  ends of the spans above that rise: made here and handed to it with the rows
  (``BatchRows.collated``, NOTE [ batch rows ]).

The arrays are those of :func:`~detsamplers.tokens._features.features` on each padded
window (tests/tokens/test_tokens_pack.py pins them against a plain reference).

Read from the windows: a batch's rows are found as ``PackOrder.rows`` gives them, each
row's kept window (the tuple ``PackOrder.window`` holds: offsets, docs, firsts, counts,
closes) and its bin in it, so nothing is gathered before the arrays are written;
:func:`gather_rows` joins the rows' slices of those columns (one concatenation a column)
where the numpy path needs them.

Compiled: when the batch's pieces lie in one mapped file of a plain integer dtype and the
kernel is there (NOTE [ compiled mixture kernel ]), ``pack_rows`` in ``_kernel_pack.c``
reads each row's pieces from its window's columns and writes the same arrays into ones
made here at their final shapes, one pass per row: each piece's tokens converted into the
row's inputs and, one column left, its labels (loops without a branch, which the compiler
vectorises; GCC on x86-64 Linux also builds them for AVX2, picked at load), then fills for
the positions, document ids and padding, the row's ``cu_seqlens`` and the batch's
flattened offsets from each piece's end in its row. It checks every window's columns,
every piece against the file and every row against ``L + 1`` before writing; with a
``vocab_size`` it also says whether every token read lies in ``[0, vocab_size)`` (a
min/max pass, skipped where the dtype cannot reach it), and one that does not takes the
numpy path, which names the file. Several files, a remote file or another dtype take the
numpy path, which stays the reference (tests/tokens/test_tokens_pack_rows.py compares the
two on random corpora, every token dtype, with and without a ``vocab_size``). No array is
reused from one batch to the next: a batch handed out is never written again.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _native
from ._corpus import TokenCorpus
from ._features import IGNORE_INDEX, BatchRows
from ._pack_windows import Window

__all__ = ["gather_rows", "packed_rows", "window_rows"]

I64 = npt.NDArray[np.int64]


def window_rows(
    corpus: TokenCorpus,
    sources: list[Window],
    js: I64,
    seq_len: int,
    outputs: tuple[str, ...],
) -> BatchRows:
    """The rows of packed sequences, read from their windows (NOTE [ packed batch rows ]).

    Args:
        corpus: The tokens.
        sources: Each row's window as ``PackOrder.window`` gives it: ``(offsets, docs,
            firsts, counts, closes)``, its pieces grouped by bin.
        js: Each row's bin in its window: row ``r`` is pieces
            ``offsets[js[r]]:offsets[js[r] + 1]`` of ``sources[r]``.
        seq_len: ``L``.
        outputs: The arrays to compute, from ``check_outputs``.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "t.npy"
        >>> np.save(path, np.array([5, 6, 0, 7, 8, 0, 9, 0], dtype=np.uint16))
        >>> window = (np.array([0, 1, 3]), np.array([0, 1, 2]), np.array([0, 3, 6]),
        ...           np.array([3, 3, 2]), np.array([True, True, True]))
        >>> rows = window_rows(TokenCorpus(path, eod_id=0), [window, window], np.array([1, 0]),
        ...                    4, ("input_ids", "labels"))
        >>> rows[0]["input_ids"].tolist(), rows[1]["labels"].tolist()
        ([7, 8, 0, 9], [6, 0, -100, -100])
    """
    compiled = _compiled_rows(corpus, sources, js, seq_len, outputs)
    if compiled is not None:
        return compiled
    return packed_rows(corpus, *gather_rows(sources, js), seq_len, outputs)


def gather_rows(sources: list[Window], js: I64) -> tuple[I64, I64, I64, npt.NDArray[np.bool_], I64]:
    """The rows' pieces one row after the other, and each row's piece count.

    Row ``r`` is bin ``js[r]`` of ``sources[r]`` (as :func:`window_rows` reads them): its
    slice of each column, the slices of each column joined by one concatenation.

    Examples:
        >>> import numpy as np
        >>> window = (np.array([0, 1, 3]), np.array([4, 5, 6]), np.array([0, 3, 6]),
        ...           np.array([3, 3, 2]), np.array([True, False, True]))
        >>> docs, firsts, counts, closes, pieces = gather_rows([window, window], np.array([1, 0]))
        >>> docs.tolist(), counts.tolist(), pieces.tolist()
        ([5, 6, 4], [3, 2, 3], [2, 1])
    """
    docs_at, firsts_at, counts_at, closes_at = [], [], [], []
    sizes = []
    for (offsets, docs, firsts, counts, closes), j in zip(sources, js.tolist(), strict=True):
        a, b = offsets[j : j + 2].tolist()
        docs_at.append(docs[a:b])
        firsts_at.append(firsts[a:b])
        counts_at.append(counts[a:b])
        closes_at.append(closes[a:b])
        sizes.append(b - a)
    return (np.concatenate(docs_at), np.concatenate(firsts_at), np.concatenate(counts_at),
            np.concatenate(closes_at), np.array(sizes, dtype=np.int64))  # fmt: skip


def packed_rows(
    corpus: TokenCorpus,
    docs: I64,
    firsts: I64,
    counts: I64,
    closes: npt.NDArray[np.bool_],
    pieces: I64,
    seq_len: int,
    outputs: tuple[str, ...],
) -> BatchRows:
    """The rows of ``len(pieces)`` packed sequences, in numpy (NOTE [ packed batch rows ]).

    The reference :func:`window_rows`' compiled path is checked against, and its fallback.

    Args:
        corpus: The tokens.
        docs: Each piece's document, the rows' pieces one after the other.
        firsts: Each piece's first corpus token.
        counts: Each piece's tokens (a row's sum to at most ``seq_len + 1``).
        closes: Whether each piece ends its document.
        pieces: How many pieces each row has (at least one).
        seq_len: ``L``.
        outputs: The arrays to compute, from ``check_outputs``.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "t.npy"
        >>> np.save(path, np.array([5, 6, 0, 7, 8, 0, 9, 0], dtype=np.uint16))
        >>> corpus = TokenCorpus(path, eod_id=0)
        >>> rows = packed_rows(corpus, np.array([0, 1, 2]), np.array([0, 3, 6]),
        ...                    np.array([3, 3, 2]), np.array([True, True, True]),
        ...                    np.array([1, 2]), 4, ("input_ids", "labels", "cu_seqlens"))
        >>> rows[0]["input_ids"].tolist(), rows[0]["labels"].tolist()
        ([5, 6, 0, 0], [6, 0, -100, -100])
        >>> rows[1]["input_ids"].tolist(), rows[1]["cu_seqlens"].tolist()
        ([7, 8, 0, 9], [0, 3, 4, 4, 4])
    """
    count, length, width = len(pieces), seq_len, seq_len + 1
    n = len(counts)
    last = np.cumsum(pieces) - 1  # each row's last piece
    ends = np.cumsum(counts)  # in the batch's real tokens
    row_ends = ends[last]
    used = row_ends.copy()  # each row's real tokens
    used[1:] -= row_ends[:-1]
    full = used == width  # rows without padding: their last token is no input
    row = np.repeat(np.arange(count, dtype=np.int64), pieces)
    local = ends - (row_ends - used)[row]  # each piece's end in its row
    # The pieces and each row's padding piece after it (NOTE [ packed batch rows ]), each
    # row's last real token left out where the row is full: ``spans`` fill ``B L`` inputs.
    at = np.arange(n, dtype=np.int64) + row  # a piece's place among them
    pad = last + np.arange(1, count + 1, dtype=np.int64)  # each row's padding piece
    spans = np.empty(n + count, dtype=np.int64)
    spans[at] = counts
    spans[pad] = length - used
    spans[pad[full]] = 0
    spans[pad[full] - 1] -= 1
    input_ids, labels = _tokens(corpus, firsts, counts, spans, at, pad, used, length,
                                "labels" in outputs)  # fmt: skip
    table: dict[str, npt.NDArray[Any]] = {"input_ids": input_ids}
    if labels is not None:
        for r, u in enumerate(used.tolist()):
            if u <= length:  # a row's last real token closes its document
                labels[r, u - 1 :] = IGNORE_INDEX
        inner = closes & (local <= length)  # a closing piece's last token is an input
        labels.reshape(-1)[row[inner] * length + local[inner] - 1] = IGNORE_INDEX
        table["labels"] = labels
    span_ends = np.cumsum(spans)
    if "position_ids" in outputs:
        # Each value's column less its span's start: one repeat, subtracted in place.
        positions = np.repeat(span_ends - spans, spans)
        np.subtract(_columns(count * length), positions, out=positions)
        table["position_ids"] = positions.reshape(count, length)
    if "document_ids" in outputs:
        owners = np.full(n + count, -1, dtype=np.int64)
        owners[at] = docs
        table["document_ids"] = np.repeat(owners, spans).reshape(count, length)
    collated: dict[str, npt.NDArray[Any]] = {}
    if "cu_seqlens" in outputs:
        cu = np.full((count, width), length, dtype=np.int32)
        cu[:, 0] = 0
        inner = local < length
        rank = np.arange(n, dtype=np.int64) - (last + 1 - pieces)[row]
        cu[row[inner], 1 + rank[inner]] = local[inner]
        table["cu_seqlens"] = cu
        # The batch's flattened offsets, as collate_tokens makes them: every span's end
        # where it rises (a padding or a last piece of no inputs rises by 0), then B L.
        total = count * length
        flat = np.full(total + 1, total, dtype=np.int32)
        flat[0] = 0
        rises = span_ends[spans > 0]
        flat[1 : 1 + len(rises)] = rises
        collated["cu_seqlens"] = flat
    return BatchRows({key: table[key] for key in outputs}, collated)


#: The token dtypes the compiled rows read (native byte order).
_COMPILED_DTYPES = frozenset(
    np.dtype(name) for name in ("uint8", "uint16", "uint32", "int32", "int64")
)


def _compiled_rows(
    corpus: TokenCorpus,
    sources: list[Window],
    js: I64,
    seq_len: int,
    outputs: tuple[str, ...],
) -> BatchRows | None:
    """:func:`window_rows` in the compiled kernel, or ``None`` where the numpy path runs.

    The kernel (``pack_rows``, NOTE [ packed batch rows ]) reads one mapped file's tokens;
    pieces in several files, a remote file, another dtype or a token outside
    ``[0, vocab_size)`` (the numpy path names its file) take the numpy path.
    """
    kernel = _native.kernel
    files = corpus._tokens  # the corpus's plain views of its mapped files, read only
    if kernel is None or len(files) != 1:
        return None
    tokens = files[0]
    if not isinstance(tokens, np.ndarray) or tokens.dtype not in _COMPILED_DTYPES:
        return None
    count, length = len(js), seq_len

    def made(key: str, shape: tuple[int, ...], dtype: type) -> npt.NDArray[Any] | None:
        return np.empty(shape, dtype=dtype) if key in outputs else None

    input_ids = np.empty((count, length), dtype=np.int64)
    labels = made("labels", (count, length), np.int64)
    positions = made("position_ids", (count, length), np.int64)
    documents = made("document_ids", (count, length), np.int64)
    cu = made("cu_seqlens", (count, length + 1), np.int32)
    flat = made("cu_seqlens", (count * length + 1,), np.int32)
    inside = kernel.pack_rows(
        tokens, int(corpus._token_start[0]), sources, js, length, corpus.vocab_size or 0,
        input_ids, labels, positions, documents, cu, flat,
    )  # fmt: skip
    if not inside:
        return None  # the numpy path raises, naming the file
    table = {"input_ids": input_ids, "labels": labels, "position_ids": positions,
             "document_ids": documents, "cu_seqlens": cu}  # fmt: skip
    collated = {"cu_seqlens": flat} if flat is not None else {}
    return BatchRows({key: table[key] for key in outputs}, collated)  # type: ignore[misc]


@functools.lru_cache(maxsize=4)
def _columns(total: int) -> I64:
    """``0, 1, ..., total - 1``, made once per batch shape and read only."""
    columns = np.arange(total, dtype=np.int64)
    columns.flags.writeable = False
    return columns


def _tokens(
    corpus: TokenCorpus,
    firsts: I64,
    counts: I64,
    spans: I64,
    at: I64,
    pad: I64,
    used: I64,
    length: int,
    labels: bool,
) -> tuple[I64, I64 | None]:
    """The rows' input ids, and their labels before any ``IGNORE_INDEX`` if ``labels``.

    A piece lies inside one file, so it is one slice of a mapped file: the ``B L`` inputs
    are one ``np.concatenate`` of the batch's few dozen slices (each row's last real token
    left out where it is full, zeros for the padding), cast to int64 on the way; the labels
    are the same values one place on, and each full row's last token. A remote file (not
    mapped) or a token outside ``[0, vocab_size)`` reads through
    :meth:`~detsamplers.tokens.TokenCorpus.read_pieces`, which names the file of a bad one.
    """
    count = len(used)
    full = used == length + 1
    files = corpus._tokens  # the corpus's plain views of its mapped files, read only
    if all(isinstance(tokens, np.ndarray) for tokens in files):
        starts = corpus._token_start
        if len(files) == 1:
            begins = firsts - int(starts[0])
            which = np.zeros(len(firsts), dtype=np.int64)
        else:
            which = np.searchsorted(starts, firsts, side="right") - 1
            begins = firsts - starts[which]
        source = np.zeros(len(spans), dtype=np.int64)  # the padding reads from ``zeros``
        source[at] = which
        source[pad] = len(files)
        lows = np.zeros(len(spans), dtype=np.int64)
        lows[at] = begins
        highs = lows + spans
        sources = [*files, np.zeros(length + 1, dtype=files[0].dtype)]
        parts = [sources[f][a:b] for f, a, b in zip(source.tolist(), lows.tolist(),
                                                    highs.tolist(), strict=True)]  # fmt: skip
        parts.append(sources[-1][:1])  # the labels' one token past the last row
        flat = np.concatenate(parts, dtype=np.int64)
        # Each full row's last token: its label at column L - 1, never an input.
        ends = (pad - 1)[full]
        tail = [int(sources[f][b]) for f, b in zip(source[ends].tolist(), highs[ends].tolist(),
                                                   strict=True)]  # fmt: skip
        vocab = corpus.vocab_size
        bad = vocab is not None and (
            int(flat.max()) >= vocab or int(flat.min()) < 0 or any(not 0 <= t < vocab for t in tail)
        )
        if not bad:
            inputs = flat[: count * length].reshape(count, length)
            if not labels:
                return inputs, None
            shifted = flat[1:].reshape(count, length).copy()
            shifted[full, length - 1] = tail
            return inputs, shifted
    real = corpus.read_pieces(firsts, counts)  # each row's real tokens, row after row
    table = np.zeros((count, length + 1), dtype=np.int64)
    begin = 0
    for r, n in enumerate(used.tolist()):
        table[r, :n] = real[begin : begin + n]
        begin += n
    return table[:, :length].copy(), table[:, 1:].copy() if labels else None
