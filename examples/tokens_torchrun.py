"""A plain torchrun loop on token sequences: stop anywhere, resume batch for batch.

examples/torchrun_train.py's loop with ``TokenSequences`` of a uint16 ``.bin`` corpus
(documents end with token 0), ``collate_tokens``, and a one-layer causal model whose
attention mask is block-diagonal by ``document_ids``::

    torchrun --nproc_per_node=2 examples/tokens_torchrun.py --corpus train.bin --out run \\
        --max-steps 3
    torchrun --nproc_per_node=2 examples/tokens_torchrun.py --corpus train.bin --out run \\
        --max-steps 6

A checkpoint is a folder ``step-<n>`` that counts once its ``loader.json`` is written
(last); a launch resumes from the newest, or from ``--resume <folder>``. Each rank appends
the batches it trained to ``<out>/tokens-rank<r>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens

KEYS = ("input_ids", "labels", "position_ids", "document_ids")


class TinyLM(nn.Module):
    """Token and position embeddings, one causal attention layer within documents, a head."""

    def __init__(self, vocab_size: int, seq_len: int, width: int = 16) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, width)
        self.positions = nn.Embedding(seq_len, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.head = nn.Linear(width, vocab_size)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        x = self.tokens(batch["input_ids"]) + self.positions(batch["position_ids"])
        docs = batch["document_ids"]
        causal = torch.ones(docs.shape[-1], docs.shape[-1], dtype=torch.bool).tril()
        mask = (docs[:, :, None] == docs[:, None, :]) & causal  # block-diagonal causal
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        x = x + functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        logits = self.head(x)
        return functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())


def latest(checkpoints: Path) -> Path | None:
    done = [p for p in checkpoints.glob("step-*") if (p / "loader.json").exists()]
    return max(done, key=lambda p: int(p.name.split("-")[1]), default=None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=2, help="sequences per process")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--resume", type=Path, default=None, help="default: the newest")
    args = parser.parse_args(argv)

    # Setup.
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # Data: this rank's share of an endless stream of shuffled sequences.
    corpus = TokenCorpus(args.corpus, dtype="uint16", eod_id=0, vocab_size=64, progress=False)
    sequences = TokenSequences(corpus, args.seq_len, mode="concat", seed=1)
    data = DataLoader(sequences, batch_size=args.batch_size, shuffle=True, seed=1,
                      num_workers=args.num_workers, collate_fn=collate_tokens)  # fmt: skip
    train = data.get_data_loader(repeat=True, num_replicas=world, rank=rank)
    # Model.
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(TinyLM(64, args.seq_len))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # Load the newest checkpoint (or the one named).
    checkpoints = args.out / "checkpoints"
    step = 0
    if (folder := args.resume or latest(checkpoints)) is not None:
        model.load_state_dict(torch.load(folder / "model.pt", weights_only=True))
        optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=True))
        sequences.load_state_dict(json.loads((folder / "tokens.json").read_text()))
        train.load_state_dict(json.loads((folder / "loader.json").read_text()))
        step = int(folder.name.split("-")[1])
    # Loop.
    records = args.out / f"tokens-rank{rank}.jsonl"
    records.parent.mkdir(parents=True, exist_ok=True)
    batches = iter(train)
    while step < args.max_steps:
        batch = next(batches)
        with open(records, "a") as f:
            row = {"step": step, **{key: batch[key].tolist() for key in KEYS}}
            f.write(json.dumps(row) + "\n")
        loss = model(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % args.checkpoint_every == 0 and rank == 0:
            folder = checkpoints / f"step-{step}"
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), folder / "model.pt")
            torch.save(optimizer.state_dict(), folder / "optimizer.pt")
            # The corpus's fingerprint: a resume over other files, mode or seq_len fails.
            (folder / "tokens.json").write_text(json.dumps(sequences.state_dict()))
            (folder / "loader.json").write_text(json.dumps(train.state_dict()))  # last
        dist.barrier()  # every rank has stepped before a checkpoint counts
    # Close.
    del batches  # stop the loader's workers before the process group goes
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
