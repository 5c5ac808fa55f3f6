"""A mixture in the trial loop (NOTE [ trial mixture ]): a curriculum change and an added
dataset resume on any grid as the straight run of the changed mixture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data as tud
from demo_trial import Points
from test_trial_growth import Recorded, run
from trial_helpers import as_if_saved_by, identical, weights

from detsamplers import (
    GrowingShuffleSampler,
    MixSampler,
    ReproducibilityError,
    ReproducibleShuffleSampler,
)
from detsamplers.loader import DataLoader
from detsamplers.trial._data import MapData, grown_data


def mixture(plan: list[Any], extra: int, per_slot: int, mix_seed: int = 0) -> DataLoader:
    """Two datasets of 20 points mixed half and half, then ``plan`` and ``extra`` records."""
    parts: list[Any] = [ReproducibleShuffleSampler(range(20), seed=s) for s in (1, 2)]
    data: list[Any] = [Points(20), Points(20, seed=3)]
    if extra:
        parts.append(ReproducibleShuffleSampler(range(extra), seed=5))
        data.append(Points(extra, seed=4))
    mix = MixSampler(parts, weights=[0.5, 0.5], seed=mix_seed, curriculum=plan)
    return DataLoader(tud.ConcatDataset(data), batch_size=per_slot, sampler=mix, seed=1)


class Mixed(Recorded):
    """The demo trial over :func:`mixture` of the hparams ``plan``, ``extra``, ``mix_seed``."""

    def build_training_data_loader(self) -> DataLoader:
        hparams = self.context.get_hparams()
        per_slot = self.context.get_per_slot_batch_size()
        return mixture(hparams["plan"], hparams["extra"], per_slot, hparams.get("mix_seed", 0))


def mixed(folder: Path, batches: int, **hparams: Any) -> Recorded:
    return run(folder, batches, trial_class=Mixed, **{"growth": False, **hparams})


def stream(trial: Recorded) -> list[int]:
    return [i for _, batch in trial.batches for i in batch]


ONLY_FIRST = [(24, [1, 0])]  # 3 batches of 8 trained, then the first dataset only
ADDED = [(24, [1, 1, 1])]  # 3 batches of 8 trained, then a third dataset of 8 records too


def test_a_curriculum_change_from_the_samples_trained_resumes_in_the_trial(
    tmp_path: Path,
) -> None:
    mixed(tmp_path / "a", 3, resume=False, plan=[], extra=0)
    resumed = mixed(tmp_path / "a", 6, plan=ONLY_FIRST, extra=0)
    straight = mixed(tmp_path / "b", 6, resume=False, plan=ONLY_FIRST, extra=0)
    assert resumed.batches == straight.batches[3:]
    assert identical(weights(resumed), weights(straight))
    assert all(i < 20 for _, batch in resumed.batches for i in batch)


def test_a_curriculum_change_resumes_with_another_global_batch_size(tmp_path: Path) -> None:
    mixed(tmp_path / "a", 3, resume=False, plan=[], extra=0)
    resumed = mixed(tmp_path / "a", 5, plan=ONLY_FIRST, extra=0, global_batch_size=12)  # 24-48
    again = mixed(tmp_path / "a", 7, plan=ONLY_FIRST, extra=0, global_batch_size=8)  # 48-64
    straight = mixed(tmp_path / "b", 8, resume=False, plan=ONLY_FIRST, extra=0)
    assert stream(resumed) + stream(again) == stream(straight)[24:]
    assert [len(b) for _, b in resumed.batches] == [12, 12]


def test_a_curriculum_change_on_another_world_size_loads_rank_0s_loader_state(
    tmp_path: Path,
) -> None:
    # The checkpoint claims 2 ranks: this one-rank run loads rank 0's saved loader state,
    # which the loader checks on any grid (the law on simulated ranks is tested below).
    mixed(tmp_path / "a", 3, resume=False, plan=[], extra=0)
    as_if_saved_by(tmp_path / "a" / "batch-000003", 2, data_global_digest="0" * 16)
    resumed = mixed(tmp_path / "a", 6, plan=ONLY_FIRST, extra=0)
    straight = mixed(tmp_path / "b", 6, resume=False, plan=ONLY_FIRST, extra=0)
    assert resumed.batches == straight.batches[3:]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"plan": [(16, [1, 0])], "extra": 0},
            r"the mixture's curriculum changed before position 24, which the saved run had "
            r"already reached \(mix curriculum is \[\] in the state but \[\[16, ",
        ),
        (
            {"plan": [(16, [1, 1, 1])], "extra": 8, "growth": True},
            r"samplers\[2:\] enter the mixture at position 16 .* start that segment at "
            r"position 24 or later",
        ),
        ({"plan": ONLY_FIRST, "extra": 0, "mix_seed": 9}, r"mix seed is 0 in the state but 9"),
    ],
)
@pytest.mark.parametrize("global_batch_size", [8, 12])
def test_a_changed_past_of_the_mixture_is_refused_on_any_grid_naming_the_change(
    tmp_path: Path, changes: dict[str, Any], message: str, global_batch_size: int
) -> None:
    mixed(tmp_path, 3, resume=False, plan=[], extra=0)
    with pytest.raises(ReproducibilityError, match=message):
        mixed(tmp_path, 5, global_batch_size=global_batch_size, **changes)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ranks_of_any_world_size_resume_a_changed_mixture_from_rank_0s_state(world: int) -> None:
    # The trainer's steps on simulated ranks: states saved on 2 ranks at 8 a batch (24
    # samples trained); each rank of ``world`` loads rank 0's state into the changed
    # mixture at 12 a batch, and the global batches are the straight run's from sample 24.
    saved = MapData(mixture([], 0, 4))
    state = saved.state(24, 2, 0)
    checkpoint = {"dataset_length": 40, "samples_trained": 24}
    for plan, extra in ((ONLY_FIRST, 0), (ADDED, 8)):
        ranks = []
        for rank in range(world):
            user = MapData(mixture(plan, extra, 12 // world))
            data = grown_data(user, checkpoint, 24, bool(extra), "ckpt")
            assert isinstance(data, MapData)
            built = data.build(24, world, rank)
            data.load(built, state)
            batches = iter(built.batch_sampler)
            ranks.append([[int(i) for i in next(batches)] for _ in range(4)])
        shares = [[ranks[r][k] for r in range(world)] for k in range(4)]
        got = [[s[j] for j in range(len(share[0])) for s in share] for share in shares]
        straight = mixture(plan, extra, 12).get_data_loader(True, 0, 1, 0, skip_samples=24)
        batches = iter(straight.batch_sampler)
        assert got == [[int(i) for i in next(batches)] for _ in range(4)], (plan, world)


def test_a_dataset_added_to_a_mixture_resumes_bit_identically_to_the_straight_run(
    tmp_path: Path,
) -> None:
    mixed(tmp_path / "a", 3, resume=False, plan=[], extra=0)
    added = mixed(tmp_path / "a", 5, plan=ADDED, extra=8, growth=True)
    later = mixed(tmp_path / "a", 9, plan=ADDED, extra=8)  # the history from the checkpoint
    straight = mixed(tmp_path / "b", 9, resume=False, plan=ADDED, extra=8)
    assert added.batches + later.batches == straight.batches[3:]
    assert identical(weights(later), weights(straight))
    # An epoch is len(dataset) samples from its first one: 40 + 8 from the resume on.
    assert [e for e, _ in straight.batches] == [0] * 6 + [1] * 3
    metadata = json.loads((tmp_path / "a" / "batch-000005" / "metadata.json").read_text())
    assert metadata["dataset_growth"] == [[0, 40], [24, 48]]
    assert metadata["dataset_length"] == 48
    assert (metadata["epoch_index"], metadata["epoch_start_sample"]) == (0, 0)


def test_a_dataset_added_with_another_global_batch_size_follows_the_straight_run(
    tmp_path: Path,
) -> None:
    mixed(tmp_path / "a", 3, resume=False, plan=[], extra=0)
    added = mixed(tmp_path / "a", 5, plan=ADDED, extra=8, growth=True, global_batch_size=12)
    straight = mixed(tmp_path / "b", 6, resume=False, plan=ADDED, extra=8)
    assert stream(added) == stream(straight)[24:]
    assert [e for e, _ in added.batches] == [0, 0]  # 24 + 2 x 12 = 48: epoch 0 ends there


def test_a_dataset_added_to_a_mixture_needs_the_opt_in_naming_it(tmp_path: Path) -> None:
    mixed(tmp_path, 3, resume=False, plan=[], extra=0)
    with pytest.raises(
        ReproducibilityError,
        match=r"dataset_length is 40 in the checkpoint but 48 here, over a MixSampler; .* "
        r"Pass Trainer.fit\(..., dataset_growth=True\) to record the 8 records added at "
        r"sample 24",
    ):
        mixed(tmp_path, 6, plan=ADDED, extra=8)


class GrownComponent(Recorded):
    """Two datasets of 20 points; the second, last, grows to 28 where sample 24 left it."""

    def build_training_data_loader(self) -> DataLoader:
        first = ReproducibleShuffleSampler(range(20), seed=1)
        second = GrowingShuffleSampler(tud.SequentialSampler(range(20)), 2, initial_length=20)
        records = 20
        if self.context.get_hparam("grow"):  # the records the second had given at sample 24
            at = MixSampler([first, second], [0.5, 0.5], 0).progress(24)["consumed"][1]
            records, growth = 28, [(at, 28)]
            base = tud.SequentialSampler(range(28))
            second = GrowingShuffleSampler(base, 2, initial_length=20, growth=growth)
        mix = MixSampler([first, second], weights=[0.5, 0.5], seed=0)
        data = tud.ConcatDataset([Points(20), Points(records, seed=3)])
        return DataLoader(data, batch_size=self.context.get_per_slot_batch_size(), sampler=mix)


def test_a_mixture_component_grown_at_a_resume_follows_the_straight_run(tmp_path: Path) -> None:
    run(tmp_path / "a", 3, resume=False, growth=False, trial_class=GrownComponent, grow=False)
    grown = run(tmp_path / "a", 6, trial_class=GrownComponent, grow=True, global_batch_size=12)
    straight = run(tmp_path / "b", 8, resume=False, trial_class=GrownComponent, grow=True)
    assert stream(grown) == stream(straight)[24:60]
    assert [e for e, _ in grown.batches] == [0, 0, 1]  # epoch 0 ends at 48 = 40 + 8
