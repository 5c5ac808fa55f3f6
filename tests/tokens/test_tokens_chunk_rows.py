"""A ``chunk`` batch of inputs and labels by the compiled pass (NOTE [ compiled chunk rows ])
equals the numpy path's, and what the numpy path refuses is refused with the same error."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import corpora, write_lengths
from tokens_helpers import ends_cache_of as cache_of
from tokens_helpers import write_documents as write

from detsamplers._native import kernel
from detsamplers.tokens import TokenCorpus, TokenSequences, _boundaries
from detsamplers.tokens import _chunk_rows as compiled
from detsamplers.tokens import _ends_check as ends_check
from detsamplers.tokens._features import features_rows
from detsamplers.tokens._windows import chunk_windows

pytestmark = pytest.mark.skipif(
    kernel is None or not hasattr(kernel, "chunk_rows"), reason="no compiled kernel"
)
dtypes = st.sampled_from(["uint16", "uint32", "int32", "int64"])
outputs = st.sampled_from([("input_ids",), ("input_ids", "labels")])


def by_numpy(corpus: TokenCorpus, starts: np.ndarray, width: int, keys: tuple[str, ...]) -> list:
    """The reference: the batched numpy path (NOTE [ batched chunk windows ])."""
    windows = chunk_windows(corpus, starts, width)
    assert windows is not None
    return features_rows(*windows, keys)


@settings(max_examples=80, deadline=None)
@given(files=corpora, dtype=dtypes, npy=st.booleans(), seq_len=st.integers(1, 12),
       seed=st.integers(0, 99), keys=outputs, data=st.data())  # fmt: skip
def test_the_compiled_rows_equal_the_numpy_rows_for_any_dtype_file_and_windows(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    dtype: str,
    npy: bool,
    seq_len: int,
    seed: int,
    keys: tuple[str, ...],
    data: st.DataObject,
) -> None:
    corpus = write(tmp_path_factory.mktemp("c"), files, dtype, npy, seed)
    width = seq_len + 1
    f = data.draw(st.integers(0, len(files) - 1))
    first, size = int(corpus._token_start[f]), sum(files[f])
    if size < width:
        return
    starts = np.array(data.draw(st.lists(st.integers(first, first + size - width), min_size=1,
                                         max_size=9)), dtype=np.int64)  # fmt: skip
    got = compiled.chunk_rows(corpus, starts, width, keys)
    assert got is not None
    want = by_numpy(corpus, starts, width, keys)
    assert len(got) == len(want)
    for row, expected in zip(got, want, strict=True):
        assert list(row) == list(expected)
        for key in keys:
            assert row[key].dtype == np.int64 and row[key].tolist() == expected[key].tolist()
    tables = got.tables()
    assert tables is not None and all(t.flags.c_contiguous for t in tables.values())


@settings(max_examples=40, deadline=None)
@given(files=corpora, seq_len=st.integers(1, 9), seed=st.integers(0, 99), data=st.data())
def test_a_loader_batch_of_inputs_and_labels_equals_its_sequences_read_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    data: st.DataObject,
) -> None:
    corpus = write(tmp_path_factory.mktemp("c"), files, "uint16", False, seed)
    if corpus.num_tokens < seq_len + 1:
        return
    sequences = TokenSequences(corpus, seq_len, outputs=("input_ids", "labels"))
    picked = data.draw(st.lists(st.integers(0, len(sequences) - 1), min_size=2, max_size=8))
    rows = sequences.getitems_in_epochs([(0, k) for k in picked])
    for row, k in zip(rows, picked, strict=True):
        alone = sequences.at(k)
        assert row["input_ids"].tolist() == alone["input_ids"].tolist()
        assert row["labels"].tolist() == alone["labels"].tolist()


def test_the_kernel_writes_the_windows_in_the_files_dtype_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    tokens = np.array([5, 6, 0, 7, 0, 8, 9, 9, 0], dtype=np.uint16)
    tokens.tofile(path)
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0, progress=False)
    ends = corpus._ends[0]
    inputs, windows = np.empty((2, 3), np.int64), np.empty((2, 4), np.uint16)
    fd = os.open(path, os.O_RDONLY)
    try:
        got = kernel.chunk_rows(fd, 0, "H", np.array([4, 0]), 4, ends, 9, True, inputs, None,
                                windows)  # fmt: skip
    finally:
        os.close(fd)
    assert got == (0, 0, 0, 9)
    assert windows.tolist() == [[0, 8, 9, 9], [5, 6, 0, 7]]
    assert inputs.tolist() == [[0, 8, 9], [5, 6, 0]]


def test_what_the_kernel_does_not_read_goes_by_the_numpy_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write(tmp_path, [[3, 4], [5, 2]], "uint16", False, 0)
    keys = ("input_ids", "labels")
    assert compiled.chunk_rows(corpus, np.array([0, 3]), 3, keys) is not None
    assert compiled.chunk_rows(corpus, np.array([0, 7]), 3, keys) is None  # two files
    assert compiled.chunk_rows(corpus, np.array([0, 3]), 3, (*keys, "position_ids")) is None
    monkeypatch.setattr(compiled, "kernel", None)
    assert compiled.chunk_rows(corpus, np.array([0, 3]), 3, keys) is None


def test_a_token_outside_the_vocabulary_is_named_as_the_numpy_path_names_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.bin"
    np.array([1, 2, 0, 3, 900, 0, 4, 0], dtype=np.uint16).tofile(path)
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0, vocab_size=100, progress=False)
    assert compiled.chunk_rows(corpus, np.array([0, 3]), 3, ("input_ids", "labels")) is None
    sequences = TokenSequences(corpus, 2, outputs=("input_ids", "labels"))
    with pytest.raises(ValueError, match=r"t\.bin should hold token ids in \[0, "
                       r"vocab_size=100\), but token 4 is 900"):  # fmt: skip
        sequences.getitems_in_epochs([(0, 0), (0, 1)])


def test_a_broken_pair_of_ends_in_a_window_names_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_boundaries, "CHECK_WHOLE", 4)
    monkeypatch.setattr(ends_check, "CHECK_REGION", 4)
    n = 400
    path, sidecar = write_lengths(tmp_path, [2] * n)
    TokenCorpus(path, lengths=[sidecar])  # writes the ends cache
    stored = np.load(cache_of(sidecar))
    header = _boundaries.ENDS_HEADER
    binding = stored[:header]
    key = np.random.SeedSequence([int(v) & 0xFFFFFFFF for v in binding[1:]] + [n])
    sampled = set(np.random.default_rng(key).integers(1, n, size=64).tolist())
    at = next(a for a in range(n // 2 + 1, n - 2, 2) if not {a, a + 1} & sampled)
    stored[header + at] += 3  # the pair (at, at + 1) broken where no sample of the open looks
    np.save(cache_of(sidecar), stored)
    corpus = TokenCorpus(path, lengths=[sidecar])
    sequences = TokenSequences(corpus, 3, outputs=("input_ids", "labels"))
    good = sequences.getitems_in_epochs([(0, 0), (0, 3)])
    assert [row["labels"].tolist() for row in good] == [[2, -100, 4], [14, -100, 16]]
    starts = np.array([0, (at + 1) // 2 * 4], dtype=np.int64)
    assert compiled.chunk_rows(corpus, starts, 4, ("input_ids", "labels")) is None
    with pytest.raises(ValueError, match=rf"ends\.npy should hold increasing ends in \[1, "
                       rf"{2 * n}\], but its ends {at} to {at + 1} do not; delete it"):  # fmt: skip
        sequences.getitems_in_epochs([(0, 0), (0, (at + 1) // 2)])


def test_a_token_file_that_shrank_while_open_is_named(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    np.array([1, 2, 0, 3, 4, 0, 5, 6, 0, 7, 8, 0], dtype=np.uint16).tofile(path)
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0, progress=False)
    sequences = TokenSequences(corpus, 2, outputs=("input_ids", "labels"))
    os.truncate(path, 14)  # 7 tokens left: window 2 (tokens 6 to 8) is cut
    with pytest.raises(ValueError, match=r"t\.bin should hold 6 bytes at byte 12, but it ends "
                       r"2 bytes in; it changed while open"):  # fmt: skip
        sequences.getitems_in_epochs([(0, 0), (0, 2)])
