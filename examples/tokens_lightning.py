"""Lightning on token sequences: default Trainer settings, exact mid-epoch resume.

examples/lightning_train.py with ``TokenSequences`` of a uint16 ``.bin`` corpus (documents
end with token 0), ``collate_tokens``, and a one-layer causal model whose attention mask is
block-diagonal by ``document_ids``. Lightning saves the loader's state in its own
checkpoint and loads it back::

    torchrun --nproc_per_node=2 examples/tokens_lightning.py --corpus train.bin --out run \\
        --max-steps 6
    torchrun --nproc_per_node=2 examples/tokens_lightning.py --corpus train.bin --out run \\
        --max-steps 6 --resume run/checkpoints/step=3.ckpt

Each rank appends the batches it trained to ``<out>/tokens-rank<r>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.nn import functional

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens

KEYS = ("input_ids", "labels", "position_ids", "document_ids")


class Data(L.LightningDataModule):
    def __init__(self, corpus: Path, seq_len: int, batch_size: int, num_workers: int) -> None:
        super().__init__()
        tokens = TokenCorpus(corpus, dtype="uint16", eod_id=0, vocab_size=64, progress=False)
        self.sequences = TokenSequences(tokens, seq_len, mode="concat", seed=1)
        self.loader = DataLoader(self.sequences, batch_size=batch_size, shuffle=True, seed=1,
                                 num_workers=num_workers, collate_fn=collate_tokens)  # fmt: skip

    def train_dataloader(self) -> Any:
        # One rank's share of an endless stream of shuffled sequences.
        return self.loader.get_data_loader(
            repeat=True, num_replicas=self.trainer.world_size, rank=self.trainer.global_rank
        )

    def state_dict(self) -> dict[str, Any]:
        # The corpus's fingerprint, in Lightning's checkpoint: a resume over other files,
        # mode or seq_len fails naming what differs.
        return {"tokens": self.sequences.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.sequences.load_state_dict(state_dict["tokens"])


class Model(L.LightningModule):
    """Token and position embeddings, one causal attention layer within documents, a head."""

    def __init__(self, out: Path, seq_len: int, width: int = 16) -> None:
        super().__init__()
        self.out = out
        self.tokens = nn.Embedding(64, width)
        self.positions = nn.Embedding(seq_len, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.head = nn.Linear(width, 64)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        row = {"step": self.global_step, **{key: batch[key].tolist() for key in KEYS}}
        with open(self.out / f"tokens-rank{self.global_rank}.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        x = self.tokens(batch["input_ids"]) + self.positions(batch["position_ids"])
        docs = batch["document_ids"]
        causal = torch.ones(docs.shape[-1], docs.shape[-1], dtype=torch.bool).tril()
        mask = (docs[:, :, None] == docs[:, None, :]) & causal  # block-diagonal causal
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        x = x + functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        logits = self.head(x)
        return functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=2, help="sequences per process")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--resume", default=None, help="a checkpoint of Lightning's")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    trainer = L.Trainer(
        accelerator="cpu",
        devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        max_steps=args.max_steps,
        callbacks=[
            ModelCheckpoint(
                dirpath=args.out / "checkpoints",
                filename="{step}",
                every_n_train_steps=args.checkpoint_every,
                save_top_k=-1,
            )
        ],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    torch.manual_seed(0)
    data = Data(args.corpus, args.seq_len, args.batch_size, args.num_workers)
    trainer.fit(Model(args.out, args.seq_len), datamodule=data, ckpt_path=args.resume)


if __name__ == "__main__":
    main()
