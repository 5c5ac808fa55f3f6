"""The pytest plugin: installed through its entry point, its fixtures work in a user's tests."""

from __future__ import annotations

import os
from pathlib import Path

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
def test_the_plugin_can_be_turned_off_like_any_other(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user="def test_it(resume_check):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:detsamplers", timeout=180)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'resume_check' not found*"])


FAILING_TESTS = """
import torch.utils.data as tud
from detsamplers.loader import DataLoader


class Counting(tud.Dataset):
    served = 0

    def __len__(self):
        return 30

    def __getitem__(self, index):
        Counting.served += 1
        return {"x": float(index + Counting.served)}


class Box:
    def __init__(self, label):
        self.label = label


def bad(rank, world_size, num_workers):
    return DataLoader(Counting(), batch_size=3, shuffle=True, seed=1, num_workers=num_workers)


def boxes(rank, world_size, num_workers):
    return DataLoader(list(range(12)), batch_size=3, collate_fn=lambda rs: [Box(r) for r in rs])


def make_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size)


def broken(rank, world_size, num_workers):
    raise FileNotFoundError("shard-00001.tar")


def test_bad(resume_check):
    resume_check(bad, pauses=[2], batches=4)


def test_boxes(resume_check):
    resume_check(boxes, pauses=[1], batches=3)


def test_shape(resume_check):
    resume_check(make_loader, pauses=[1], batches=3)


def test_broken(resume_check):
    resume_check(broken, pauses=[1], batches=3)
"""


def _report_of(name: str, call: str, message: str, error: str) -> list[str]:
    return [
        f"*_ {name} _*",
        "",
        "resume_check = <function *>",
        "",
        f"    def {name}(resume_check):",
        f">       {call}",
        f"E       {message}",
        "",
        f"test_failing.py:*: {error}",
    ]


# One run of pytest for the user's passing and failing tests: each run imports torch afresh.
@pytest.mark.subprocess
def test_the_installed_fixtures_pass_a_good_pipeline_and_report_a_failing_one_in_the_users_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    import detsamplers

    # The subprocess imports this checkout's package (and its plugin, through its entry
    # point), wherever it is.
    root = str(Path(detsamplers.__file__).parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(test_user=USER_TESTS, test_trial=TRIAL_TESTS, test_failing=FAILING_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:randomly", "-p", "no:cacheprovider", timeout=180
    )
    # test_user: the good pipeline passes, the bad one fails; test_trial passes; the 4 of
    # test_failing fail.
    result.assert_outcomes(passed=2, failed=5)
    result.stdout.fnmatch_lines(
        [
            "plugins: *detsamplers-*",
            "*AssertionError: resume check failed*differ in batch 0 on rank 0 at *'x'*: "
            "tensor element *0*Likely cause: the dataset keeps state between calls: Counting*",
        ]
    )
    for lines in (
        _report_of(
            "test_bad",
            "resume_check(bad, pauses=[2], batches=4)",
            "AssertionError: resume check failed before any resume: *Likely cause: the dataset "
            "keeps state between calls: Counting*the class attribute *Counting.served*",
            "AssertionError",
        ),
        _report_of(
            "test_boxes",
            "resume_check(boxes, pauses=[1], batches=3)",
            "TypeError: a batch leaf at [[]0[]] is a Box, which the resume check cannot compare*",
            "TypeError",
        ),
        _report_of(
            "test_shape",
            "resume_check(make_loader, pauses=[1], batches=3)",
            "TypeError: factory should take the keyword arguments rank, world_size, num_workers, "
            "but make_loader(dataset, batch_size) cannot*",
            "TypeError",
        ),
    ):
        result.stdout.fnmatch_lines(lines, consecutive=True)
    # What the user's factory raises shows the user's frames only, and says where it was.
    result.stdout.fnmatch_lines(
        [
            ">       resume_check(broken, pauses=[[]1[]], batches=3)",
            "",
            "test_failing.py:*: ",
            "_ _ _ *",
            "",
            "rank = 0, world_size = 1, num_workers = 0",
            "",
            "    def broken(rank, world_size, num_workers):",
            '>       raise FileNotFoundError("shard-00001.tar")',
            "E       FileNotFoundError: shard-00001.tar",
            "E       (raised by the factory broken building rank 0's loader for world size 1, "
            "num_workers=0, in detsamplers.testing's resume check)",
        ],
        consecutive=True,
    )
    assert "detsamplers/testing" not in result.stdout.str()
