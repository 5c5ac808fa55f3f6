"""TokenSequences: every token once per epoch, features that agree with the documents, state."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokens_helpers import corpora, window, write_eod, write_unique

from detsamplers import ReproducibilityError
from detsamplers.tokens import TokenCorpus, TokenSequences

modes = st.sampled_from(["chunk", "concat"])


@given(files=corpora, seq_len=st.integers(1, 16), mode=modes, seed=st.integers(0, 2**32),
       block=st.integers(1, 6))  # fmt: skip
def test_every_token_appears_in_exactly_one_sequence_but_the_last_few(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    mode: str,
    seed: int,
    block: int,
) -> None:
    corpus = write_unique(tmp_path_factory.mktemp("c"), files)
    total = corpus.num_tokens
    if total < seq_len + 1:
        with pytest.raises(ValueError, match="seq_len should leave at least one sequence"):
            TokenSequences(corpus, seq_len, mode=mode, seed=seed, block_documents=block)
        return
    sequences = TokenSequences(corpus, seq_len, mode=mode, seed=seed, block_documents=block)
    assert len(sequences) == total // (seq_len + 1)
    seen = np.concatenate([window(sequences, k) for k in range(len(sequences))])
    assert len(seen) == len(sequences) * (seq_len + 1)
    assert len(np.unique(seen)) == len(seen)  # no token twice
    assert set(seen.tolist()) <= set(range(1, total + 1))
    if mode == "chunk":  # storage order: the tail is the corpus's last tokens
        assert seen.tolist() == list(range(1, len(seen) + 1))
        return
    # concat: the stream is whole documents, each in its own order, every one once.
    starts = np.cumsum([0] + [n for lengths in files for n in lengths])
    documents = {int(starts[d]) + 1: int(starts[d + 1] - starts[d]) for d in range(len(starts) - 1)}
    at, used = 0, set()
    while at < len(seen):
        first = int(seen[at])
        assert first in documents, f"token {first} at {at} does not start a document"
        length = documents[first]
        run = seen[at : at + length].tolist()
        assert run == list(range(first, first + len(run)))
        used.add(first)
        at += length
    assert len(documents) - len(used) <= seq_len  # the tail holds under L + 1 tokens


@given(files=corpora, seq_len=st.integers(1, 16), mode=modes, seed=st.integers(0, 99))
def test_labels_positions_and_cu_seqlens_agree_with_the_document_boundaries(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    mode: str,
    seed: int,
) -> None:
    corpus = write_eod(tmp_path_factory.mktemp("c"), files, seed)
    if corpus.num_tokens < seq_len + 1:
        return
    sequences = TokenSequences(corpus, seq_len, mode=mode, seed=seed, block_documents=3)
    for k in range(len(sequences)):
        out = sequences[k]
        tokens = window(sequences, k)
        docs = out["document_ids"]
        assert out["input_ids"].tolist() == tokens[:-1].tolist()
        # A target is masked exactly where its input is its document's last token: an EOD.
        for i in range(seq_len):
            last = corpus.span(int(docs[i]))[1] - 1
            is_last = corpus.read(last, last + 1)[0] == tokens[i] and tokens[i] == 0
            expected = -100 if is_last else tokens[i + 1]
            assert out["labels"][i] == expected
        # Each input's document holds the corpus token it was read from.
        _, firsts, counts, _ = sequences.pieces(k)
        where = np.concatenate([np.arange(f, f + c) for f, c in zip(firsts, counts, strict=True)])
        for i in range(seq_len):
            start, stop = corpus.span(int(docs[i]))
            assert start <= where[i] < stop
        # Positions restart where the document changes, and count up inside it.
        changes = np.flatnonzero(np.diff(docs)) + 1
        segment_starts = np.concatenate([[0], changes])
        assert (out["position_ids"][segment_starts] == 0).all()
        inside = np.setdiff1d(np.arange(1, seq_len), changes)
        assert (np.diff(out["position_ids"])[inside - 1] == 1).all()
        # cu_seqlens: the segments' offsets, then L repeated to the fixed size L + 1.
        cu = out["cu_seqlens"]
        assert cu.dtype == np.int32 and len(cu) == seq_len + 1
        real = np.concatenate([segment_starts, [seq_len]])
        assert cu[: len(real)].tolist() == real.tolist()
        assert (cu[len(real) :] == seq_len).all()


def golden_corpus(folder: Path) -> TokenCorpus:
    """Fifty documents of lengths 1..9 (a fixed rule), tokens 1..N, EOD 0 after each."""
    folder.mkdir(exist_ok=True)
    docs = [np.append(np.arange(1, 1 + (d * 7) % 9 + 1) + 100 * d, 0) for d in range(50)]
    path = folder / "golden.bin"
    np.concatenate(docs).astype(np.uint32).tofile(path)
    return TokenCorpus(path, dtype="uint32", eod_id=0, cache=False, progress=False)


@given(files=corpora, seq_len=st.integers(1, 16), mode=modes, seed=st.integers(0, 99),
       block=st.integers(1, 6), data=st.data())  # fmt: skip
def test_a_batch_read_at_once_equals_its_sequences_read_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    mode: str,
    seed: int,
    block: int,
    data: st.DataObject,
) -> None:
    corpus = write_eod(tmp_path_factory.mktemp("c"), files, seed)
    if corpus.num_tokens < seq_len + 1:
        return
    sequences = TokenSequences(corpus, seq_len, mode=mode, seed=seed, block_documents=block)
    pairs = data.draw(
        st.lists(st.tuples(st.integers(0, 3), st.integers(0, len(sequences) - 1)), max_size=9)
    )
    batch = sequences.getitems_in_epochs(pairs)
    assert len(batch) == len(pairs)
    for (epoch, index), got in zip(pairs, batch, strict=True):
        one = sequences.at(index, epoch)
        assert set(got) == set(one)
        for key, value in one.items():
            assert got[key].dtype == value.dtype, key
            assert got[key].tolist() == value.tolist(), key


def test_golden_the_first_sequences_of_seed_0_are_pinned(tmp_path: Path) -> None:
    corpus = golden_corpus(tmp_path)
    chunk = TokenSequences(corpus, 8, mode="chunk")
    concat = TokenSequences(corpus, 8, mode="concat", seed=0, block_documents=4)
    assert [chunk[k]["input_ids"].tolist() for k in range(2)] == [
        [1, 0, 101, 102, 103, 104, 105, 106],
        [108, 0, 201, 202, 203, 204, 205, 206],
    ]
    # Block 4 (documents 16..19) first, its documents in the order 17, 18, 16, 19; then block 7.
    assert [concat[k]["input_ids"].tolist() for k in range(3)] == [
        [1701, 1702, 1703, 0, 1801, 0, 1601, 1602],
        [1604, 1605, 0, 1901, 1902, 1903, 1904, 1905],
        [1907, 1908, 0, 2801, 2802, 2803, 2804, 2805],
    ]
    assert concat[0]["document_ids"].tolist() == [17, 17, 17, 17, 18, 18, 16, 16]


def test_a_state_of_another_corpus_mode_or_length_is_refused_naming_the_field(
    tmp_path: Path,
) -> None:
    corpus = write_eod(tmp_path / "a", [[5, 7, 3]])
    other = write_eod(tmp_path / "b", [[5, 7, 4]])
    sequences = TokenSequences(corpus, 4, mode="concat", seed=1)
    state = json.loads(json.dumps(sequences.state_dict()))  # a checkpoint's round trip
    TokenSequences(corpus, 4, mode="concat", seed=1).load_state_dict(state)
    cases = [
        (TokenSequences(other, 4, mode="concat", seed=1), r"files is \[\['part0.bin', 30\]\] in"),
        (TokenSequences(corpus, 4, mode="chunk", seed=1), "mode is 'concat' in the state but"),
        (TokenSequences(corpus, 3, mode="concat", seed=1), "seq_len is 4 in the state but 3 here"),
        (TokenSequences(corpus, 4, mode="concat", seed=2), "seed is 1 in the state but 2 here"),
    ]
    for target, message in cases:
        with pytest.raises(ReproducibilityError, match=message):
            target.load_state_dict(state)
    with pytest.raises(ValueError, match=r"state_dict\['version'\] should be 1, but got 7"):
        sequences.load_state_dict({**state, "version": 7})
    with pytest.raises(TypeError, match="state_dict should be a dict from TokenSequences"):
        sequences.load_state_dict([])  # type: ignore[arg-type]
