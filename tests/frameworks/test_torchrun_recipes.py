"""The plain torchrun loop and the DCP loop: exact epochs across a resume on 1 and 2 processes.

examples/torchrun_train.py and examples/dcp_train.py (docs/recipes/) under torchrun: 64
records, a global batch of 8, so an epoch is 8 steps. A run on 2 processes with 2 loader
workers stops at step 3; relaunched, it resumes from its newest checkpoint to step 16: the
plain loop on 2 processes (in the first run's launch, tests/frameworks/run_twice.py) and
on 1, the DCP loop (``dcp.load`` on another world size) on 1. Every record is trained
exactly once in each of the two epochs, and each resume trained only what was left.

Both loops share two launches (:func:`runs`): one on 2 processes (the plain loop's first run
and its resume, then the DCP loop's first run, then the token loop's run and resume,
tests/frameworks/token_runs.py), one on 1 (both resumes), instead of five: a launch's agent
and ranks each import torch first, most of a short run's CPU time.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .framework_helpers import Shared, per_epoch, torchrun_in_turn, torchrun_twice
from .token_runs import assert_resumed_exactly, records, token_runs, write_corpus

RECORDS = 64
STEPS_PER_EPOCH = 8
FIRST = ["--max-steps", "3", "--batch-size", "4", "--num-workers", "2"]


def resume_args(run: Path, batch_size: int) -> list[str]:
    return ["--out", str(run), "--max-steps", "16", "--batch-size", str(batch_size)]


def assert_exact(run: Path) -> None:
    counts = per_epoch(run, STEPS_PER_EPOCH)
    assert sum(sum(c.values()) for c in counts.values()) == 16 * 8, run.name  # nothing twice
    assert sorted(counts) == [0, 1], run.name
    for epoch, seen in counts.items():
        assert seen == dict.fromkeys(range(RECORDS), 1), (run.name, epoch)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    """The runs of both loops, each first run also kept as it stopped (``*-stopped``), and
    the token loop's (tests/frameworks/token_runs.py, under ``tokens/``)."""
    work = tmp_path_factory.mktemp("recipes")
    shared = Shared(work)
    first, on_2, on_1, dcp = (work / name for name in ("first", "on-2", "on-1", "dcp"))
    tokens = work / "tokens"
    tokens.mkdir()
    then = [
        ("dcp_train.py", ["--out", str(dcp), *FIRST]),
        *token_runs("tokens_torchrun.py", write_corpus(tokens), tokens, "checkpoints/step-3"),
    ]
    shared.run(
        "on-2",
        torchrun_twice,
        "torchrun_train.py",
        2,
        (first, on_2),
        ["--out", str(first), *FIRST],
        resume_args(on_2, 4),
        work / "on-2.log",
        then=then,
    )
    resumes = []  # of the runs that ended, whatever else in their launch failed
    if shared.ended(first):
        shutil.copytree(first, on_1)
        resumes.append(("torchrun_train.py", resume_args(on_1, 8)))
    if shared.ended(dcp):
        shutil.copytree(dcp, work / "dcp-stopped")
        resumes.append(("dcp_train.py", resume_args(dcp, 8)))
    if resumes:
        shared.run("on-1", torchrun_in_turn, 1, resumes, work / "on-1.log")
    return shared


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_plain_loop_resumes_from_its_checkpoint_on_1_and_2_processes(runs: Shared) -> None:
    outs = [runs.work / name for name in ("first", "on-2", "on-1")]
    runs.check("the plain loop's runs", ["on-2", "on-1"], outs)
    assert sum(per_epoch(runs.work / "first", STEPS_PER_EPOCH)[0].values()) == 3 * 8
    assert_exact(runs.work / "on-1")
    assert_exact(runs.work / "on-2")


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_dcp_loop_resumes_from_dcp_load_on_another_world_size(runs: Shared) -> None:
    runs.check("the DCP loop's runs", ["on-2", "on-1"], [runs.work / "dcp"])
    assert sum(per_epoch(runs.work / "dcp-stopped", STEPS_PER_EPOCH)[0].values()) == 3 * 8
    assert_exact(runs.work / "dcp")


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_plain_torchrun_loop_on_token_sequences_resumes_batch_for_batch(
    runs: Shared,
) -> None:
    tokens = runs.work / "tokens"
    runs.check("the token loop's runs", ["on-2"], [tokens / "first", tokens / "second"])
    assert_resumed_exactly(runs.work / "tokens")
    row = records(runs.work / "tokens" / "first", 0)[0]
    assert len(row["input_ids"]) == 2 and len(row["input_ids"][0]) == 32
