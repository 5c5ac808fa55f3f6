"""A flattened token batch (examples/tokens_hf_trainer.py) gives each document its own logits.

The token recipes' runs and resumes under torchrun share their framework's recipe launch
(tests/frameworks/token_runs.py).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from .token_runs import write_corpus


@pytest.mark.frameworks
def test_a_flattened_token_batch_gives_each_document_piece_the_logits_it_has_alone(
    tmp_path: Path,
) -> None:
    transformers = pytest.importorskip("transformers")
    from tokens_hf_trainer import flatten, tiny_llama

    from detsamplers.tokens import TokenCorpus, TokenSequences

    corpus = write_corpus(tmp_path)
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
