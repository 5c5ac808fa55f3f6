"""benchmarks/tokens_peers.py: its synthetic corpora and our adapter, small, behaviour only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from peers.tokens import EOD, Corpus, document_lengths, ours  # noqa: E402
from tokens_peers import blocks  # noqa: E402

SEQ_LEN, BATCH = 16, 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """Our format of a small corpus: the ``.bin`` and its lengths sidecar, as the driver writes."""
    found = Corpus(tmp_path_factory.mktemp("tokens"))
    lengths = document_lengths(300, mean=20.0)
    np.save(found.lengths, lengths)
    np.concatenate([tokens for tokens, _ in blocks(lengths, per_block=64)]).tofile(found.bin)
    return found


def test_the_synthetic_lengths_have_the_web_like_mean_the_tables_state() -> None:
    lengths = document_lengths(200_000, mean=800.0)
    assert abs(lengths.mean() - 800) / 800 < 0.02
    assert lengths.min() >= 2
    assert np.array_equal(lengths, document_lengths(200_000, mean=800.0))


def test_every_written_document_ends_with_eod_and_holds_no_other() -> None:
    lengths = document_lengths(1000, mean=50.0)
    tokens = np.concatenate([t for t, _ in blocks(lengths, per_block=128)])
    assert len(tokens) == lengths.sum()
    assert (tokens[np.cumsum(lengths) - 1] == EOD).all()
    assert int((tokens == EOD).sum()) == len(lengths)


@pytest.mark.parametrize("mode", ["chunk", "concat"])
@settings(max_examples=10, deadline=None)
@given(batches=st.integers(0, 40))
def test_our_resumed_first_batch_is_the_batch_an_uninterrupted_run_reaches(
    corpus: Corpus, mode: str, batches: int
) -> None:
    first = ours.resume(corpus, SEQ_LEN, BATCH, batches * BATCH, mode=mode)()
    uninterrupted = ours.loader(corpus, SEQ_LEN, BATCH, 0, mode=mode)
    for _ in range(batches):
        next(uninterrupted)
    assert np.array_equal(first.numpy(), next(uninterrupted)["input_ids"].numpy())


@pytest.mark.parametrize("mode", ["chunk", "concat"])
def test_our_state_is_json_under_a_kilobyte_at_1e10_tokens(corpus: Corpus, mode: str) -> None:
    samples = 10**10 // (BATCH * SEQ_LEN) * BATCH
    state = ours.state(corpus, SEQ_LEN, BATCH, samples, mode=mode)
    assert len(state) <= 1024
    assert json.loads(state)["tokens"]["config"]["mode"] == mode
