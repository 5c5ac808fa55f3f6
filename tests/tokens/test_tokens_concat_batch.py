"""A ``concat`` batch read at once (NOTE [ batched concat windows ])."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokens_helpers import corpora, write_eod

from detsamplers.tokens import TokenCorpus, TokenSequences
from detsamplers.tokens._concat import ConcatOrder
from detsamplers.tokens._features import KEYS

subsets = st.lists(st.sampled_from(KEYS[1:]), unique=True).map(lambda rest: ["input_ids", *rest])


@given(files=corpora, seq_len=st.integers(1, 12), seed=st.integers(0, 99),
       block=st.integers(1, 6), outputs=subsets, data=st.data())  # fmt: skip
def test_a_concat_batch_read_at_once_equals_its_sequences_read_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    block: int,
    outputs: list[str],
    data: st.DataObject,
) -> None:
    corpus = write_eod(tmp_path_factory.mktemp("c"), files, seed)
    if corpus.num_tokens < seq_len + 1:
        return
    sequences = TokenSequences(corpus, seq_len, mode="concat", seed=seed,
                               block_documents=block, outputs=outputs)  # fmt: skip
    pairs = data.draw(
        st.lists(st.tuples(st.integers(0, 3), st.integers(0, len(sequences) - 1)), min_size=2)
    )
    batched = sequences.getitems_in_epochs(pairs)
    alone = TokenSequences(corpus, seq_len, mode="concat", seed=seed,
                           block_documents=block, outputs=outputs)  # fmt: skip
    assert len(batched) == len(pairs)
    for row, (epoch, index) in zip(batched, pairs, strict=True):
        one = alone.at(index, epoch)
        assert list(row) == list(one)
        for key in one:
            assert row[key].dtype == one[key].dtype, key
            assert row[key].tolist() == one[key].tolist(), (key, epoch, index)


def test_a_concat_batch_takes_no_per_sequence_walk_and_no_token_gather(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_eod(tmp_path, [[3, 5, 2, 7, 4], [6, 1, 8]])
    sequences = TokenSequences(corpus, 4, mode="concat", block_documents=2)
    expected = [sequences.at(k, epoch=1) for k in range(len(sequences))]
    calls: list[str] = []
    pieces, read_pieces = ConcatOrder.pieces, TokenCorpus.read_pieces

    def counted_pieces(self: ConcatOrder, *args: int) -> object:
        calls.append("pieces")
        return pieces(self, *args)

    def counted_read(self: TokenCorpus, *args: np.ndarray) -> np.ndarray:
        calls.append("read_pieces")
        return read_pieces(self, *args)

    monkeypatch.setattr(ConcatOrder, "pieces", counted_pieces)
    monkeypatch.setattr(TokenCorpus, "read_pieces", counted_read)
    order = list(range(len(sequences)))[::-1]
    got = sequences.getitems_in_epochs([(1, k) for k in order])
    assert calls == []
    for row, k in zip(got, order, strict=True):
        assert row["input_ids"].tolist() == expected[k]["input_ids"].tolist()
        assert row["document_ids"].tolist() == expected[k]["document_ids"].tolist()


def test_a_concat_batch_meeting_a_token_above_the_vocabulary_names_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "big.bin"
    np.array([3, 4, 0, 5, 900, 0, 6, 7, 0], dtype=np.uint16).tofile(path)
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0, vocab_size=100, progress=False)
    sequences = TokenSequences(corpus, 2, mode="concat", block_documents=1)
    with pytest.raises(ValueError, match=r"big\.bin should hold token ids in \[0, "
                       r"vocab_size=100\), but token 4 is 900"):  # fmt: skip
        sequences.getitems_in_epochs([(0, 0), (0, 1), (0, 2)])


@given(files=corpora, seed=st.integers(0, 99), block=st.integers(1, 6), data=st.data())
def test_blocks_laid_out_at_once_equal_the_blocks_built_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seed: int,
    block: int,
    data: st.DataObject,
) -> None:
    corpus = write_eod(tmp_path_factory.mktemp("c"), files, seed)
    order = ConcatOrder(corpus, seed=seed, block_documents=block)
    nb = -(-corpus.num_documents // block)
    triples = st.tuples(st.integers(0, nb - 1), st.integers(0, 3), st.integers(0, 10**6))
    met = data.draw(st.lists(triples, min_size=1, max_size=8))
    blocks, epochs, bases = (np.array(column, dtype=np.int64) for column in zip(*met, strict=True))
    got = order.laid_out(blocks, epochs, bases)
    alone = ConcatOrder(corpus, seed=seed, block_documents=block)
    parts = [alone._block(b, e) for b, e, _ in met]
    expected = [np.concatenate([part[i] for part in parts]) for i in range(4)]
    expected[3] = expected[3] + np.repeat(bases, [len(part[0]) for part in parts])
    for name, array, want in zip(("docs", "starts", "lengths", "ends"), got, expected, strict=True):
        assert array.dtype == np.int64, name
        assert array.tolist() == want.tolist(), name


def test_a_concat_batch_builds_its_full_blocks_with_one_keyed_order_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_eod(tmp_path, [[3, 5, 2, 7, 4, 6, 1, 8, 9, 2, 3, 4]])
    sequences = TokenSequences(corpus, 4, mode="concat", block_documents=3)
    order = sequences._concat
    assert order is not None
    block_order, cumulative = order.index(2)
    # Two windows inside the first block of epoch 2's order, which is not the last block.
    first = int(np.flatnonzero(block_order != order._blocks - 1)[0])
    inside = [k for k in range(len(sequences))
              if cumulative[first] <= 5 * k and 5 * (k + 1) <= cumulative[first + 1]]  # fmt: skip
    assert inside
    inside = (inside * 2)[:2] if len(inside) < 2 else inside
    expected = [sequences.at(k, epoch=2) for k in inside]
    calls: list[str] = []
    rows, block_of = type(order._inner).rows, ConcatOrder._block

    def counted_rows(self: object, *args: np.ndarray) -> np.ndarray:
        calls.append("rows")
        return rows(self, *args)  # type: ignore[arg-type]

    def counted_block(self: ConcatOrder, *args: int) -> object:
        calls.append("block")
        return block_of(self, *args)

    monkeypatch.setattr(type(order._inner), "rows", counted_rows)
    monkeypatch.setattr(ConcatOrder, "_block", counted_block)
    got = sequences.getitems_in_epochs([(2, k) for k in inside])
    assert calls == ["rows"]
    for row, one in zip(got, expected, strict=True):
        assert row["input_ids"].tolist() == one["input_ids"].tolist()


@pytest.mark.parametrize("windows", [127, 128, 255, 256, 300])
def test_a_concat_batch_of_many_windows_in_one_block_equals_its_sequences_read_one_by_one(
    tmp_path: Path, windows: int
) -> None:
    # More windows in one block than an int8 counts: the blocks met were once counted in one,
    # and 128, 255 or 256 windows wrapped to no block met (an IndexError).
    lengths = np.random.default_rng(0).integers(200, 400, size=3000)
    tokens = (np.arange(int(lengths.sum())) % 60000 + 1).astype(np.uint32)
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "t.lengths.npy", lengths.astype(np.uint32))
    corpus = TokenCorpus(tmp_path / "t.npy", lengths=[tmp_path / "t.lengths.npy"])
    sequences = TokenSequences(corpus, 4, mode="concat", outputs=("input_ids", "labels"))
    pairs = [(0, k) for k in range(windows)]
    batch = sequences.getitems_in_epochs(pairs)
    for row, pair in zip(batch, pairs, strict=True):
        alone = sequences.getitems_in_epochs([pair])[0]
        assert all(np.array_equal(row[key], alone[key]) for key in ("input_ids", "labels"))
