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
