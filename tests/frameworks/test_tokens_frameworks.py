"""Token streams through the frameworks: a run, and its resume from a checkpoint, batch for batch.

Each recipe (docs/recipes/) trains on ``TokenSequences`` of one small corpus under torchrun
on 2 processes: straight to step 6 with a checkpoint at step 3, then (in the same launch,
tests/frameworks/run_twice.py) from a copy of that checkpoint to step 6 again. Every rank
records the batches its model trained on; the resumed steps 3 to 5 are the straight run's,
element for element.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from .framework_helpers import torchrun_twice

VOCAB = 64


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A uint16 ``.bin`` of random documents, each ending with token 0."""
    rng = np.random.default_rng(3)
    docs = [np.append(rng.integers(1, VOCAB, size=n - 1), 0) for n in rng.integers(2, 50, 120)]
    path = tmp_path / "train.bin"
    np.concatenate(docs).astype(np.uint16).tofile(path)
    return path


def records(run: Path, rank: int) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in (run / f"tokens-rank{rank}.jsonl").read_text().splitlines()
    ]


def assert_resumed_exactly(first: Path, second: Path, steps: int, resumed_from: int) -> None:
    for rank in (0, 1):
        straight = records(first, rank)
        assert [row["step"] for row in straight] == list(range(steps)), rank
        # second is a copy of first (its records too), then the resume appended its own
        resumed = records(second, rank)[len(straight) :]
        assert [row["step"] for row in resumed] == list(range(resumed_from, steps)), rank
        assert resumed == straight[resumed_from:], rank


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_hf_trainer_on_flattened_token_batches_resumes_batch_for_batch(
    tmp_path: Path, corpus: Path
) -> None:
    pytest.importorskip("transformers")
    first, second = tmp_path / "first", tmp_path / "second"
    common = ["--corpus", str(corpus), "--max-steps", "6"]
    torchrun_twice(
        "tokens_hf_trainer.py",
        2,
        (first, second),
        [*common, "--out", str(first)],
        [*common, "--out", str(second), "--resume", str(second / "checkpoint-3")],
        tmp_path / "hf.log",
    )
    assert_resumed_exactly(first, second, 6, 3)
    row = records(first, 0)[0]
    assert len(row["input_ids"]) == 1 and len(row["input_ids"][0]) == 2 * 32  # one flat row
    assert row["position_ids"][0].count(0) >= 2  # positions restart at each document


@pytest.mark.distributed
@pytest.mark.frameworks
def test_lightning_on_token_sequences_resumes_batch_for_batch(tmp_path: Path, corpus: Path) -> None:
    pytest.importorskip("lightning")
    first, second = tmp_path / "first", tmp_path / "second"
    common = ["--corpus", str(corpus), "--max-steps", "6", "--num-workers", "1"]
    resume = ["--resume", str(second / "checkpoints" / "step=3.ckpt")]
    torchrun_twice(
        "tokens_lightning.py",
        2,
        (first, second),
        [*common, "--out", str(first)],
        [*common, "--out", str(second), *resume],
        tmp_path / "lightning.log",
    )
    assert_resumed_exactly(first, second, 6, 3)


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_plain_torchrun_loop_on_token_sequences_resumes_batch_for_batch(
    tmp_path: Path, corpus: Path
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    common = ["--corpus", str(corpus), "--max-steps", "6"]
    resume = ["--resume", str(second / "checkpoints" / "step-3")]
    torchrun_twice(
        "tokens_torchrun.py",
        2,
        (first, second),
        [*common, "--out", str(first)],
        [*common, "--out", str(second), *resume],
        tmp_path / "torchrun.log",
    )
    assert_resumed_exactly(first, second, 6, 3)
    row = records(first, 0)[0]
    assert len(row["input_ids"]) == 2 and len(row["input_ids"][0]) == 32


@pytest.mark.frameworks
def test_a_flattened_token_batch_gives_each_document_piece_the_logits_it_has_alone(
    corpus: Path,
) -> None:
    transformers = pytest.importorskip("transformers")
    from tokens_hf_trainer import flatten, tiny_llama

    from detsamplers.tokens import TokenCorpus, TokenSequences

    sequences = TokenSequences(TokenCorpus(corpus, dtype="uint16", eod_id=0), 32, mode="concat")
    batch = flatten([sequences[0], sequences[1], sequences[2]])
    config = tiny_llama(32)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).train()  # as in training (no dropout)
    keys = ("input_ids", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k")
    with torch.no_grad():
        flat = model(**{key: batch[key] for key in keys}).logits[0]
        cu = batch["cu_seq_lens_q"].tolist()
        pieces = [(a, b) for a, b in itertools.pairwise(cu) if b > a]
        assert len(pieces) > 3  # several documents in the row
        for a, b in pieces:
            alone = model(input_ids=batch["input_ids"][:, a:b]).logits[0]
            torch.testing.assert_close(flat[a:b], alone, rtol=1e-5, atol=1e-5)
