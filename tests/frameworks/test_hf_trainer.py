"""HF Trainer on 2 processes: exact mid-epoch resume from its checkpoints, no replay.

examples/hf_trainer_train.py (docs/recipes/hf-trainer.md) under torchrun: 64 records, a
global batch of 8, so an epoch is 8 steps. A run with 2 loader workers stops at step 3;
resumed from ``checkpoint-3`` on 1 process to step 6, then from ``checkpoint-6`` on 2 to
step 16: every record is trained exactly once in each of the two epochs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .framework_helpers import per_epoch, torchrun

pytest.importorskip("transformers")

RECORDS = 64
STEPS_PER_EPOCH = 8
CHAIN = ((2, 3, 4, 2), (1, 6, 8, 0), (2, 16, 4, 0))  # ranks, max steps, batch size, workers


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_hf_trainer_resumes_mid_epoch_on_2_then_1_then_2_processes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    previous = None
    for ranks, steps, batch_size, workers in CHAIN:
        args = ["--out", str(out), "--max-steps", str(steps), "--batch-size", str(batch_size)]
        args += ["--num-workers", str(workers)]
        if previous is not None:
            args += ["--resume", str(out / f"checkpoint-{previous}")]
        torchrun("hf_trainer_train.py", ranks, args, tmp_path / "log")
        trained = sum(sum(c.values()) for c in per_epoch(out, STEPS_PER_EPOCH).values())
        assert trained == steps * 8  # each launch trained only what was left
        previous = steps
    counts = per_epoch(out, STEPS_PER_EPOCH)
    assert sorted(counts) == [0, 1]
    for epoch, seen in counts.items():
        assert seen == dict.fromkeys(range(RECORDS), 1), epoch
