"""A ``chunk`` batch read into a table of the file's dtype (NOTE [ batched chunk windows ])
equals its sequences read one by one, on its own and through the loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import corpora
from tokens_helpers import write_documents as write

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenSequences, collate_tokens
from detsamplers.tokens._features import KEYS

dtypes = st.sampled_from(["uint16", "uint32", "int32", "int64"])
subsets = st.lists(st.sampled_from(KEYS[1:]), unique=True).map(lambda rest: ["input_ids", *rest])


def one_by_one(sequences: TokenSequences, indices: list[int]) -> dict[str, torch.Tensor]:
    """The old path: each sequence read alone (``at``), then collated row by row."""
    return collate_tokens([dict(sequences.at(k)) for k in indices])


@settings(max_examples=80, deadline=None)
@given(files=corpora, dtype=dtypes, npy=st.booleans(), seq_len=st.integers(1, 12),
       seed=st.integers(0, 99), outputs=subsets, data=st.data())  # fmt: skip
def test_a_chunk_batch_equals_its_sequences_read_one_by_one_for_any_dtype_and_outputs(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    dtype: str,
    npy: bool,
    seq_len: int,
    seed: int,
    outputs: list[str],
    data: st.DataObject,
) -> None:
    corpus = write(tmp_path_factory.mktemp("c"), files, dtype, npy, seed)
    if corpus.num_tokens < seq_len + 1:
        return
    sequences = TokenSequences(corpus, seq_len, outputs=outputs)
    indices = data.draw(st.lists(st.integers(0, len(sequences) - 1), min_size=2, max_size=9))
    rows = sequences.getitems_in_epochs([(0, k) for k in indices])
    for k, row in zip(indices, rows, strict=True):
        alone = sequences.at(k)
        assert list(row) == list(alone)
        for key, value in row.items():
            assert value.dtype == alone[key].dtype, key
            assert value.tolist() == alone[key].tolist(), key
    batch, expected = collate_tokens(rows), one_by_one(sequences, indices)
    assert list(batch) == list(expected)
    for key, tensor in batch.items():
        assert tensor.dtype == expected[key].dtype and tensor.is_contiguous(), key
        assert torch.equal(tensor, expected[key]), key


def batches(dataset: Any, world: int, rank: int, workers: int, skip: int, count: int) -> list[Any]:
    """``count`` batches of rank ``rank`` of ``world`` after ``skip`` samples (a resume)."""
    collate = collate_tokens if isinstance(dataset, TokenSequences) else None
    loader = DataLoader(dataset, batch_size=3, shuffle=True, seed=7, num_workers=workers,
                        collate_fn=collate)  # fmt: skip
    stream = iter(loader.get_data_loader(repeat=True, num_replicas=world, rank=rank,
                                         skip_samples=skip))  # fmt: skip
    return [next(stream) for _ in range(count)]


def check_loader(sequences: TokenSequences, world: int, rank: int, workers: int, skip: int) -> None:
    """Every batch of the loader equals the same sequences read one by one."""
    indices = batches(list(range(len(sequences))), world, rank, 0, skip, 4)
    got = batches(sequences, world, rank, workers, skip, 4)
    for index, batch in zip(indices, got, strict=True):
        expected = one_by_one(sequences, index.tolist())
        assert list(batch) == list(expected)
        for key, tensor in batch.items():
            assert tensor.dtype == expected[key].dtype and torch.equal(tensor, expected[key]), key


@settings(max_examples=25, deadline=None)
@given(files=corpora, dtype=dtypes, seq_len=st.integers(1, 6), world=st.integers(1, 3),
       data=st.data())  # fmt: skip
def test_chunk_batches_through_the_loader_equal_sequences_read_one_by_one_on_any_resume(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    dtype: str,
    seq_len: int,
    world: int,
    data: st.DataObject,
) -> None:
    corpus = write(tmp_path_factory.mktemp("c"), files, dtype, False, 3)
    if corpus.num_tokens < seq_len + 1:
        return
    sequences = TokenSequences(corpus, seq_len)
    rank = data.draw(st.integers(0, world - 1))
    skip = data.draw(st.integers(0, 4 * len(sequences)))
    check_loader(sequences, world, rank, 0, skip)


@pytest.mark.workers
@pytest.mark.parametrize(("world", "workers", "skip"), [(1, 1, 0), (2, 2, 5), (3, 2, 17)])
def test_chunk_batches_from_worker_processes_equal_sequences_read_one_by_one(
    tmp_path: Path, world: int, workers: int, skip: int
) -> None:
    corpus = write(tmp_path, [[5, 9, 3, 14, 2, 7], [11, 6, 1, 8], [20, 4]], "uint16", False, 5)
    sequences = TokenSequences(corpus, 4)
    for rank in range(world):
        check_loader(sequences, world, rank, workers, skip)
