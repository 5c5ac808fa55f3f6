"""In-process (one rank) pause and resume: exact weights, refused mismatches, data checks."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils.data as tud
from demo_trial import DemoTrial, Points
from hypothesis import given
from hypothesis import strategies as st
from trial_helpers import as_if_saved_by, identical, metrics, run, weights

from detsamplers import ReproducibilityError
from detsamplers.loader import DataLoader
from detsamplers.trial import Batch, Trainer, _rng, find_latest_checkpoint, init
from detsamplers.trial._data import global_batch


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_paused_and_resumed_run_ends_with_bit_identical_weights(
    tmp_path: Path, num_workers: int
) -> None:
    straight = run(str(tmp_path / "straight"), 11, num_workers=num_workers)
    run(str(tmp_path / "paused"), 5, num_workers=num_workers)
    resumed = run(str(tmp_path / "paused"), 11, resume=True, num_workers=num_workers)
    assert identical(weights(straight), weights(resumed))
    assert resumed.context.get_initial_batch() == 5


@pytest.mark.workers
def test_the_weights_differ_when_the_rng_is_not_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The control for the test above: dropout draws must come from the restored RNG.
    # With workers, since with num_workers=0 every fetch seeds the main process's RNGs
    # (NOTE [ per-batch seeding ]) and the restore would not show.
    straight = run(str(tmp_path / "straight"), 11, num_workers=1)
    run(str(tmp_path / "paused"), 5, num_workers=1)
    monkeypatch.setattr(_rng, "restore", lambda state: None)
    resumed = run(str(tmp_path / "paused"), 11, resume=True, num_workers=1)
    assert not identical(weights(straight), weights(resumed))


def test_a_resumed_run_trains_only_what_is_left(tmp_path: Path) -> None:
    folder = str(tmp_path)
    run(folder, 5)
    resumed = run(folder, 11, resume=True)
    assert resumed.context.current_train_batch() == 10  # the last batch's index, as Determined
    trained = [row["batches_trained"] for row in metrics(folder) if row["type"] == "training"]
    # A window ends at every period (checkpoint 3, validation 4, reporting 5) and at the end.
    assert trained == [3, 4, 5, 6, 8, 9, 10, 11]
    assert find_latest_checkpoint(folder) == os.path.join(folder, "batch-000011")


def test_the_checkpoint_metadata_describes_the_run(tmp_path: Path) -> None:
    run(str(tmp_path), 6)
    with open(tmp_path / "batch-000006" / "metadata.json") as f:
        metadata = json.load(f)
    assert metadata["batches_trained"] == 6
    assert metadata["records_consumed"] == 48
    assert metadata["global_batch_size"] == 8
    assert metadata["world_size"] == 1
    assert metadata["seed"] == metadata["data_seed"] == 1
    assert metadata["dataset_length"] == 40
    assert metadata["files"] == ["rank-0.pth", "state-dict.pth"]
    state = torch.load(tmp_path / "batch-000006" / "rank-0.pth", weights_only=True)
    assert set(state["rng"]) >= {"torch", "numpy", "random"}
    assert state["loader"]["position"] == 6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"records": 48}, "dataset_length is 40 in the checkpoint but 48 here"),
        ({"seed": 2}, "seed is 1 in the checkpoint but 2 here"),
    ],
)
def test_a_resume_that_changes_the_data_is_refused_naming_the_field(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    run(str(tmp_path), 3)
    with pytest.raises(ReproducibilityError, match=message):
        run(str(tmp_path), 6, resume=True, **change)


def test_a_resume_with_another_global_batch_size_continues_at_the_sample_reached(
    tmp_path: Path,
) -> None:
    records = tmp_path / "records"
    records.mkdir()
    run(str(tmp_path), 3, record_dir=str(records))  # 3 batches of 8: samples 0-23
    trial = run(str(tmp_path), 6, resume=True, global_batch_size=12, record_dir=str(records))
    lines = [json.loads(x) for x in (records / "records-rank0.jsonl").read_text().splitlines()]
    assert [line["batch"] for line in lines] == list(range(6))
    seen = [i for line in lines for i in line["indices"]]
    stream = DataLoader(range(40), batch_size=1, shuffle=True, seed=1)
    assert seen == [global_batch(stream, k, 1)[0] for k in range(60)]  # 24 + 3 x 12
    assert sorted(seen[:40]) == list(range(40))  # epoch 0: every record once
    metadata = json.loads((tmp_path / "batch-000006" / "metadata.json").read_text())
    assert (metadata["batches_trained"], metadata["samples_trained"]) == (6, 60)
    assert metadata["global_batch_size"] == 12
    assert trial.context.current_train_epoch() == 60 // 40
    again = run(str(tmp_path), 7, resume=True, global_batch_size=12, record_dir=str(records))
    assert again.context.current_train_batch() == 6  # batch 6 trained, on the saved grid


def test_a_resume_on_another_world_size_checks_the_global_batches(tmp_path: Path) -> None:
    run(str(tmp_path), 3)
    as_if_saved_by(tmp_path / "batch-000003", 2, data_global_digest="0" * 16)
    with pytest.raises(ReproducibilityError, match="data_global_digest is '0000000000000000'"):
        run(str(tmp_path), 6, resume=True)


def test_a_different_world_size_sees_the_same_global_batches() -> None:
    one = DataLoader(Points(40), batch_size=8, shuffle=True, seed=5)
    two = DataLoader(Points(40), batch_size=4, shuffle=True, seed=5)
    assert [global_batch(one, k, 1) for k in range(12)] == [
        global_batch(two, k, 2) for k in range(12)
    ]


@given(
    records=st.integers(1, 50),
    per_slot=st.integers(1, 6),
    world=st.integers(1, 4),
    position=st.integers(0, 40),
    seed=st.integers(0, 2**32),
)
def test_global_batch_k_is_records_k_g_to_k_g_plus_g_of_the_stream_for_any_world_size(
    records: int, per_slot: int, world: int, position: int, seed: int
) -> None:
    size = per_slot * world
    sharded = DataLoader(range(records), batch_size=per_slot, shuffle=True, seed=seed)
    single = DataLoader(range(records), batch_size=1, shuffle=True, seed=seed)
    expected = [global_batch(single, position * size + j, 1)[0] for j in range(size)]
    assert global_batch(sharded, position, world) == expected


def test_a_plain_torch_dataloader_is_refused_with_the_fix(tmp_path: Path) -> None:
    class Plain(DemoTrial):
        def build_training_data_loader(self) -> Any:
            return tud.DataLoader(Points(40), batch_size=8, shuffle=True)

    with pytest.raises(ReproducibilityError, match=r"got DataLoader: .* return detsamplers"):
        run(str(tmp_path), 2, trial_class=Plain)


def test_a_trial_that_disables_the_checks_gets_its_loader_as_is(tmp_path: Path) -> None:
    seen: list[int] = []

    class Own(DemoTrial):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            context.experimental.disable_dataset_reproducibility_checks()

        def build_training_data_loader(self) -> Any:
            seen.append(self.context.get_initial_batch())
            return tud.DataLoader(Points(40), batch_size=8)

    run(str(tmp_path), 2, trial_class=Own)
    run(str(tmp_path), 4, trial_class=Own, resume=True)
    assert seen == [0, 2]


def test_the_training_loader_must_use_the_per_slot_batch_size(tmp_path: Path) -> None:
    class Wrong(DemoTrial):
        def build_training_data_loader(self) -> Any:
            return DataLoader(Points(40), batch_size=3)

    with pytest.raises(ValueError, match=r"get_per_slot_batch_size\(\)=8, but got batch_size=3"):
        run(str(tmp_path), 2, trial_class=Wrong)


def test_test_mode_trains_one_batch_validates_checkpoints_and_returns(tmp_path: Path) -> None:
    trial = run(str(tmp_path), 10, test_mode=True)
    assert trial.context.current_train_batch() == 0  # batch 0 was the one trained
    assert [row["type"] for row in metrics(str(tmp_path))] == ["training", "validation"]
    assert find_latest_checkpoint(str(tmp_path)) == str(tmp_path / "batch-000001")


def test_an_epoch_scheduler_steps_once_per_epoch_of_records(tmp_path: Path) -> None:
    trial = run(str(tmp_path), 10)  # 40 records, 8 per batch: epochs end after batches 5, 10
    assert trial.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.7**2)
    assert trial.context.current_train_epoch() == 1


def test_validation_does_not_move_the_training_rng(tmp_path: Path) -> None:
    class Noisy(DemoTrial):
        def evaluate_batch(self, batch: Any) -> dict[str, Any]:
            torch.rand(100)  # a draw the training stream must not see
            return super().evaluate_batch(batch, 0)

    plain = run(str(tmp_path / "plain"), 9)
    noisy = run(str(tmp_path / "noisy"), 9, trial_class=Noisy)
    assert identical(weights(plain), weights(noisy))


def test_the_trainer_needs_a_trial() -> None:
    with init() as context, pytest.raises(TypeError, match="trial should be a Trial"):
        Trainer(object(), context)  # type: ignore[arg-type]


def test_max_length_must_be_a_batch_or_an_epoch(tmp_path: Path) -> None:
    hparams = {"global_batch_size": 8, "lr": 0.1, "records": 40, "num_workers": 0}
    with (
        init(hparams=hparams) as context,
        pytest.raises(TypeError, match="max_length should be a Batch or an Epoch"),
    ):
        Trainer(DemoTrial(context), context).fit(10, checkpoint_dir=str(tmp_path))  # type: ignore[arg-type]
    assert Batch(1).length == 1
