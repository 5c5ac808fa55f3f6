"""Lightning with its default settings on 2 processes: exact epochs, exact mid-epoch resume.

examples/lightning_train.py (docs/recipes/lightning.md) under torchrun: 64 records, a
global batch of 8 (4 per rank, or 8 on one), gradient accumulation over 2 batches, so an
epoch is 4 optimizer steps. A run stops at step 3 (mid-epoch, with 2 loader workers); its
Lightning checkpoint resumes on 2 processes (in the same launch, tests/frameworks/
run_twice.py) and on 1, to the end of the second epoch. The 2-process launch then runs
the token recipe and its resume (tests/frameworks/token_runs.py).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from .framework_helpers import Shared, per_epoch, torchrun, torchrun_twice
from .token_runs import assert_resumed_exactly, token_runs, write_corpus

# Found, not imported: every process that collects the suite would pay for the import.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("lightning") is None, reason="lightning is not installed"
)

RECORDS = 64
STEPS_PER_EPOCH = 4


def resume_args(run: Path, batch_size: int) -> list[str]:
    args = ["--out", str(run), "--max-steps", "8", "--batch-size", str(batch_size)]
    return [*args, "--resume", str(run / "checkpoints" / "step=3.ckpt")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    """The recipe's runs (``first``, ``resumed-on-2``, ``resumed-on-1``) and the token
    recipe's (tests/frameworks/token_runs.py, under ``tokens/``): one launch on 2
    processes (the recipe's run and resume, then the token run and resume), one on 1."""
    work = tmp_path_factory.mktemp("lightning")
    shared = Shared(work)
    first, on_2, on_1 = (work / name for name in ("first", "resumed-on-2", "resumed-on-1"))
    tokens = work / "tokens"
    tokens.mkdir()
    token_args = ("--num-workers", "1")
    shared.run(
        "on-2",
        torchrun_twice,
        "lightning_train.py",
        2,
        (first, on_2),
        ["--out", str(first), "--max-steps", "3", "--num-workers", "2"],
        resume_args(on_2, 4),
        work / "on-2.log",
        then=token_runs(
            "tokens_lightning.py",
            write_corpus(tokens),
            tokens,
            "checkpoints/step=3.ckpt",
            token_args,
        ),
    )
    if shared.ended(first):  # whatever else in its launch failed
        shutil.copytree(first, on_1)
        launch = ("lightning_train.py", 1, resume_args(on_1, 8), work / "on-1.log")
        shared.run("on-1", torchrun, *launch)
    return shared


@pytest.mark.distributed
@pytest.mark.frameworks
def test_lightning_resumes_mid_epoch_from_its_checkpoint_on_1_and_2_processes(
    runs: Shared,
) -> None:
    first, on_2, on_1 = (runs.work / name for name in ("first", "resumed-on-2", "resumed-on-1"))
    runs.check("the Lightning recipe's runs", ["on-2", "on-1"], [first, on_2, on_1])
    assert (first / "checkpoints" / "step=3.ckpt").exists()
    stopped = per_epoch(first, STEPS_PER_EPOCH)
    assert sum(stopped[0].values()) == 3 * 2 * 8  # 3 steps of 2 batches of 8 records
    for run in (on_1, on_2):
        counts = per_epoch(run, STEPS_PER_EPOCH)
        assert sorted(counts) == [0, 1], run.name
        for epoch, seen in counts.items():
            assert seen == dict.fromkeys(range(RECORDS), 1), (run.name, epoch)
    for log in ("on-1.log", "on-2.log"):
        assert "not resumable" not in (runs.work / log).read_text()


@pytest.mark.distributed
@pytest.mark.frameworks
def test_lightning_on_token_sequences_resumes_batch_for_batch(runs: Shared) -> None:
    tokens = runs.work / "tokens"
    runs.check("the Lightning token recipe's runs", ["on-2"], [tokens / "first", tokens / "second"])
    assert_resumed_exactly(runs.work / "tokens")
