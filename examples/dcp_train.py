"""torch.distributed.checkpoint (the torchtitan route): the loader's state under ``dataloader``.

    torchrun --nproc_per_node=2 examples/dcp_train.py --out run --max-steps 3
    torchrun --nproc_per_node=1 examples/dcp_train.py --out run --max-steps 16 --batch-size 8

``dcp.save`` writes the model, the optimizer and, under ``dataloader``, every rank's loader
state keyed by its rank (a JSON string, so loading it runs no code). ``dcp.load`` on another
world size reads rank 0's entry on every rank: a loader state holds the samples all ranks
trained, so it resumes any world size at the same global batch. A checkpoint folder counts
once DCP's ``.metadata`` file exists (written last). Each rank appends the record indices it
trained to ``<out>/records-rank<r>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

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
    done = [p for p in checkpoints.glob("step-*") if (p / ".metadata").exists()]
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
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state, "dataloader": {"rank0": ""}}
        dcp.load(state, checkpoint_id=folder)
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
        )
        train.load_state_dict(json.loads(state["dataloader"]["rank0"]))
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
        if step % args.checkpoint_every == 0:
            model_state, optimizer_state = get_state_dict(model, optimizer)
            loader = {f"rank{rank}": json.dumps(train.state_dict())}
            state = {"model": model_state, "optimizer": optimizer_state, "dataloader": loader}
            dcp.save(state, checkpoint_id=checkpoints / f"step-{step}")
    # Close.
    del batches  # stop the loader's workers before the process group goes
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
