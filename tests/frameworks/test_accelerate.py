"""Accelerate on 2 processes: never sharded twice, exact mid-epoch resume via save_state.

examples/accelerate_train.py (docs/recipes/accelerate.md) under torchrun: 64 records, a
global batch of 8, so an epoch is 8 steps. A run with 2 loader workers stops at step 3;
its ``save_state`` folder resumes on 1 process and on 2, to the end of the second epoch.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from detsamplers.loader import DataLoader

from .framework_helpers import per_epoch, torchrun

accelerate = pytest.importorskip("accelerate")

RECORDS = 64
STEPS_PER_EPOCH = 8


def test_prepare_on_several_processes_refuses_to_shard_the_loader_again() -> None:
    from accelerate.data_loader import prepare_data_loader

    train = DataLoader(range(16), batch_size=2).get_data_loader(repeat=True, num_replicas=2, rank=1)
    with pytest.raises(ValueError, match=r"should not shard .*register_for_checkpointing"):
        prepare_data_loader(train, num_processes=2, process_index=1)


@pytest.mark.distributed
@pytest.mark.frameworks
def test_accelerate_resumes_mid_epoch_from_save_state_on_1_and_2_processes(
    tmp_path: Path,
) -> None:
    first = tmp_path / "first"
    torchrun(
        "accelerate_train.py",
        2,
        ["--out", str(first), "--max-steps", "3", "--num-workers", "2"],
        tmp_path / "first.log",
    )
    assert sum(per_epoch(first, STEPS_PER_EPOCH)[0].values()) == 3 * 8
    for ranks, batch_size in ((1, 8), (2, 4)):
        run = tmp_path / f"resumed-on-{ranks}"
        shutil.copytree(first, run)
        args = ["--out", str(run), "--max-steps", "16", "--batch-size", str(batch_size)]
        args += ["--resume", str(run / "checkpoints" / "step-3")]
        torchrun("accelerate_train.py", ranks, args, tmp_path / f"resumed-on-{ranks}.log")
        counts = per_epoch(run, STEPS_PER_EPOCH)
        assert sorted(counts) == [0, 1], ranks
        for epoch, seen in counts.items():
            assert seen == dict.fromkeys(range(RECORDS), 1), (ranks, epoch)
