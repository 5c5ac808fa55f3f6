"""A batch of ``concat`` windows read at once: one search per batch, one copy per piece.

NOTE [ batched concat windows ]
``concat`` sequence ``k`` of epoch ``e`` is stream tokens ``[k w, (k + 1) w)`` with
``w = L + 1`` (NOTE [ block-hierarchical concat ]). Read one by one, each window costs a
search for its block, and per block a search for its first and last documents and a
handful of small arrays: a dozen numpy calls per sequence; its tokens were then gathered
token by token (one index per token). A batch's windows need only:

- the blocks: those the windows meet, built at once and laid end to end, each epoch
  after the other, in stream order (``ConcatOrder.laid_out``: one keyed-order call, one
  gather of document ends and two cumulative sums for all of them), with each
  document's end moved to its stream position (plus ``r (T + 1)`` for the ``r``-th
  distinct epoch of the batch, so that the ends of the whole table increase);
- the pieces: each window's first and last documents are two ``searchsorted`` calls over
  the batch on that table (the first document ending after the window's start, the
  first ending at or after its stop), the documents between them one ``arange``;
- the tokens: each piece's slice of its memory-mapped file copied into its place in one
  ``(B, w)`` int64 table (the conversion happens in that copy), checked against
  ``vocab_size`` in one pass; a bad id re-reads the pieces one by one, whose error names
  the file and the offset.

The blocks met by a window are consecutive in the epoch's block order and all in the
table, so the documents between a window's first and last are exactly those it meets,
as the per-sequence walk finds them block after block (every document holds a token: a
corpus refuses an empty one, so no two documents end at the same stream token). A corpus
with a remote file returns ``None`` and the caller reads sequence by sequence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ._concat import ConcatOrder
    from ._corpus import TokenCorpus

__all__ = ["concat_windows"]

I64 = npt.NDArray[np.int64]
#: The windows' tokens ``(B, w)`` and pieces (documents, counts, closes, pieces per row).
Windows = tuple[I64, I64, I64, npt.NDArray[np.bool_], I64]


def concat_windows(order: ConcatOrder, sequences: I64, epochs: I64, width: int) -> Windows | None:
    """Sequences ``sequences[j]`` of epochs ``epochs[j]``, or ``None`` where not batched.

    Args:
        order: The ``concat`` order read.
        sequences: Each window's sequence number ``k`` (stream tokens ``[k w, (k + 1) w)``).
        epochs: Each window's epoch.
        width: ``w``, the tokens per window.

    Returns:
        The ``(B, width)`` int64 tokens and the windows' pieces one row after the other:
        each piece's document, its token count, whether it ends its document, and how many
        pieces each row has (what :func:`features_rows` takes).

    Raises:
        ValueError: a token id lies outside ``[0, vocab_size)`` (as ``read`` says it).

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> from detsamplers.tokens import TokenCorpus
        >>> from detsamplers.tokens._concat import ConcatOrder
        >>> path = Path(tempfile.mkdtemp()) / "t.npy"
        >>> np.save(path, np.array([1, 0, 2, 2, 0, 3, 3, 3, 0], dtype=np.uint16))
        >>> order = ConcatOrder(TokenCorpus(path, eod_id=0), seed=0, block_documents=2)
        >>> tokens, docs, counts, closes, pieces = concat_windows(
        ...     order, np.array([1, 0]), np.array([0, 1]), 4)
        >>> tokens.tolist(), docs.tolist(), counts.tolist(), pieces.tolist()
        ([[1, 0, 2, 2], [3, 3, 3, 0]], [0, 1, 2], [2, 2, 4], [2, 1])
    """
    corpus = order._corpus
    if not all(isinstance(tokens, np.ndarray) for tokens in corpus._tokens):
        return None
    starts = sequences * width
    stops = starts + width
    shift = np.int64(corpus.num_tokens + 1)
    keys_start = starts.copy()
    met: list[tuple[I64, I64, I64]] = []  # per epoch: the blocks met, their epoch, base
    for rank, epoch in enumerate(dict.fromkeys(epochs.tolist())):  # np.unique imports numpy.ma
        mine = epochs == epoch
        keys_start[mine] += rank * shift
        block_order, cumulative = order.index(epoch)
        low = np.searchsorted(cumulative, starts[mine], side="right") - 1
        high = np.searchsorted(cumulative, stops[mine], side="left")
        # The blocks met, each once, in stream order: a window's are consecutive.
        spans = np.zeros(len(cumulative), dtype=np.int64)  # a block can hold many windows
        np.add.at(spans, low, 1)
        np.add.at(spans, high, -1)
        j = np.flatnonzero(np.cumsum(spans) > 0)
        met.append((block_order[j], np.full(len(j), epoch, dtype=np.int64),
                    cumulative[j] + rank * shift))  # fmt: skip
    blocks, block_epochs, bases = (
        column[0] if len(met) == 1 else np.concatenate(column) for column in zip(*met, strict=True)
    )
    docs, firsts, lengths, ends = order.laid_out(blocks, block_epochs, bases)
    keys_stop = keys_start + width
    low = np.searchsorted(ends, keys_start, side="right")
    high = np.searchsorted(ends, keys_stop, side="left") + 1
    pieces = (high - low).astype(np.int64)
    row = np.repeat(np.arange(len(sequences), dtype=np.int64), pieces)
    begins = np.cumsum(pieces) - pieces
    at = np.arange(int(pieces.sum()), dtype=np.int64) - begins[row] + low[row]
    doc_end = ends[at]
    doc_begin = doc_end - lengths[at]
    first = np.maximum(doc_begin, keys_start[row])
    end = np.minimum(doc_end, keys_stop[row])
    counts = end - first
    tokens = _copy(corpus, firsts[at] + (first - doc_begin), counts, len(sequences), width)
    return tokens, docs[at], counts, end == doc_end, pieces


def _copy(corpus: TokenCorpus, firsts: I64, counts: I64, rows: int, width: int) -> I64:
    """The pieces ``[firsts[i], firsts[i] + counts[i])`` as ``rows`` rows of ``width``."""
    table = np.empty(rows * width, dtype=np.int64)
    token_start = corpus._token_start
    files = np.searchsorted(token_start, firsts, side="right") - 1
    local = firsts - token_start[files]
    offset = 0
    mapped = corpus._tokens
    for f, first, count in zip(files.tolist(), local.tolist(), counts.tolist(), strict=True):
        table[offset : offset + count] = mapped[f][first : first + count]  # converts to int64
        offset += count
    vocab = corpus.vocab_size
    if vocab is not None and bool(((table >= vocab) | (table < 0)).any()):
        corpus._read_each(firsts, counts)  # raises, naming the file and the offset
    return table.reshape(rows, width)
