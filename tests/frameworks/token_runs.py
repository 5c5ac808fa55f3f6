"""Token streams through the frameworks: the corpus and the checks their resumes share.

Each recipe (docs/recipes/) trains on ``TokenSequences`` of one small corpus under torchrun
on 2 processes: straight to step 6 with a checkpoint at step 3, then (in the same launch,
tests/frameworks/run_twice.py) from a copy of that checkpoint to step 6 again. Every rank
records the batches its model trained on; the resumed steps 3 to 5 are the straight run's,
element for element. The runs share the launch of their framework's own recipe test
(test_torchrun_recipes.py, test_hf_trainer.py, test_lightning.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from .framework_helpers import COPY

VOCAB = 64
STEPS = 6
RESUMED_FROM = 3


def write_corpus(folder: Path) -> Path:
    """A uint16 ``.bin`` of random documents, each ending with token 0."""
    rng = np.random.default_rng(3)
    docs = [np.append(rng.integers(1, VOCAB, size=n - 1), 0) for n in rng.integers(2, 50, 120)]
    path = folder / "train.bin"
    np.concatenate(docs).astype(np.uint16).tofile(path)
    return path


def token_runs(
    script: str, corpus: Path, work: Path, checkpoint: str, extra: tuple[str, ...] = ()
) -> list[tuple[str, list[str]]]:
    """``script``'s straight run into ``work/first`` and its resume from a copy of it,
    ``work/second``, from ``second/<checkpoint>``: runs in turn for a shared launch."""
    first, second = work / "first", work / "second"
    common = ["--corpus", str(corpus), "--max-steps", str(STEPS), *extra]
    resume = ["--resume", str(second / checkpoint)]
    return [
        (script, [*common, "--out", str(first)]),
        (COPY, [str(first), str(second)]),
        (script, [*common, "--out", str(second), *resume]),
    ]


def records(run: Path, rank: int) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in (run / f"tokens-rank{rank}.jsonl").read_text().splitlines()
    ]


def assert_resumed_exactly(work: Path) -> None:
    """``work/second``'s resumed steps are ``work/first``'s, on each rank, element for element."""
    first, second = work / "first", work / "second"
    for rank in (0, 1):
        straight = records(first, rank)
        assert [row["step"] for row in straight] == list(range(STEPS)), rank
        # second is a copy of first (its records too), then the resume appended its own
        resumed = records(second, rank)[len(straight) :]
        assert [row["step"] for row in resumed] == list(range(RESUMED_FROM, STEPS)), rank
        assert resumed == straight[RESUMED_FROM:], rank
