r"""A trial that trains a tiny GPT on token sequences: preempt it, resize it, resume it.

Each rank is started by torchrun (gloo on CPU); ``--resume`` resumes from the newest
checkpoint, so the same command survives SIGTERM and a relaunch on another world size::

    OMP_NUM_THREADS=1 torchrun --nproc_per_node=2 examples/tokens_trial.py \
        --corpus train.bin --checkpoint-dir ckpt --max-batches 20 --resume

``--corpus`` is a raw ``.bin`` of uint16 tokens whose documents end with token 0 (nanoGPT's
format; ``--vocab-size`` bounds its ids). The model is a one-block causal transformer whose
attention is block-diagonal by ``document_ids``: no token attends across a document
boundary. With ``--record-dir``, every rank appends the sequence numbers and tokens of
its share of each global batch to ``<record-dir>/tokens-rank<r>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.utils.data as tud
from torch import nn
from torch.nn import functional

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens
from detsamplers.trial import Batch, Trainer, Trial, TrialContext, init

__all__ = ["Numbered", "TinyGPT", "TokensTrial", "block_diagonal_causal", "main"]


class Numbered(tud.Dataset[dict[str, npt.NDArray[Any]]]):
    """Token sequences that carry their own number, ``index``, so a run can count them."""

    def __init__(self, sequences: TokenSequences) -> None:
        self.sequences = sequences

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, index: int) -> dict[str, npt.NDArray[Any]]:
        return {**self.sequences[index], "index": np.array(index, dtype=np.int64)}


def collate_numbered(samples: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """``collate_tokens`` plus the sequences' numbers."""
    batch = collate_tokens(samples)
    batch["index"] = torch.tensor([int(s["index"]) for s in samples])
    return batch


def block_diagonal_causal(document_ids: torch.Tensor) -> torch.Tensor:
    """``(B, L, L)`` booleans: query ``i`` attends to key ``j <= i`` of its own document."""
    length = document_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return (document_ids[:, :, None] == document_ids[:, None, :]) & causal


class TinyGPT(nn.Module):
    """One pre-norm transformer block over SDPA, positions from ``position_ids``."""

    def __init__(self, vocab_size: int, seq_len: int, width: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.tokens = nn.Embedding(vocab_size, width)
        self.positions = nn.Embedding(seq_len, width)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
        )
        self.head = nn.Linear(width, vocab_size)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor,
                document_ids: torch.Tensor) -> torch.Tensor:  # fmt: skip
        x = self.tokens(input_ids) + self.positions(position_ids)
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        mask = block_diagonal_causal(document_ids)[:, None]
        attended = functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, width))
        x = x + self.mlp(self.norm2(x))
        logits: torch.Tensor = self.head(x)
        return logits


class TokensTrial(Trial):
    """The tiny GPT, AdamW, and shuffled token sequences (``per_slot_batch_size`` per rank)."""

    def __init__(self, context: TrialContext) -> None:
        super().__init__(context)
        corpus = TokenCorpus(
            context.get_hparam("corpus"),
            dtype="uint16",
            eod_id=0,
            vocab_size=context.get_hparam("vocab_size"),
            progress=False,
        )
        self.seq_len = context.get_hparam("seq_len")
        self.sequences = TokenSequences(
            corpus,
            self.seq_len,
            mode=context.get_hparam("mode"),
            seed=context.get_hparam("seed"),
            window=context.hparams.get("window", 1000),
        )
        self.model = context.wrap_model(TinyGPT(context.get_hparam("vocab_size"), self.seq_len))
        self.optimizer = context.wrap_optimizer(
            torch.optim.AdamW(self.model.parameters(), lr=context.get_hparam("lr"))
        )
        self.record_dir: str | None = context.hparams.get("record_dir")

    def build_training_data_loader(self) -> DataLoader:
        """The sequences, reshuffled every epoch by the loader's keyed permutation."""
        return DataLoader(
            Numbered(self.sequences),
            batch_size=self.context.get_per_slot_batch_size(),
            shuffle=True,
            seed=self.context.get_hparam("seed"),
            num_workers=self.context.get_hparam("num_workers"),
            collate_fn=collate_numbered,
        )

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        """One AdamW step on the next-token loss; records the batch's sequences."""
        logits = self.model(batch["input_ids"], batch["position_ids"], batch["document_ids"])
        loss = functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        if self.record_dir is not None:
            rank = self.context.distributed.get_rank()
            line = {
                "batch": batch_idx,
                "rank": rank,
                "indices": batch["index"].tolist(),
                "input_ids": batch["input_ids"].tolist(),
                "labels": batch["labels"].tolist(),
                "document_ids": batch["document_ids"].tolist(),
            }
            with open(os.path.join(self.record_dir, f"tokens-rank{rank}.jsonl"), "a") as f:
                f.write(json.dumps(line) + "\n")
        return {"loss": loss}


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The rank's arguments."""
    parser = argparse.ArgumentParser(description="One rank of a token-stream trial.")
    parser.add_argument("--corpus", required=True, help="a uint16 .bin, documents end with 0")
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--record-dir", default=None)
    parser.add_argument("--max-batches", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=4)
    parser.add_argument("--global-batch-size", type=int, default=6)
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--vocab-size", type=int, default=64)
    parser.add_argument("--mode", default="chunk", choices=["chunk", "concat", "pack"])
    parser.add_argument("--window", type=int, default=1000, help="documents per pack window")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--resume", action="store_true", help='latest_checkpoint="auto"')
    parser.add_argument("--stop-check-period", type=int, default=None)
    parser.add_argument("--weights-out", default=None, help="rank 0 saves the final weights")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None, trial_class: type[TokensTrial] = TokensTrial) -> None:
    """Train one rank."""
    args = parse(argv)
    hparams = {
        "global_batch_size": args.global_batch_size,
        "lr": 3e-3,
        "corpus": args.corpus,
        "seq_len": args.seq_len,
        "vocab_size": args.vocab_size,
        "mode": args.mode,
        "seed": args.seed,
        "window": args.window,
        "num_workers": args.num_workers,
        "record_dir": args.record_dir,
    }
    if args.record_dir is not None:
        os.makedirs(args.record_dir, exist_ok=True)
    with init(hparams=hparams, seed=args.seed) as context:
        trial = trial_class(context)
        Trainer(trial, context).fit(
            max_length=Batch(args.max_batches),
            checkpoint_period=Batch(args.checkpoint_every),
            checkpoint_dir=args.checkpoint_dir,
            latest_checkpoint="auto" if args.resume else None,
            reporting_period=Batch(4),
            stop_check_period=None
            if args.stop_check_period is None
            else Batch(args.stop_check_period),
        )
        if args.weights_out is not None and context.distributed.get_rank() == 0:
            model = trial.model
            if isinstance(model, nn.parallel.DistributedDataParallel):
                model = model.module
            torch.save(model.state_dict(), args.weights_out)


if __name__ == "__main__":
    main()
