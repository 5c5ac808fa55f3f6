"""A training loop as docs/getting-started.md shows it, with workers, under torchrun.

    python -m torch.distributed.run --nproc_per_node=2 --master_addr=127.0.0.1 \\
        --master_port=29500 tests/loader/torchrun_loader.py WORK [--kill-at=N] [--batches=N]

Each rank loads its batches with ``num_workers=2`` and writes the records of every batch
it trains to ``WORK/records-rank{r}-run{world}.jsonl``. Every ``--every`` batches the
ranks agree (a barrier) and save ``loader.state_dict()`` to ``WORK/state-rank{r}.json``,
written atomically, then rank 0 writes ``WORK/checkpoint.json`` naming the batches
trained. ``--kill-at=N`` SIGKILLs each rank after it trains batch ``N`` (mid-epoch). A run
on another world size resumes from rank 0's state, which holds the samples trained by
every rank.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist

from detsamplers.loader import DataLoader

RECORDS = 96
GLOBAL_BATCH = 8


def write_atomically(path: Path, data: object) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data))
    os.replace(partial, path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path)
    parser.add_argument("--kill-at", type=int, default=-1)
    parser.add_argument("--batches", type=int, default=10**9)
    parser.add_argument("--every", type=int, default=4)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    loader = DataLoader(
        range(RECORDS),
        batch_size=GLOBAL_BATCH // world,
        shuffle=True,
        seed=3,
        num_workers=2,
        prefetch_factor=3,
    )
    batches = loader.get_data_loader(repeat=True, num_replicas=world, rank=rank)
    done = 0
    checkpoint = args.work / "checkpoint.json"
    if checkpoint.exists():
        state = json.loads((args.work / "state-rank0.json").read_text())
        batches.load_state_dict(state)  # another world size: it continues at the sample
        done = json.loads(checkpoint.read_text())["samples"] // GLOBAL_BATCH

    log = (args.work / f"records-rank{rank}-run{world}.jsonl").open("a")
    for step, batch in enumerate(batches, start=done):
        if step >= args.batches:
            break
        log.write(json.dumps({"step": step, "rank": rank, "records": batch.tolist()}) + "\n")
        log.flush()
        trained = step + 1
        if trained % args.every == 0:
            state = batches.state_dict()
            write_atomically(args.work / f"state-rank{rank}.json", state)
            dist.barrier()
            if rank == 0:
                write_atomically(checkpoint, {"samples": state["samples"], "batches": trained})
            dist.barrier()
        if step == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    log.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
