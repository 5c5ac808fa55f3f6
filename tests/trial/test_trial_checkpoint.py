"""Checkpoint folders: only complete ones count, and a crash mid-write loses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from demo_trial import DemoTrial
from trial_helpers import identical, run, weights

from detsamplers.trial import _checkpoint, find_latest_checkpoint, load_trial_from_checkpoint_path

HERE = os.path.dirname(os.path.abspath(__file__))


def test_find_latest_checkpoint_passes_over_incomplete_folders(tmp_path: Path) -> None:
    run(str(tmp_path), 4)  # checkpoints at 3 and 4
    assert find_latest_checkpoint(str(tmp_path)) == str(tmp_path / "batch-000004")
    (tmp_path / "batch-000009").mkdir()  # renamed into place, no metadata yet
    (tmp_path / ".batch-000010.tmp").mkdir()
    broken = tmp_path / "batch-000008"
    broken.mkdir()
    (broken / "metadata.json").write_text("{not json")
    missing = tmp_path / "batch-000007"  # complete metadata, files gone
    missing.mkdir()
    metadata = json.loads((tmp_path / "batch-000004" / "metadata.json").read_text())
    counts = {"batches_trained": 7, "samples_trained": 56, "records_consumed": 56}
    (missing / "metadata.json").write_text(json.dumps({**metadata, **counts}))
    with pytest.warns(UserWarning, match=r"passing over \S+batch-000008: .*not valid JSON"):
        assert find_latest_checkpoint(str(tmp_path)) == str(tmp_path / "batch-000004")
    os.remove(tmp_path / "batch-000004" / "rank-0.pth")
    with pytest.warns(
        UserWarning,
        match=r"passing over \S+batch-000004: .*rank-0.pth, listed .*, is gone",
    ):
        assert find_latest_checkpoint(str(tmp_path)) == str(tmp_path / "batch-000003")
    assert find_latest_checkpoint(str(tmp_path / "nowhere")) is None


@pytest.mark.parametrize("point", ["_write_torch", "_write_json"])
def test_an_exception_during_a_checkpoint_write_leaves_the_previous_one_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    folder = str(tmp_path / "run")
    straight = run(str(tmp_path / "straight"), 8)
    run(folder, 3)  # a complete checkpoint at batch 3
    writer = getattr(_checkpoint, point)

    def crash(obj: Any, path: str) -> None:
        if "batch-000006" in path:
            with open(path, "wb") as f:
                f.write(b"half")
            raise OSError("disk went away")
        writer(obj, path)

    monkeypatch.setattr(_checkpoint, point, crash)
    with pytest.raises(OSError, match="disk went away"):
        run(folder, 8, resume=True)
    monkeypatch.undo()  # the validation at 4 checkpointed too (checkpoint_policy "all")
    assert find_latest_checkpoint(folder) == os.path.join(folder, "batch-000004")
    resumed = run(folder, 8, resume=True)
    assert identical(weights(straight), weights(resumed))


@pytest.mark.subprocess
def test_a_process_killed_while_writing_a_checkpoint_leaves_the_previous_one(
    tmp_path: Path,
) -> None:
    folder = str(tmp_path)
    script = os.path.join(HERE, "trial_worker.py")
    args = [f"--checkpoint-dir={folder}", "--max-batches=8", "--checkpoint-every=3"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRIAL_CRASH_IN_CHECKPOINT": "batch-000006"}
    done = subprocess.run(
        [sys.executable, script, *args], env=env, capture_output=True, check=False
    )
    assert done.returncode == 3, done.stderr.decode()[-2000:]
    assert (tmp_path / ".batch-000006.tmp").is_dir()
    assert find_latest_checkpoint(folder) == str(tmp_path / "batch-000003")
    trial = load_trial_from_checkpoint_path(str(tmp_path / "batch-000003"), DemoTrial)
    assert trial.context.get_hparam("global_batch_size") == 16


def test_load_trial_from_checkpoint_path_refuses_an_incomplete_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="path should be a complete checkpoint folder"):
        load_trial_from_checkpoint_path(str(tmp_path), DemoTrial)


def test_a_checkpoint_at_an_existing_step_replaces_it_whole(tmp_path: Path) -> None:
    run(str(tmp_path), 3)
    again = run(str(tmp_path), 3, seed=4)
    assert find_latest_checkpoint(str(tmp_path)) == str(tmp_path / "batch-000003")
    loaded = load_trial_from_checkpoint_path(str(tmp_path / "batch-000003"), DemoTrial)
    assert loaded.context.get_trial_seed() == 4
    assert identical(weights(again), weights(loaded))
    assert sorted(os.listdir(tmp_path)) == ["batch-000003", "metrics.jsonl"]
