"""HF Trainer on 2 processes: exact mid-epoch resume from its checkpoints, no replay.

examples/hf_trainer_train.py (docs/recipes/hf-trainer.md) under torchrun: 64 records, a
global batch of 8, so an epoch is 8 steps. A run with 2 loader workers stops at step 3;
``checkpoint-3`` resumes on 2 processes (in the same launch, tests/frameworks/
run_twice.py) and on 1, to step 16: every record is trained exactly once in each of the
two epochs, and each resumed run trained only what was left. The same launch first checks
(tests/frameworks/hf_checks.py) that the recipe's Trainer refuses ``ignore_data_skip=False``,
and then runs the token recipe and its resume (tests/frameworks/token_runs.py): one launch
of torch and transformers on 2 processes for both recipes.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from .framework_helpers import HERE, Shared, per_epoch, torchrun, torchrun_twice
from .token_runs import assert_resumed_exactly, records, token_runs, write_corpus

# Found, not imported: every process that collects the suite would pay for the import.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)

RECORDS = 64
STEPS_PER_EPOCH = 8


def resume_args(run: Path, batch_size: int) -> list[str]:
    args = ["--out", str(run), "--max-steps", "16", "--batch-size", str(batch_size)]
    return [*args, "--resume", str(run / "checkpoint-3")]


def trained(run: Path) -> int:
    return sum(sum(c.values()) for c in per_epoch(run, STEPS_PER_EPOCH).values())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    """The recipe's runs (``first``, ``resumed-on-2``, ``resumed-on-1``) and the token
    recipe's (tests/frameworks/token_runs.py, under ``tokens/``): one launch on 2
    processes (the recipe's checks, its run and resume, then the token run and resume),
    one on 1."""
    work = tmp_path_factory.mktemp("hf")
    shared = Shared(work)
    first, on_2, on_1 = (work / name for name in ("first", "resumed-on-2", "resumed-on-1"))
    tokens = work / "tokens"
    tokens.mkdir()
    shared.run(
        "on-2",
        torchrun_twice,
        "hf_trainer_train.py",
        2,
        (first, on_2),
        ["--out", str(first), "--max-steps", "3", "--num-workers", "2"],
        resume_args(on_2, 4),
        work / "on-2.log",
        checks=HERE / "hf_checks.py",
        then=token_runs("tokens_hf_trainer.py", write_corpus(tokens), tokens, "checkpoint-3"),
    )
    if shared.ended(first):  # whatever else in its launch failed
        shutil.copytree(first, on_1)
        launch = ("hf_trainer_train.py", 1, resume_args(on_1, 8), work / "on-1.log")
        shared.run("on-1", torchrun, *launch)
    return shared


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_hf_trainer_resumes_mid_epoch_on_1_and_2_processes(runs: Shared) -> None:
    first, on_2, on_1 = (runs.work / name for name in ("first", "resumed-on-2", "resumed-on-1"))
    runs.check("the HF Trainer recipe's runs", ["on-2", "on-1"], [first, on_2, on_1])
    for rank in (0, 1):  # the recipe's Trainer refused ignore_data_skip=False
        assert (first / f"hf-checks-rank{rank}.json").exists()
    assert trained(first) == 3 * 8
    for run in (on_1, on_2):
        assert trained(run) == 16 * 8, run.name  # the resume trained only what was left
        counts = per_epoch(run, STEPS_PER_EPOCH)
        assert sorted(counts) == [0, 1], run.name
        for epoch, seen in counts.items():
            assert seen == dict.fromkeys(range(RECORDS), 1), (run.name, epoch)


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_hf_trainer_on_flattened_token_batches_resumes_batch_for_batch(runs: Shared) -> None:
    tokens = runs.work / "tokens"
    runs.check(
        "the HF Trainer token recipe's runs", ["on-2"], [tokens / "first", tokens / "second"]
    )
    assert_resumed_exactly(runs.work / "tokens")
    row = records(runs.work / "tokens" / "first", 0)[0]
    assert len(row["input_ids"]) == 1 and len(row["input_ids"][0]) == 2 * 32  # one flat row
    assert row["position_ids"][0].count(0) >= 2  # positions restart at each document
