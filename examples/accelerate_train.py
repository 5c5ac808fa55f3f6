"""Accelerate on a detsamplers loader: exact mid-epoch resume through save_state/load_state.

The loader is already split by process, so it stays out of ``accelerator.prepare()``
(which would shard it a second time; it refuses, with this fix). It is registered for
checkpointing instead, and ``save_state``/``load_state`` carry its small state::

    torchrun --nproc_per_node=2 examples/accelerate_train.py --out run --max-steps 3
    torchrun --nproc_per_node=1 examples/accelerate_train.py --out run --max-steps 16 \
        --batch-size 8 --resume run/checkpoints/step-3

``--stateful`` builds the Accelerator with ``use_stateful_dataloader=True``, which concerns
loaders given to ``prepare()``: the resume is the same. To skip batches instead of loading a
state, ``accelerator.skip_first_batches(train, n)`` seeks in O(1) on this loader.

Each rank appends the record indices it trained to ``<out>/records-rank<r>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, DataLoaderConfiguration

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
    parser.add_argument(
        "--stateful", action="store_true", help="use_stateful_dataloader=True (same resume)"
    )
    args = parser.parse_args(argv)

    # use_stateful_dataloader concerns loaders passed to prepare(); ours is not, and resumes
    # exactly with or without it.
    config = DataLoaderConfiguration(use_stateful_dataloader=args.stateful)
    accelerator = Accelerator(cpu=True, dataloader_config=config)
    data = DataLoader(
        Records(args.records),
        batch_size=args.batch_size,
        shuffle=True,
        seed=1,
        num_workers=args.num_workers,
    )
    train = data.get_data_loader(
        repeat=True, num_replicas=accelerator.num_processes, rank=accelerator.process_index
    )
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)  # not the loader
    accelerator.register_for_checkpointing(train)
    if args.resume:
        accelerator.load_state(args.resume)
    # The loader's state counts the samples every process trained: the step follows.
    step = train.state_dict()["samples"] // (args.batch_size * accelerator.num_processes)

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
