"""check_trial_resume: bit-identical weights, or the first tensor that differs."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from detsamplers.loader import DataLoader
from detsamplers.testing import check_trial_resume
from detsamplers.trial import Trial, TrialContext

HPARAMS = {"global_batch_size": 4}


class Noisy(Trial):
    """A small regression whose training step adds noise from torch's global RNG."""

    def __init__(self, context: TrialContext) -> None:
        super().__init__(context)
        torch.manual_seed(0)
        self.model = context.wrap_model(torch.nn.Linear(3, 2))
        self.opt = context.wrap_optimizer(torch.optim.Adam(self.model.parameters(), lr=0.01))

    def build_training_data_loader(self) -> Any:
        data = torch.randn(20, 3, generator=torch.Generator().manual_seed(1))
        return DataLoader(data, batch_size=self.context.get_per_slot_batch_size(), shuffle=True)

    def noise(self, shape: torch.Size) -> torch.Tensor:
        return torch.randn(shape)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        out = self.model(batch + self.noise(batch.shape))
        loss = out.pow(2).mean()
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return loss


class OwnGenerator(Noisy):
    """The fault: noise from a generator of its own, which no checkpoint holds."""

    def __init__(self, context: TrialContext) -> None:
        super().__init__(context)
        self.generator = torch.Generator().manual_seed(5)

    def noise(self, shape: torch.Size) -> torch.Tensor:
        return torch.randn(shape, generator=self.generator)


def test_a_trial_whose_draws_are_restored_resumes_bit_identically(tmp_path: Any) -> None:
    check_trial_resume(Noisy, HPARAMS, pauses=[1, 3], batches=4, workdir=str(tmp_path))


def test_a_trial_with_a_generator_of_its_own_is_caught_at_the_first_tensor() -> None:
    with pytest.raises(
        AssertionError,
        match="trial resume check failed: OwnGenerator paused after batch 2 and resumed to 5 "
        r"ends with another model 0 state than a straight run, at \['weight'\]: tensor "
        r"element \[0, 0\]: expected .*, got .*a generator of its own",
    ):
        check_trial_resume(OwnGenerator, HPARAMS, pauses=[2], batches=5)


def test_bad_pauses_name_the_range() -> None:
    with pytest.raises(ValueError, match=r"pauses should be one or more batches in \[1, 5\)"):
        check_trial_resume(Noisy, HPARAMS, pauses=[5], batches=5)
