"""Accelerate on a detsamplers loader: one-call prepare, exact mid-epoch resume via save_state.

``accelerator.prepare(model, optimizer, loader)`` takes the loader as any Accelerate script
gives it: unsharded (each process then takes every ``num_processes``-th batch of the one
stream) or, with ``--per-rank``, built for this process (each process then gets exactly the
loader's own batches). The loader registered for checkpointing saves the batches the
prepared loader handed out, and ``save_state``/``load_state`` resume there, on any number
of processes::

    torchrun --nproc_per_node=2 examples/accelerate_train.py --out run --max-steps 3
    torchrun --nproc_per_node=1 examples/accelerate_train.py --out run --max-steps 16 \
        --batch-size 8 --resume run/checkpoints/step-3

Each rank appends the record indices it trained to ``<out>/records-rank<r>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator

from detsamplers.loader import DataLoader


class Records(torch.utils.data.Dataset[dict[str, Any]]):
    """``length`` records; each carries its index, so the run can count what it trained."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index, "x": torch.full((4,), float(index))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--records", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--resume", default=None, help="a folder written by save_state")
    parser.add_argument("--per-rank", action="store_true", help="build the loader for this process")
    args = parser.parse_args(argv)

    accelerator = Accelerator(cpu=True)
    data = DataLoader(
        Records(args.records),
        batch_size=args.batch_size,
        shuffle=True,
        seed=1,
        num_workers=args.num_workers,
    )
    world, rank = (
        (accelerator.num_processes, accelerator.process_index) if args.per_rank else (1, 0)
    )
    loader = data.get_data_loader(repeat=True, num_replicas=world, rank=rank)
    # The loader's own state counts the batches the prepared loader hands out.
    accelerator.register_for_checkpointing(loader)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, train = accelerator.prepare(model, optimizer, loader)
    if args.resume:
        accelerator.load_state(args.resume)
    # The loader's state counts the samples every process trained: the step follows.
    step = loader.state_dict()["samples"] // (args.batch_size * accelerator.num_processes)

    records = args.out / f"records-rank{accelerator.process_index}.jsonl"
    records.parent.mkdir(parents=True, exist_ok=True)
    for batch in train:
        if step == args.max_steps:
            break
        with open(records, "a") as f:
            f.write(json.dumps({"step": step, "indices": batch["index"].tolist()}) + "\n")
        loss = model(batch["x"]).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        if step % args.checkpoint_every == 0:
            accelerator.save_state(str(args.out / "checkpoints" / f"step-{step}"))
    accelerator.end_training()


if __name__ == "__main__":
    main()
