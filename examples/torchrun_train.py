"""The shortest correct torchrun loop on detsamplers: stop anywhere, resume on any world size.

    torchrun --nproc_per_node=2 examples/torchrun_train.py --out run --max-steps 3
    torchrun --nproc_per_node=1 examples/torchrun_train.py --out run --max-steps 16 --batch-size 8

A checkpoint is a folder ``step-<n>`` that counts once its ``loader.json`` is written
(last); a launch resumes from the newest. The loader's state counts the batches handed
to the loop, so batches the workers had prefetched are not lost, and it holds the samples
trained: a run may resume with another world size at the same global batch.
Each rank appends the record indices it trained to ``<out>/records-rank<r>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from detsamplers.loader import DataLoader


class Records(torch.utils.data.Dataset[dict[str, Any]]):
    """``length`` records; each carries its index, so the run can count what it trained."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"index": index, "x": torch.full((4,), float(index))}


def latest(checkpoints: Path) -> Path | None:
    done = [p for p in checkpoints.glob("step-*") if (p / "loader.json").exists()]
    return max(done, key=lambda p: int(p.name.split("-")[1]), default=None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--records", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=0)
    args = parser.parse_args(argv)

    # Setup.
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # Data: this rank's share of an endless shuffled stream.
    data = DataLoader(
        Records(args.records),
        batch_size=args.batch_size,
        shuffle=True,
        seed=1,
        num_workers=args.num_workers,
    )
    train = data.get_data_loader(repeat=True, num_replicas=world, rank=rank)
    # Model.
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    # Load the newest checkpoint.
    checkpoints = args.out / "checkpoints"
    step = 0
    if (folder := latest(checkpoints)) is not None:
        model.load_state_dict(torch.load(folder / "model.pt", weights_only=True))
        optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=True))
        train.load_state_dict(json.loads((folder / "loader.json").read_text()))
        step = int(folder.name.split("-")[1])
    # Loop.
    records = args.out / f"records-rank{rank}.jsonl"
    records.parent.mkdir(parents=True, exist_ok=True)
    batches = iter(train)
    while step < args.max_steps:
        batch = next(batches)
        with open(records, "a") as f:
            f.write(json.dumps({"step": step, "indices": batch["index"].tolist()}) + "\n")
        loss = model(batch["x"]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % args.checkpoint_every == 0 and rank == 0:
            folder = checkpoints / f"step-{step}"
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), folder / "model.pt")
            torch.save(optimizer.state_dict(), folder / "optimizer.pt")
            # Rank 0's state resumes every rank: it holds the samples all ranks trained.
            (folder / "loader.json").write_text(json.dumps(train.state_dict()))
        dist.barrier()  # every rank has stepped before a checkpoint counts
    # Close.
    del batches  # stop the loader's workers before the process group goes
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
