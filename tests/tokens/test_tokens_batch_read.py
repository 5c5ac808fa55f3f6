"""A batch read and collated at once (NOTE [ batched chunk windows ], NOTE [ batch rows ])."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokens_helpers import corpora, write_eod

from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens
from detsamplers.tokens._features import KEYS, BatchRows

modes = st.sampled_from(["chunk", "concat", "pack"])
subsets = st.lists(st.sampled_from(KEYS[1:]), unique=True).map(lambda rest: ["input_ids", *rest])


@given(files=corpora, seq_len=st.integers(1, 12), mode=modes, seed=st.integers(0, 99),
       outputs=subsets, data=st.data())  # fmt: skip
def test_a_batch_collated_from_its_tables_equals_its_rows_collated_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    mode: str,
    seed: int,
    outputs: list[str],
    data: st.DataObject,
) -> None:
    corpus = write_eod(tmp_path_factory.mktemp("c"), files, seed)
    if corpus.num_tokens < seq_len + 1:
        return
    sequences = TokenSequences(corpus, seq_len, mode=mode, seed=seed, outputs=outputs)
    pairs = data.draw(
        st.lists(st.tuples(st.integers(0, 2), st.integers(0, len(sequences) - 1)), min_size=2)
    )
    rows = sequences.getitems_in_epochs(pairs)
    assert isinstance(rows, BatchRows) and rows.tables() is not None
    copied = [{key: value.copy() for key, value in row.items()} for row in rows]
    fast, slow = collate_tokens(rows), collate_tokens(copied)
    assert list(fast) == list(slow)
    for key in fast:
        assert fast[key].dtype == slow[key].dtype, key
        assert fast[key].is_contiguous() and fast[key].tolist() == slow[key].tolist(), key


def test_a_batch_whose_rows_were_replaced_collates_the_new_rows(tmp_path: Path) -> None:
    corpus = write_eod(tmp_path, [[5, 3, 7, 2, 9, 4]])
    sequences = TokenSequences(corpus, 4, outputs=("input_ids", "labels"))
    rows = sequences.getitems_in_epochs([(0, 0), (0, 1), (0, 2)])
    replaced = {"input_ids": np.array([1, 2, 3, 4]), "labels": np.array([2, 3, 4, 5])}
    rows[1] = replaced
    assert rows.tables() is None
    assert collate_tokens(rows)["input_ids"][1].tolist() == [1, 2, 3, 4]
    rows = sequences.getitems_in_epochs([(0, 0), (0, 1), (0, 2)])
    rows[2]["labels"] = np.array([-1, -1, -1, -1])  # a new array in a kept row
    assert rows.tables() is None
    assert collate_tokens(rows)["labels"][2].tolist() == [-1, -1, -1, -1]
    rows = sequences.getitems_in_epochs([(0, 0), (0, 1), (0, 2)])
    rows[0]["input_ids"][0] = 77  # a row changed in place is its table's row
    assert collate_tokens(rows)["input_ids"][0, 0].item() == 77


def test_a_chunk_batch_in_one_file_reads_no_window_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_eod(tmp_path, [[7, 3, 12, 5, 9, 4, 6, 9], [5, 6]])
    sequences = TokenSequences(corpus, 5)
    expected = [sequences.at(k) for k in range(len(sequences))]
    reads: list[tuple[int, int]] = []
    read = TokenCorpus.read

    def counted(self: TokenCorpus, start: int, stop: int) -> np.ndarray:
        reads.append((start, stop))
        return read(self, start, stop)

    monkeypatch.setattr(TokenCorpus, "read", counted)
    got = sequences.getitems_in_epochs([(0, k) for k in (6, 0, 3, 1)])  # all in file 0
    assert reads == []
    for k, row in zip((6, 0, 3, 1), got, strict=True):
        assert all(row[key].tolist() == expected[k][key].tolist() for key in KEYS)
    sequences.getitems_in_epochs([(0, 9), (0, 10)])  # window 9 crosses into file 1
    assert reads == [(54, 60), (60, 66)]


def test_a_chunk_batch_meeting_a_token_above_the_vocabulary_names_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "big.bin"
    np.array([3, 4, 0, 5, 900, 0, 6, 7, 0], dtype=np.uint16).tofile(path)
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0, vocab_size=100, progress=False)
    sequences = TokenSequences(corpus, 2)
    with pytest.raises(ValueError, match=r"big\.bin should hold token ids in \[0, "
                       r"vocab_size=100\), but token 4 is 900"):  # fmt: skip
        sequences.getitems_in_epochs([(0, 0), (0, 1), (0, 2)])
    assert len(sequences.getitems_in_epochs([(0, 0), (0, 2)])) == 2


def test_a_batch_row_that_lost_or_gained_a_key_collates_row_by_row(tmp_path: Path) -> None:
    corpus = write_eod(tmp_path, [[5, 3, 7, 2, 9, 4]])
    sequences = TokenSequences(corpus, 4, outputs=("input_ids", "labels"))
    rows = sequences.getitems_in_epochs([(0, 0), (0, 1)])
    del rows[0]["labels"]
    assert rows.tables() is None
    rows = sequences.getitems_in_epochs([(0, 0), (0, 1)])
    rows[1]["position_ids"] = np.arange(4)
    assert rows.tables() is None
    assert collate_tokens(rows[1:])["position_ids"][0].tolist() == [0, 1, 2, 3]
    rows = sequences.getitems_in_epochs([(0, 0), (0, 1)])
    first, second = rows[0]["input_ids"].tolist(), rows[1]["input_ids"].tolist()
    rows[0], rows[1] = rows[1], rows[0]  # the same rows in another order
    assert rows.tables() is None
    assert collate_tokens(rows)["input_ids"].tolist() == [second, first]
