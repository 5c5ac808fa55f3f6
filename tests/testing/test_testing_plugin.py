"""The pytest plugin: installed through its entry point, its fixtures work in a user's tests."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

TRIAL_TESTS = """
import torch
from detsamplers.loader import DataLoader
from detsamplers.trial import Trial


class Fit(Trial):
    def __init__(self, context):
        super().__init__(context)
        self.w = context.wrap_model(torch.nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.w.parameters(), 0.1))

    def build_training_data_loader(self):
        return DataLoader(torch.arange(8.0).view(8, 1), batch_size=2, shuffle=True)

    def train_batch(self, batch, epoch_idx, batch_idx):
        loss = (self.w(batch) - 1).pow(2).mean()
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return loss


def test_fit_resumes(trial_resume_check, tmp_path):
    trial_resume_check(Fit, {"global_batch_size": 2}, pauses=[1, 2], batches=4)
    assert list(tmp_path.iterdir())
"""

USER_TESTS = """
import torch.utils.data as tud
from detsamplers.loader import DataLoader
from detsamplers.testing import Config


class Plain(tud.Dataset):
    def __len__(self):
        return 30

    def __getitem__(self, index):
        return {"x": float(index)}


class Counting(Plain):
    served = 0

    def __getitem__(self, index):
        Counting.served += 1
        return {"x": float(index + Counting.served)}


def good(rank, world_size, num_workers):
    return DataLoader(Plain(), batch_size=3, shuffle=True, seed=1, num_workers=num_workers)


def bad(rank, world_size, num_workers):
    return DataLoader(Counting(), batch_size=3, shuffle=True, seed=1, num_workers=num_workers)


def test_good_pipeline(resume_check):
    report = resume_check(good, pauses=[1, 3], batches=5, resume=Config(world_size=2))
    assert report.pauses == [1, 3]


def test_bad_pipeline(resume_check):
    resume_check(bad, pauses=[2], batches=4)
"""


@pytest.mark.subprocess
def test_the_fixtures_come_from_the_installed_entry_point(pytester: pytest.Pytester) -> None:
    # One subprocess for both fixtures: each run of pytest imports torch afresh.
    pytester.makepyfile(test_user=USER_TESTS, test_trial=TRIAL_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-p", "no:cacheprovider", timeout=180
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "plugins: *detsamplers-*",
            "*AssertionError: resume check failed*differ in batch 0 on rank 0 at *'x'*: "
            "tensor element *0*Likely cause: the dataset keeps state between calls: Counting*",
        ]
    )


@pytest.mark.subprocess
def test_the_plugin_can_be_turned_off_like_any_other(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_it(resume_check):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:detsamplers", timeout=180)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'resume_check' not found*"])
