"""Lightning with its default settings on 2 processes: exact epochs, exact mid-epoch resume.

examples/lightning_train.py (docs/recipes/lightning.md) under torchrun: 64 records, a
global batch of 8 (4 per rank, or 8 on one), gradient accumulation over 2 batches, so an
epoch is 4 optimizer steps. A run stops at step 3 (mid-epoch, with 2 loader workers); its
Lightning checkpoint resumes on 1 process and on 2, to the end of the second epoch.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .framework_helpers import per_epoch, torchrun

pytest.importorskip("lightning")

RECORDS = 64
STEPS_PER_EPOCH = 4


@pytest.mark.distributed
@pytest.mark.frameworks
def test_lightning_resumes_mid_epoch_from_its_checkpoint_on_1_and_2_processes(
    tmp_path: Path,
) -> None:
    first = tmp_path / "first"
    torchrun(
        "lightning_train.py",
        2,
        ["--out", str(first), "--max-steps", "3", "--num-workers", "2"],
        tmp_path / "first.log",
    )
    checkpoint = first / "checkpoints" / "step=3.ckpt"
    assert checkpoint.exists()
    stopped = per_epoch(first, STEPS_PER_EPOCH)
    assert sum(stopped[0].values()) == 3 * 2 * 8  # 3 steps of 2 batches of 8 records

    for ranks, batch_size in ((1, 8), (2, 4)):
        run = tmp_path / f"resumed-on-{ranks}"
        shutil.copytree(first, run)
        torchrun(
            "lightning_train.py",
            ranks,
            [
                "--out",
                str(run),
                "--max-steps",
                "8",
                "--batch-size",
                str(batch_size),
                "--resume",
                str(run / "checkpoints" / "step=3.ckpt"),
            ],
            tmp_path / f"resumed-on-{ranks}.log",
        )
        counts = per_epoch(run, STEPS_PER_EPOCH)
        assert sorted(counts) == [0, 1], ranks
        for epoch, seen in counts.items():
            assert seen == dict.fromkeys(range(RECORDS), 1), (ranks, epoch)
        log = (tmp_path / f"resumed-on-{ranks}.log").read_text()
        assert "not resumable" not in log
