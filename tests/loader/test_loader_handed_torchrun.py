"""Two torchrun ranks with two workers each, SIGKILLed mid-epoch, resumed on one rank."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from detsamplers.trial._demo import free_port
from tests.helpers import run_agent

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).with_name("torchrun_loader.py")
RECORDS, PER_EPOCH = 96, 12  # global batches of 8


def torchrun(ranks: int, work: Path, *args: str) -> tuple[int, str]:
    """The exit status and output of the script on ``ranks`` ranks (a hang fails, stacks)."""
    command = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
        "--master_addr=127.0.0.1", f"--master_port={free_port()}", "--max_restarts=0",
        str(SCRIPT), str(work), *args,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    log = work / f"torchrun-{ranks}-{len(list(work.glob('torchrun-*.log')))}.log"
    return run_agent(command, log, env, 180), log.read_text()


def trained(work: Path, world: int, first: int, stop: int) -> dict[int, list[int]]:
    """The records of global batches ``first <= step < stop`` of the run on ``world`` ranks."""
    steps: dict[int, list[int]] = {}
    for rank in range(world):
        for line in (work / f"records-rank{rank}-run{world}.jsonl").read_text().splitlines():
            row = json.loads(line)
            if first <= row["step"] < stop:
                steps.setdefault(row["step"], []).extend(row["records"])
    return steps


def test_two_ranks_with_workers_killed_mid_epoch_resume_on_one_rank_with_every_record_once(
    tmp_path: Path,
) -> None:
    killed = torchrun(2, tmp_path, "--kill-at=9")
    assert killed[0] != 0, killed[1]
    checkpoint = json.loads((tmp_path / "checkpoint.json").read_text())
    assert checkpoint == {"samples": 64, "batches": 8}  # not the batches workers prefetched
    states = [json.loads((tmp_path / f"state-rank{r}.json").read_text()) for r in (0, 1)]
    assert [state["samples"] for state in states] == [64, 64]
    assert trained(tmp_path, 2, 8, 10), "the ranks trained past the checkpoint before the kill"

    resumed = torchrun(1, tmp_path, f"--batches={2 * PER_EPOCH}")
    assert resumed[0] == 0, resumed[1]

    steps = {**trained(tmp_path, 2, 0, 8), **trained(tmp_path, 1, 8, 2 * PER_EPOCH)}
    assert sorted(steps) == list(range(2 * PER_EPOCH))
    assert all(len(records) == 8 for records in steps.values())
    for epoch in (0, 1):
        records = [r for s in range(epoch * PER_EPOCH, (epoch + 1) * PER_EPOCH) for r in steps[s]]
        assert sorted(records) == list(range(RECORDS)), f"epoch {epoch}"
