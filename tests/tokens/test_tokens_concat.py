"""ConcatOrder (tokens/_concat.py) on its own: the stream of pieces, block by block.

NOTE [ block-hierarchical concat ]. TokenSequences' tests (test_tokens_epochs.py,
test_tokens_sequences.py) read sequences through it; these check the order's own laws
under any window, block size and epoch: a window's pieces are its tokens, an epoch lists
every document once and whole with each block's documents together, windows split
anywhere give the same pieces, and ``prepare`` and the caches change nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import corpora, write_unique

from detsamplers.tokens._concat import CACHED_EPOCHS, ConcatOrder
from detsamplers.tokens._corpus import TokenCorpus

orders = st.fixed_dictionaries(
    {
        "files": corpora,
        "seed": st.integers(0, 2**32),
        "block": st.integers(1, 6),
        "epoch": st.integers(0, 5),
    }
)


def build(tmp_path_factory: pytest.TempPathFactory, case: dict[str, object]) -> ConcatOrder:
    corpus = write_unique(tmp_path_factory.mktemp("c"), case["files"])  # type: ignore[arg-type]
    return ConcatOrder(corpus, case["seed"], case["block"])  # type: ignore[arg-type]


def document_table(corpus: TokenCorpus) -> tuple[np.ndarray, np.ndarray]:
    starts = corpus.starts(np.arange(corpus.num_documents + 1, dtype=np.int64))
    return starts[:-1], np.diff(starts)


@settings(max_examples=60, deadline=None)
@given(case=orders)
def test_an_epoch_lists_every_document_once_whole_with_each_blocks_documents_together(
    tmp_path_factory: pytest.TempPathFactory, case: dict[str, int]
) -> None:
    order = build(tmp_path_factory, case)
    corpus = order._corpus
    docs, firsts, counts, closes = order.pieces(0, corpus.num_tokens, case["epoch"])
    assert sorted(docs.tolist()) == list(range(corpus.num_documents))
    starts, lengths = document_table(corpus)
    assert firsts.tolist() == starts[docs].tolist()  # each whole, from its first token
    assert counts.tolist() == lengths[docs].tolist()
    assert closes.all()
    blocks = (docs // case["block"]).tolist()
    runs = [b for i, b in enumerate(blocks) if i == 0 or blocks[i - 1] != b]
    assert len(runs) == len(set(runs))  # a block is never left and come back to


@settings(max_examples=60, deadline=None)
@given(case=orders, data=st.data())
def test_a_windows_pieces_are_its_tokens_and_a_split_window_gives_the_same_pieces(
    tmp_path_factory: pytest.TempPathFactory, case: dict[str, int], data: st.DataObject
) -> None:
    order = build(tmp_path_factory, case)
    total, epoch = order._corpus.num_tokens, case["epoch"]
    start = data.draw(st.integers(0, total - 1))
    stop = data.draw(st.integers(start + 1, total))
    cut = data.draw(st.integers(start, stop))
    docs, firsts, counts, closes = order.pieces(start, stop, epoch)
    assert counts.sum() == stop - start and (counts > 0).all()
    whole = np.concatenate([np.arange(f, f + c) for f, c in zip(firsts, counts, strict=True)])
    _, all_firsts, all_counts, _ = order.pieces(0, total, epoch)
    stream = np.concatenate(
        [np.arange(f, f + c) for f, c in zip(all_firsts, all_counts, strict=True)]
    )
    assert whole.tolist() == stream[start:stop].tolist()  # corpus token ids, in stream order
    left = order.pieces(start, cut, epoch) if cut > start else None
    right = order.pieces(cut, stop, epoch) if cut < stop else None
    halves = [np.concatenate([np.arange(f, f + c) for f, c in zip(p[1], p[2], strict=True)])
              for p in (left, right) if p is not None]  # fmt: skip
    assert np.concatenate(halves).tolist() == whole.tolist()
    # A piece closes its document exactly when the window holds the document's last token.
    starts, lengths = document_table(order._corpus)
    assert closes.tolist() == (firsts + counts == starts[docs] + lengths[docs]).tolist()


@settings(max_examples=40, deadline=None)
@given(case=orders, data=st.data())
def test_prepare_and_the_caches_change_no_piece(
    tmp_path_factory: pytest.TempPathFactory, case: dict[str, int], data: st.DataObject
) -> None:
    prepared, fresh = build(tmp_path_factory, case), build(tmp_path_factory, case)
    total = fresh._corpus.num_tokens
    windows = data.draw(
        st.lists(
            st.tuples(st.integers(0, total - 1), st.integers(1, total), st.integers(0, 5)),
            min_size=1,
            max_size=6,
        ).map(lambda ws: [(a, min(total, a + n), e) for a, n, e in ws])
    )
    prepared.prepare(windows)
    for start, stop, epoch in windows:
        got, want = prepared.pieces(start, stop, epoch), fresh.pieces(start, stop, epoch)
        for a, b in zip(got, want, strict=True):
            assert a.tolist() == b.tolist()
    assert len(prepared._epochs) <= CACHED_EPOCHS


def test_each_epoch_has_its_own_order_and_the_same_seed_gives_the_same_one(
    tmp_path: Path,
) -> None:
    corpus = write_unique(tmp_path, [[2, 3, 1, 4, 2, 2, 5, 1]])
    order = ConcatOrder(corpus, seed=7, block_documents=3)
    by_epoch = [order.pieces(0, corpus.num_tokens, e)[0].tolist() for e in range(4)]
    assert len({tuple(d) for d in by_epoch}) == 4
    again = ConcatOrder(corpus, seed=7, block_documents=3)
    assert again.pieces(0, corpus.num_tokens, 0)[0].tolist() == by_epoch[0]
    assert ConcatOrder(corpus, 8, 3).pieces(0, corpus.num_tokens, 0)[0].tolist() != by_epoch[0]
