"""The users' test kit on token loaders: ``detsamplers.testing`` checks flattened batches.

``collate_tokens`` gives ``cu_seqlens`` over the flattened batch (``B L + 1`` entries), so a
batch has no common first dimension; the kit splits it back into sequences
(``uncollate_tokens``) to compare a resume on another world size or batch size record by
record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import corpora, write_eod

from detsamplers.loader import DataLoader
from detsamplers.testing import Config, check_resume, configs, pause_points
from detsamplers.testing._compare import records_of, unbatch
from detsamplers.tokens import TokenSequences, collate_tokens
from detsamplers.tokens._features import uncollate_tokens

FILES = [[5, 9, 3, 14, 2, 7, 11], [6, 1, 8, 20, 4], [10, 3, 3, 9]]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus")


def token_factory(sequences: TokenSequences, seed: int) -> Any:
    def factory(rank: int, world_size: int, num_workers: int, batch_size: int = 3) -> DataLoader:
        return DataLoader(sequences, batch_size=batch_size, shuffle=True, seed=seed,
                          num_workers=num_workers, collate_fn=collate_tokens)  # fmt: skip

    return factory


@settings(max_examples=25, deadline=None)
@given(files=corpora, seq_len=st.integers(1, 9), rows=st.integers(1, 5), mode=st.sampled_from(
    ["chunk", "concat"]))  # fmt: skip
def test_a_collated_token_batch_splits_back_into_its_sequences(
    tmp_path_factory: pytest.TempPathFactory, files: list[list[int]], seq_len: int, rows: int,
    mode: str,
) -> None:  # fmt: skip
    corpus = write_eod(tmp_path_factory.mktemp("split"), files)
    if corpus.num_tokens < seq_len + 1:
        return
    sequences = TokenSequences(corpus, seq_len, mode=mode, seed=5, block_documents=2)
    picked = [sequences[k % len(sequences)] for k in range(rows)]
    batch = collate_tokens(picked)
    assert records_of(batch) == rows
    split = unbatch(batch)
    assert len(split) == rows
    for record, sequence in zip(split, picked, strict=True):
        assert record.keys() == sequence.keys()
        for key, value in sequence.items():
            assert np.array_equal(record[key].numpy(), value), key


@settings(max_examples=10, deadline=None)
@given(
    mode=st.sampled_from(["chunk", "concat"]),
    seed=st.integers(0, 2**31),
    pauses=pause_points(batches=8),
    resume=configs(
        world_sizes=st.integers(1, 3),
        num_workers=st.just(0),
        batch_sizes=st.sampled_from([None, 1, 2, 5]),
    ),
)
def test_check_resume_compares_flattened_token_batches_on_any_world_size_and_batch_size(
    folder: Path, mode: str, seed: int, pauses: list[int], resume: Config
) -> None:
    sequences = TokenSequences(write_eod(folder / mode, FILES), 5, mode=mode, seed=seed,
                               block_documents=3)  # fmt: skip
    report = check_resume(token_factory(sequences, seed), pauses, batches=8, resume=[resume])
    assert report.pauses == pauses and report.batches > 0


def reversed_rows(samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    return collate_tokens(samples[::-1])


def test_check_resume_finds_a_resumed_token_loader_that_collates_its_rows_out_of_order(
    folder: Path,
) -> None:
    sequences = TokenSequences(write_eod(folder / "bad", FILES), 5, mode="concat", seed=2)

    def factory(rank: int, world_size: int, num_workers: int, batch_size: int = 3) -> DataLoader:
        collate = collate_tokens if world_size == 1 else reversed_rows  # a bug after resume
        return DataLoader(sequences, batch_size=batch_size, shuffle=True, seed=2,
                          num_workers=num_workers, collate_fn=collate)  # fmt: skip

    with pytest.raises(AssertionError, match=r"\['(input_ids|labels|position_ids|document_ids)'\]"):
        check_resume(factory, [2], batches=6, run=Config(batch_size=4),
                     resume=[Config(world_size=2, batch_size=2)])  # fmt: skip


def test_uncollate_tokens_refuses_a_batch_that_collate_tokens_did_not_make() -> None:
    batch = {"input_ids": torch.zeros(2, 3, dtype=torch.int64)}
    with pytest.raises(
        ValueError, match=r"batch should be the output of collate_tokens .* got dict"
    ):
        uncollate_tokens(batch)
