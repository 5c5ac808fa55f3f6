"""A batch of packed sequences' features, computed for the batch at once.

NOTE [ packed batch rows ]
A packed sequence is its bin's pieces from column 0, then padding up to ``L + 1`` tokens
(NOTE [ packed sequences ]); the padding is one more piece of token 0 and document ``-1``
whose positions restart at 0 and whose labels are ``IGNORE_INDEX`` (NOTE [ sequence
features ]). :func:`packed_rows` builds the ``B`` rows' arrays directly at their final
``(B, L)`` shape, each one contiguous (so ``collate_tokens`` converts them without a
copy), and only the ``outputs`` asked for:

- ``input_ids`` and ``labels``: each row's real tokens copied once into its row (one
  slice a row: a row's pieces are consecutive in the batch's tokens), zeros after them;
  the labels are the same tokens one column to the left, ``IGNORE_INDEX`` from the row's
  last real token on when it closes its document (a piece that does not close a document
  fills its bin, so the last real token of a row that has padding always closes one) and
  at every other closing piece's last token (one scatter for the batch).
- ``position_ids`` and ``document_ids``: one ``np.repeat`` each over the batch's pieces
  with each row's padding piece put after its pieces (a padding of 0 tokens where the
  bin is full), the last piece of each row one token shorter so that the ``B L`` values
  come out in place.
- ``cu_seqlens``: each row's piece ends below ``L`` at columns ``1, 2, ...`` (the ends
  of a row's pieces rise, so those below ``L`` come first), ``L`` after them.

The arrays are those of :func:`~detsamplers.tokens._features.features` on each padded
window (tests/tokens/test_tokens_pack.py pins them against a plain reference).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ._corpus import TokenCorpus
from ._features import IGNORE_INDEX, BatchRows

__all__ = ["packed_rows"]

I64 = npt.NDArray[np.int64]


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
    """The rows of ``len(pieces)`` packed sequences (NOTE [ packed batch rows ]).

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
    ends = np.cumsum(counts)  # in the batch's real tokens
    last = np.cumsum(pieces) - 1  # each row's last piece
    row_ends = ends[last]
    used = np.diff(row_ends, prepend=0)  # each row's real tokens
    row = np.repeat(np.arange(count, dtype=np.int64), pieces)
    local = ends - (row_ends - used)[row]  # each piece's end in its row
    tokens = _tokens(corpus, firsts, counts, row * width + local - counts, count * width)
    tokens = tokens.reshape(count, width)
    table: dict[str, npt.NDArray[Any]] = {"input_ids": tokens[:, :length].copy()}
    if "labels" in outputs:
        labels = tokens[:, 1:].copy()
        for r, n in enumerate(used.tolist()):
            labels[r, n - 1 :] = IGNORE_INDEX  # a row's last real token closes its document
        inner = closes & (local <= length)  # a closing piece's last token is an input
        labels.reshape(-1)[row[inner] * length + local[inner] - 1] = IGNORE_INDEX
        table["labels"] = labels
    if "position_ids" in outputs or "document_ids" in outputs:
        # The pieces with each row's padding piece after them, every row one token short.
        at = np.arange(len(counts), dtype=np.int64) + row  # a piece's place among them
        pad = last + np.arange(1, count + 1, dtype=np.int64)  # each row's padding piece
        spans = np.empty(len(counts) + count, dtype=np.int64)
        spans[at] = counts
        spans[pad] = width - used
        spans[pad - (used == width)] -= 1  # the row's last token is no input
        if "position_ids" in outputs:
            flat = np.arange(count * length, dtype=np.int64)
            flat -= np.repeat(np.cumsum(spans) - spans, spans)
            table["position_ids"] = flat.reshape(count, length)
        if "document_ids" in outputs:
            owners = np.full(len(spans), -1, dtype=np.int64)
            owners[at] = docs
            table["document_ids"] = np.repeat(owners, spans).reshape(count, length)
    if "cu_seqlens" in outputs:
        cu = np.full((count, width), length, dtype=np.int32)
        cu[:, 0] = 0
        inner = local < length
        rank = np.arange(len(counts), dtype=np.int64) - (last + 1 - pieces)[row]
        cu[row[inner], 1 + rank[inner]] = local[inner]
        table["cu_seqlens"] = cu
    return BatchRows({key: table[key] for key in outputs})


def _tokens(corpus: TokenCorpus, firsts: I64, counts: I64, places: I64, size: int) -> I64:
    """``size`` tokens, zeros but for each piece's at its place: one slice copy a piece.

    A piece lies inside one file, so it is one slice of a mapped file: a batch's few dozen
    pieces cost a few dozen copies, not a gather of each token's index. A remote file
    (not mapped) or a token outside ``[0, vocab_size)`` reads through
    :meth:`~detsamplers.tokens.TokenCorpus.read_pieces`, which names the file of a bad one.
    """
    out = np.zeros(size, dtype=np.int64)
    files = corpus._tokens  # the corpus's mapped files, read only
    if all(isinstance(tokens, np.ndarray) for tokens in files):
        mapped = [np.asarray(tokens) for tokens in files]  # plain views: cheaper slices
        starts = corpus._token_start
        which = np.searchsorted(starts, firsts, side="right") - 1
        begins = (firsts - starts[which]).tolist()
        for f, a, n, at in zip(which.tolist(), begins, counts.tolist(), places.tolist(),
                               strict=True):  # fmt: skip
            out[at : at + n] = mapped[f][a : a + n]
        vocab = corpus.vocab_size
        if vocab is None or not ((out >= vocab) | (out < 0)).any():
            return out
    real = corpus.read_pieces(firsts, counts)
    out[np.repeat(places - np.cumsum(counts) + counts, counts) + np.arange(len(real))] = real
    return out
