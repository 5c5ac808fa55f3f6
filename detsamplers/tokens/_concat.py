"""The ``concat`` order: documents shuffled by blocks, concatenated, located by token totals.

NOTE [ block-hierarchical concat ]
Megatron's ``GPTDataset`` shuffles the documents and then builds, up front, a sample index
of O(documents) entries mapping each sequence to its first document and offset. Here the
``D`` documents are cut into blocks of ``B`` consecutive documents (block ``b`` holds
documents ``[bB, min((b + 1)B, D))``; ``nb = ceil(D / B)`` blocks), and the shuffled order
is two keyed permutations (NOTE [ keyed permutation ], keys hashed from the seed,
NOTE [ seed mixing ]):

- in epoch ``e``, the blocks in the order ``pi_e`` (the keyed family evaluated at ``e``, a
  permutation of ``[0, nb)``);
- inside block ``b`` in epoch ``e``, its documents in the order ``sigma_{b,e}`` (a
  permutation of the block's documents: one keyed family evaluated at ``b + e nb``, so
  each block of each epoch has its own).

The shuffled stream of epoch ``e`` is block ``pi_e(0)``'s documents in the order
``sigma_{pi_e(0),e}``, then block ``pi_e(1)``'s, and so on. Its only index is ``C_e``, the
``nb + 1`` cumulative token totals of the blocks in the order ``pi_e`` (a block's total is
the difference of two document starts, read once; ``C_e`` is a gather and a cumulative sum
of those ``nb`` totals), built when epoch ``e`` is first asked for; the last
``CACHED_EPOCHS`` epochs' indexes are kept (a batch spans at most two epochs). Token ``t``
of the stream lies in the block at ``j = max{j : C_e[j] <= t}`` (a binary search), and
inside it at the document found by a cumulative sum of that block's ``B`` permuted
lengths: O(log nb + B) per sequence, O(D / B) memory per cached epoch. A batch's blocks
are permuted in one vectorised call (``ConcatOrder.prepare``; ``ConcatOrder.laid_out``
for a batch read at once): the same orders, without a call's overhead per block.

Every token once per epoch: ``pi_e`` and each ``sigma_{b,e}`` are bijections, so the stream lists
every document exactly once, each whole and in storage order inside, and its length is the
corpus's ``T`` tokens. Sequence ``k`` is stream tokens ``[k(L + 1), (k + 1)(L + 1))`` for
``k < T // (L + 1)``: these windows are disjoint and cover the stream but for its last
``T mod (L + 1)`` tokens (under one sequence), so each of the other tokens appears in
exactly one sequence. Sequence ``k`` of epoch ``e`` is a pure function of
``(corpus, seed, B, L, e, k)``; epoch 0's order is the one every earlier release had (the
keys of ``e = 0`` are unchanged), and the epoch reaches the dataset through the loader
(NOTE [ epoch-aware datasets ]).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import numpy.typing as npt

from .._permute import FeistelPermutation
from .._seeds import derive
from ._corpus import TokenCorpus

__all__ = ["ConcatOrder", "Pieces"]

I64 = npt.NDArray[np.int64]
#: A window as pieces of documents: (document, first corpus token, tokens, ends its document).
Pieces = tuple[I64, I64, I64, npt.NDArray[np.bool_]]
#: Blocks whose permuted documents and lengths are kept (a window spans a few).
CACHED_BLOCKS = 8
#: Epochs whose block order and cumulative totals are kept.
CACHED_EPOCHS = 2


class ConcatOrder:
    """The documents of ``corpus`` in a block-hierarchical shuffled order, one per epoch.

    Args:
        corpus: The documents.
        seed: Keys both permutations.
        block_documents: ``B``, documents per block.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "t.npy"
        >>> np.save(path, np.array([1, 0, 2, 2, 0, 3, 3, 3, 0], dtype=np.uint16))
        >>> order = ConcatOrder(TokenCorpus(path, eod_id=0), seed=0, block_documents=2)
        >>> docs, first, count, closes = order.pieces(0, 9, epoch=1)
        >>> sorted(docs.tolist()), int(count.sum()), bool(closes.all())
        ([0, 1, 2], 9, True)
    """

    def __init__(self, corpus: TokenCorpus, seed: int, block_documents: int) -> None:
        self._corpus = corpus
        documents = corpus.num_documents
        self._size = block_documents
        self._blocks = -(-documents // block_documents)
        self._last = documents - (self._blocks - 1) * block_documents
        self._outer = FeistelPermutation(self._blocks, derive(seed, "tokens-concat-blocks"))
        self._inner = FeistelPermutation(block_documents, derive(seed, "tokens-concat-docs"))
        self._inner_last = FeistelPermutation(self._last, derive(seed, "tokens-concat-docs"))
        self._firsts = corpus.block_starts(block_documents)
        self._totals = np.diff(self._firsts)
        self._all_blocks = np.arange(self._blocks, dtype=np.int64)
        self._epochs: OrderedDict[int, tuple[I64, I64]] = OrderedDict()
        self._cache: OrderedDict[tuple[int, int], tuple[I64, I64, I64, I64]] = OrderedDict()
        self._capacity = CACHED_BLOCKS  # no epoch's index yet: a resume asks for its own

    def index(self, epoch: int) -> tuple[I64, I64]:
        """Epoch ``epoch``'s block order ``pi_e`` and cumulative totals ``C_e`` (cached)."""
        found = self._epochs.get(epoch)
        if found is not None:
            self._epochs.move_to_end(epoch)
            return found
        order = self._outer.at_epoch(self._all_blocks, epoch)
        cumulative = np.zeros(self._blocks + 1, dtype=np.int64)
        np.cumsum(self._totals[order], out=cumulative[1:])
        found = (order, cumulative)
        self._epochs[epoch] = found
        while len(self._epochs) > CACHED_EPOCHS:
            self._epochs.popitem(last=False)
        return found

    def _block(self, block: int, epoch: int) -> tuple[I64, I64, I64, I64]:
        """Block ``block``'s documents in epoch ``epoch``'s order, starts, lengths, ends."""
        found = self._cache.get((epoch, block))
        if found is not None:
            self._cache.move_to_end((epoch, block))
            return found
        last = block == self._blocks - 1
        count = self._last if last else self._size
        perm = self._inner_last if last else self._inner
        local = perm.at_epoch(np.arange(count, dtype=np.int64), block + epoch * self._blocks)
        return self._keep(block, epoch, local)

    def _keep(
        self, block: int, epoch: int, local: I64, begins: I64 | None = None
    ) -> tuple[I64, I64, I64, I64]:
        """Cache block ``block`` of epoch ``epoch`` given its documents' order ``local``.

        ``begins``: the block's document starts in storage order, if already read.
        """
        first = block * self._size
        if begins is None:
            stored = self._corpus.lengths(first, first + len(local))
            # The block's documents tile its tokens: each start is the block's first
            # token plus the lengths before it in storage order (no search per document).
            bounds = self._corpus.starts(np.array([first, first + len(local)], np.int64))
            self._agree(np.array([block], np.int64), bounds[:1], bounds[1:])
            begins = np.cumsum(stored) - stored + self._firsts[block]
        else:
            stored = np.diff(begins, append=self._firsts[block + 1])
        lengths = stored[local]
        return self._store((epoch, block), (local + first, begins[local], lengths,
                                            np.cumsum(lengths)))  # fmt: skip

    def _store(
        self, key: tuple[int, int], found: tuple[I64, I64, I64, I64]
    ) -> tuple[I64, I64, I64, I64]:
        """Keep a built block in the cache, dropping the least recently used beyond it."""
        self._cache[key] = found
        while len(self._cache) > max(CACHED_BLOCKS, self._capacity):
            self._cache.popitem(last=False)
        return found

    def prepare(self, windows: list[tuple[int, int, int]]) -> None:
        """Build at once the blocks that the ``(start, stop, epoch)`` windows will read.

        The permutations of every missing full block are one vectorised call of the keyed
        family (each block at its own ``b + e nb``), not one call per block: a batch of
        random windows touches a block or two each, and per-call overhead dominates a
        block's few thousand elements. The orders are the same as :meth:`_block`'s.
        """
        self.prepare_table(np.array(windows, dtype=np.int64).reshape(-1, 3))

    def prepare_table(self, table: I64) -> None:
        """:meth:`prepare` of the windows as the rows of a ``(n, 3)`` int64 table."""
        wanted: dict[tuple[int, int], None] = {}
        for epoch in dict.fromkeys(table[:, 2].tolist()):
            order, cumulative = self.index(epoch)
            mine = table[table[:, 2] == epoch]
            # Each window's blocks j .. k - 1, searched for the epoch's windows at once.
            j = np.searchsorted(cumulative, mine[:, 0], side="right") - 1
            k = np.searchsorted(cumulative, mine[:, 1], side="left")
            spans = k - j
            at = np.arange(int(spans.sum()), dtype=np.int64) - np.repeat(
                np.cumsum(spans) - spans - j, spans
            )
            for block in order[at].tolist():
                wanted[(epoch, block)] = None
        self._capacity = len(wanted)
        missing = [key for key in wanted if key not in self._cache and key[1] != self._blocks - 1]
        if len(missing) < 2:
            return
        keys = np.array([block + epoch * self._blocks for epoch, block in missing], np.int64)
        size = self._size
        # The family's own evaluation at many epochs, one row per block (its round keys
        # hashed once, not per element: that costs more than the network itself).
        local = self._inner.rows(keys)
        # Every missing block's document starts in one read of the boundaries, and its
        # lengths, permuted starts and running ends in one array operation each (rows of
        # a (blocks, size) table), not a handful of small calls per block.
        blocks = np.array([block for _, block in missing], dtype=np.int64)
        read = self._corpus.starts((blocks[:, None] * size + np.arange(size + 1)).ravel())
        table = read.reshape(-1, size + 1)
        self._agree(blocks, table[:, 0], table[:, -1])
        begins = table[:, :-1].ravel()
        stored = np.empty_like(begins)
        stored[:-1] = begins[1:]
        stored[size - 1 :: size] = self._firsts[blocks + 1]
        stored -= begins
        rows = local + (np.arange(len(missing), dtype=np.int64) * size)[:, None]
        lengths = stored[rows]
        docs = local + (blocks * size)[:, None]
        ends = np.cumsum(lengths, axis=1)
        starts = begins[rows]
        for i, key in enumerate(missing):
            self._store(key, (docs[i], starts[i], lengths[i], ends[i]))

    def laid_out(self, blocks: I64, epochs: I64, bases: I64) -> tuple[I64, I64, I64, I64]:
        """Blocks ``blocks[i]`` of epochs ``epochs[i]`` one after the other, built at once.

        What a batch's windows search (NOTE [ batched concat windows ]): each block's
        documents in its epoch's order, their first corpus tokens, lengths and running
        ends plus ``bases[i]``, the blocks' arrays end to end. The full blocks are one
        table each: the keyed orders one call of the family (one row per block at
        ``b + e nb``), the lengths one gather of the blocks' document ends (a block's
        documents are consecutive), the starts one cumulative sum of the lengths in
        storage order, the ends one cumulative sum in the keyed order. Nothing is cached:
        the blocks a batch meets are those its random windows fall in, met again by a
        later batch about once in ``nb``. A batch meeting the corpus's last (shorter)
        block builds its blocks one by one (:meth:`_block`). The same arrays as
        :meth:`_block`'s, block for block (``tests/tokens/test_tokens_concat_batch.py``).
        """
        size = self._size
        if self._blocks == 1 or bool((blocks == self._blocks - 1).any()):
            pairs = zip(blocks.tolist(), epochs.tolist(), strict=True)
            parts = [self._block(block, epoch) for block, epoch in pairs]
            columns = [np.concatenate(column) for column in zip(*parts, strict=True)]
            count = np.array([len(part[0]) for part in parts], dtype=np.int64)
            columns[3] = columns[3] + np.repeat(bases, count)
            return columns[0], columns[1], columns[2], columns[3]
        local = self._inner.rows(blocks + epochs * self._blocks)  # (m, size)
        stored = self._stored_lengths(blocks)
        begins = np.cumsum(stored, axis=1)
        begins -= stored
        begins += self._firsts[blocks][:, None]
        flat = (local + (np.arange(len(blocks), dtype=np.int64) * size)[:, None]).ravel()
        lengths = stored.ravel()[flat]
        ends = np.cumsum(lengths.reshape(-1, size), axis=1)
        ends += bases[:, None]
        docs = (local + (blocks * size)[:, None]).ravel()
        return docs, begins.ravel()[flat], lengths, ends.ravel()

    def _stored_lengths(self, blocks: I64) -> I64:
        """The full blocks' document lengths in storage order, a ``(len(blocks), B)`` table."""
        corpus = self._corpus
        docs = (blocks * self._size)[:, None] + np.arange(self._size, dtype=np.int64)
        if len(corpus._ends) == 1:
            # One file: the blocks' document ends are one gather of its ends, with the end
            # before each block. The ends read are checked, not their regions: the block
            # starts increase inside [0, tokens] (checked at build), each block's end before
            # it is its block start and its last end the next one, so lengths of at least 1
            # make every end read increase inside the file (NOTE [ pair check ]); else the
            # regions are checked, which names the cache, then the starts (NOTE [ block
            # starts on disk ]).
            ends = corpus._ends[0]
            found: I64 = ends[docs].astype(np.int64, copy=False)
            # Each block's first start read too: the end of the document before it.
            before = np.where(blocks > 0, ends[np.maximum(docs[:, 0] - 1, 0)], 0)
            lengths = np.diff(found, axis=1, prepend=before[:, None])
            if not (
                bool((lengths >= 1).all())
                and bool((before == self._firsts[blocks]).all())
                and bool((found[:, -1] == self._firsts[blocks + 1]).all())
            ):
                corpus._checks[0].cover_at(ends, docs.ravel())  # each with the end before it
                self._agree(blocks, before, found[:, -1])
            return lengths
        read = corpus.starts(np.append(docs, docs[:, -1:] + 1, axis=1).ravel())
        table = read.reshape(len(blocks), self._size + 1)
        self._agree(blocks, table[:, 0], table[:, -1])
        return np.diff(table, axis=1)

    def _agree(self, blocks: I64, firsts: I64, stops: I64) -> None:
        """Refuse block starts that differ from ``firsts`` and ``stops``, read from the ends.

        The starts a ``concat`` order locates its blocks by may come from a file
        (NOTE [ block starts on disk ]): each block a batch builds has its first and
        next-block start compared with its documents' ends, read and checked.

        Raises:
            ValueError: they differ (the block starts file is named).
        """
        if bool((firsts == self._firsts[blocks]).all()) and bool(
            (stops == self._firsts[blocks + 1]).all()
        ):
            return
        kept = self._corpus.block_file(self._size)
        raise ValueError(
            f"block starts file {kept} should hold the starts of the corpus's blocks, but "
            "a block's start differs from its documents' ends; delete it (the next open "
            "rewrites it)"
        )

    def pieces(self, start: int, stop: int, epoch: int = 0) -> Pieces:
        """The pieces of documents making epoch ``epoch``'s stream tokens ``[start, stop)``."""
        order, cumulative = self.index(epoch)
        parts: list[Pieces] = []
        j = int(np.searchsorted(cumulative, start, side="right")) - 1
        while start < stop:
            docs, starts, lengths, ends = self._block(int(order[j]), epoch)
            base = int(cumulative[j])
            # The documents meeting [start, stop) in this block: i .. last, each cut to it.
            i = int(np.searchsorted(ends, start - base, side="right"))
            last = min(int(np.searchsorted(ends, stop - base, side="left")), len(docs) - 1)
            doc_end = ends[i : last + 1] + base
            doc_begin = doc_end - lengths[i : last + 1]
            first = np.maximum(doc_begin, start)
            end = np.minimum(doc_end, stop)
            parts.append((docs[i : last + 1], starts[i : last + 1] + (first - doc_begin),
                          end - first, end == doc_end))  # fmt: skip
            start = min(stop, base + int(ends[-1]))
            j += 1
        if len(parts) == 1:
            return parts[0]
        docs_, firsts, counts, closes = zip(*parts, strict=True)
        return (np.concatenate(docs_), np.concatenate(firsts), np.concatenate(counts),
                np.concatenate(closes))  # fmt: skip
