"""A mixture in the trial loop: a curriculum change resumes, an added dataset is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch.utils.data as tud
from test_trial_growth import Recorded, run

from detsamplers import MixSampler, ReproducibilityError, ReproducibleShuffleSampler
from detsamplers.loader import DataLoader
from detsamplers.trial._demo_trial import Points


class Mixed(Recorded):
    """Two datasets of 20 points mixed half and half, then ``plan`` and ``extra`` records."""

    def build_training_data_loader(self) -> DataLoader:
        plan, extra = self.context.get_hparam("plan"), self.context.get_hparam("extra")
        parts: list[Any] = [ReproducibleShuffleSampler(range(20), seed=s) for s in (1, 2)]
        data: list[Any] = [Points(20), Points(20, seed=3)]
        if extra:
            parts.append(ReproducibleShuffleSampler(range(extra), seed=5))
            data.append(Points(extra, seed=4))
        mix = MixSampler(parts, weights=[0.5, 0.5], seed=0, curriculum=plan)
        size = self.context.get_per_slot_batch_size()
        return DataLoader(tud.ConcatDataset(data), batch_size=size, sampler=mix)


def test_a_curriculum_change_from_the_samples_trained_resumes_in_the_trial(
    tmp_path: Path,
) -> None:
    plan = [(24, [1, 0])]  # 3 batches of 8 trained, then the first dataset only
    run(tmp_path / "a", 3, resume=False, growth=False, trial_class=Mixed, plan=[], extra=0)
    resumed = run(tmp_path / "a", 6, growth=False, trial_class=Mixed, plan=plan, extra=0)
    straight = run(
        tmp_path / "b", 6, resume=False, growth=False, trial_class=Mixed, plan=plan, extra=0
    )
    assert resumed.batches == straight.batches[3:]
    assert all(i < 20 for _, batch in resumed.batches for i in batch)


def test_a_dataset_added_to_a_mixture_is_refused_in_the_trial_naming_the_way_out(
    tmp_path: Path,
) -> None:
    run(tmp_path, 3, resume=False, growth=False, trial_class=Mixed, plan=[], extra=0)
    with pytest.raises(
        ReproducibilityError,
        match=r"dataset_length is 40 in the checkpoint but 48 here, over a MixSampler: the "
        r"trial loop does not offer a dataset added to a mixture",
    ):
        run(tmp_path, 6, growth=False, trial_class=Mixed, plan=[(24, [1, 1, 1])], extra=8)
