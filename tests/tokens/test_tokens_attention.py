"""The block-diagonal mask from ``document_ids`` is right: a batch of several documents
gives each token the loss its document gives when run alone."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from tokens_helpers import write_eod
from torch import nn
from torch.nn import functional

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenSequences, collate_tokens

VOCAB, WIDTH, HEADS = 64, 32, 4


class TinyCausalLM(nn.Module):
    """Two pre-norm transformer blocks over SDPA; positions from ``position_ids``."""

    def __init__(self, max_len: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(max_len, WIDTH)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "norm1": nn.LayerNorm(WIDTH),
                    "qkv": nn.Linear(WIDTH, 3 * WIDTH),
                    "out": nn.Linear(WIDTH, WIDTH),
                    "norm2": nn.LayerNorm(WIDTH),
                    "mlp": nn.Sequential(
                        nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)
                    ),
                }
            )
            for _ in range(2)
        )
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:  # fmt: skip
        x = self.tokens(input_ids) + self.positions(position_ids)
        batch, length, _ = x.shape
        for block in self.blocks:
            q, k, v = block["qkv"](block["norm1"](x)).chunk(3, dim=-1)
            q, k, v = (t.view(batch, length, HEADS, -1).transpose(1, 2) for t in (q, k, v))
            attended = functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])
            x = x + block["out"](attended.transpose(1, 2).reshape(batch, length, WIDTH))
            x = x + block["mlp"](block["norm2"](x))
        return self.head(x)


def block_diagonal_causal(document_ids: torch.Tensor) -> torch.Tensor:
    """``(B, L, L)``: query ``i`` sees key ``j <= i`` of its own document."""
    length = document_ids.shape[-1]
    same = document_ids[:, :, None] == document_ids[:, None, :]
    return same & torch.ones(length, length, dtype=torch.bool).tril()


def token_losses(
    model: TinyCausalLM, batch: dict[str, torch.Tensor], mask: torch.Tensor
) -> torch.Tensor:
    logits = model(batch["input_ids"], batch["position_ids"], mask)
    return functional.cross_entropy(logits.transpose(1, 2), batch["labels"], reduction="none")


@pytest.mark.parametrize("mode", ["chunk", "concat"])
def test_a_batch_of_several_documents_gives_the_loss_of_each_document_run_alone(
    tmp_path: Path, mode: str
) -> None:
    corpus = write_eod(tmp_path, [[3, 7, 2, 9, 5, 4, 6, 8, 1, 5]], seed=4)
    sequences = TokenSequences(corpus, 16, mode=mode, seed=2, block_documents=2)
    loader = DataLoader(sequences, batch_size=3, shuffle=True, seed=2, collate_fn=collate_tokens)
    batch = next(iter(loader.get_data_loader(repeat=True)))
    torch.manual_seed(0)
    model = TinyCausalLM(max_len=16).double().eval()
    with torch.no_grad():
        batched = token_losses(model, batch, block_diagonal_causal(batch["document_ids"]))
        assert (batch["labels"] == -100).any() and batch["document_ids"].unique().numel() >= 4
        alone = torch.zeros_like(batched)
        segments = 0
        cu = batch["cu_seqlens"].tolist()
        flat = {key: batch[key].reshape(1, -1) for key in ("input_ids", "labels")}
        for start, stop in itertools.pairwise(cu):
            if stop == start:
                continue  # the padding: zero-length sequences
            piece = {key: value[:, start:stop] for key, value in flat.items()}
            piece["position_ids"] = torch.arange(stop - start)[None]  # its own positions
            causal = torch.ones(1, stop - start, stop - start, dtype=torch.bool).tril()
            alone.view(1, -1)[:, start:stop] = token_losses(model, piece, causal)
            segments += 1
        assert segments > 3  # several documents in the batch, beyond one per row
        assert torch.allclose(batched, alone, rtol=0, atol=1e-10)
        # Without the block-diagonal mask the losses differ: the test can fail.
        causal_only = torch.ones(3, 16, 16, dtype=torch.bool).tril()
        assert not torch.allclose(token_losses(model, batch, causal_only), alone, atol=1e-6)
