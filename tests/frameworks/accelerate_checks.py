"""Accelerate on 2 real processes: one-call ``prepare`` of both loader forms, an O(1) skip.

Run by tests/frameworks/run_twice.py (``--checks``) on every rank before the example's
first run; ``check`` raises on any failure (the launch then fails), and writes
``accelerate-checks-rank<r>.json`` when all passed.
"""

from __future__ import annotations

import json
import os
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator

from detsamplers.loader import DataLoader

RECORDS = 512  # 64 batches of 4 per rank and pass: the skip and what follows stay in pass 0
SKIP = 20
TAKE = 10


class FetchLog(torch.utils.data.Dataset[int]):
    """Records that append the index of every fetch to a file (workers included)."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def __len__(self) -> int:
        return RECORDS

    def __getitem__(self, index: int) -> int:
        with open(self.log, "a") as f:
            f.write(f"{index}\n")
        return index


def fetched(log: Path) -> list[int]:
    return [int(line) for line in log.read_text().split()] if log.exists() else []


def check(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    accelerator = Accelerator(cpu=True)
    world, rank = accelerator.num_processes, accelerator.process_index
    assert world == 2, world
    report: dict[str, Any] = {}

    # prepare(model, optimizer, loader) in one call, over one epoch (8 steps of 2 x 4 of 64
    # records): an unsharded loader gives each process every other batch of its stream, a
    # per-rank one its own batches.
    data = DataLoader(range(64), batch_size=4, shuffle=True, seed=5)
    stream = [b.tolist() for b in islice(data.get_data_loader(repeat=True), 16)]
    own = [b.tolist() for b in islice(data.get_data_loader(True, 0, world, rank), 8)]
    for form, expected in (("unsharded", stream[rank::world]), ("per-rank", own)):
        loader = data.get_data_loader(True, 0, *((world, rank) if form == "per-rank" else (1, 0)))
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer, train = accelerator.prepare(model, optimizer, loader)
        got = [b.tolist() for b in islice(train, 8)]
        assert got == expected, (form, got, expected)
        assert loader.state_dict()["samples"] == 64, loader.state_dict()  # one epoch handed
        report[f"epoch-{form}"] = got

    for workers in (0, 2):
        plain_log, log = (out / f"fetch-{name}-w{workers}-rank{rank}" for name in ("plain", "skip"))
        data = DataLoader(FetchLog(plain_log), batch_size=4, shuffle=True, seed=5)
        plain = [b.tolist() for b in islice(data.get_data_loader(True, 0, world, rank), 40)]
        data = DataLoader(FetchLog(log), batch_size=4, shuffle=True, seed=5, num_workers=workers)
        train = data.get_data_loader(repeat=True, num_replicas=world, rank=rank)
        skipped = accelerator.skip_first_batches(train, SKIP)
        got = [b.tolist() for b in islice(skipped, TAKE)]
        assert got == plain[SKIP : SKIP + TAKE], (workers, got, plain)
        del skipped  # stop its workers before the log is read
        seen = fetched(log)
        skipped_records = {i for batch in plain[:SKIP] for i in batch}
        assert not skipped_records & set(seen), (workers, sorted(skipped_records & set(seen)))
        assert {i for batch in got for i in batch} <= set(seen)
        report[f"fetches-w{workers}"] = len(seen)

    # A skip no replay could finish: the seek lands where get_data_loader(skip=) does.
    data = DataLoader(range(RECORDS), batch_size=4, shuffle=True, seed=5)
    far = 10**12
    train = data.get_data_loader(repeat=True, num_replicas=world, rank=rank)
    first = next(iter(accelerator.skip_first_batches(train, far))).tolist()
    expected = next(iter(data.get_data_loader(True, far, world, rank))).tolist()
    assert first == expected, (first, expected)
    report["far"] = first
    (out / f"accelerate-checks-rank{os.environ['RANK']}.json").write_text(json.dumps(report))
