from __future__ import annotations

import inspect

import pytest
import torch

import detsamplers.trial
from detsamplers.__main__ import main
from detsamplers.trial import (
    Batch,
    DistributedContext,
    Epoch,
    LRScheduler,
    TrialContext,
    init,
)


def test_the_public_names_are_exported_in_a_sorted_all() -> None:
    names = detsamplers.trial.__all__
    assert names == sorted(names)
    public = {
        name
        for name, value in vars(detsamplers.trial).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public - {"annotations"} == set(names)


def test_every_public_name_has_a_docstring_with_an_example() -> None:
    # Data (Determined's LOG_FORMAT string and TorchData type) has no docstring of its own.
    data = {"LOG_FORMAT", "TorchData"}
    for name in sorted(set(detsamplers.trial.__all__) - data):
        doc = inspect.getdoc(getattr(detsamplers.trial, name)) or ""
        assert ">>>" in doc, f"{name} has no runnable example"


def test_init_without_torchrun_is_a_single_process_seeded_from_the_trial_seed() -> None:
    with init(hparams={"global_batch_size": 4}, seed=3) as context:
        first = torch.rand(2)
        assert context.distributed.get_size() == 1
        assert not torch.distributed.is_initialized()
    with init(seed=3):
        assert torch.equal(first, torch.rand(2))
    with init() as context:
        assert context.get_trial_seed() == 0


def test_the_per_slot_batch_size_is_the_global_batch_divided_by_the_world_size() -> None:
    context = TrialContext({"global_batch_size": 12}, 0, DistributedContext(1, 3))
    assert context.get_per_slot_batch_size() == 4
    odd = TrialContext({"global_batch_size": 10}, 0, DistributedContext(1, 3))
    with pytest.raises(ValueError, match=r"global_batch_size=10 with world size 3"):
        odd.get_per_slot_batch_size()


def test_a_missing_hparam_names_the_ones_there_are() -> None:
    context = TrialContext({"lr": 0.1}, 0, DistributedContext())
    with pytest.raises(KeyError, match=r"'momentum' is not set; the hyperparameters are \['lr'\]"):
        context.get_hparam("momentum")
    with pytest.raises(ValueError, match=r"no 'global_batch_size' and no training loader"):
        context.get_global_batch_size()


def test_arguments_are_checked_before_anything_is_stored() -> None:
    with pytest.raises(ValueError, match=r"rank should be an integer in \[0, size\)"):
        DistributedContext(rank=2, size=2)
    with pytest.raises(TypeError, match="length should be a positive integer value"):
        Batch(True)
    with pytest.raises(ValueError, match="length=0"):
        Epoch(0)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    with pytest.raises(TypeError, match=r"step_mode should be an LRScheduler\.StepMode"):
        LRScheduler(scheduler, "epoch")  # type: ignore[arg-type]


def test_step_optimizer_clips_steps_and_zeroes_the_gradients() -> None:
    context = TrialContext({}, 0, DistributedContext())
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = context.wrap_optimizer(torch.optim.SGD([weight], lr=1.0))
    context.backward((weight - 10).pow(2).sum())  # gradient -20
    clipped = []
    context.step_optimizer(
        optimizer, clip_grads=lambda ps: clipped.append(torch.nn.utils.clip_grad_norm_(ps, 1.0))
    )
    assert weight.item() == pytest.approx(1.0) and float(clipped[0]) == pytest.approx(20.0)
    assert weight.grad is None or not weight.grad.any()
    with pytest.raises(ValueError, match=r"wrapped with context\.wrap_optimizer"):
        context.step_optimizer(torch.optim.SGD([weight], lr=1.0))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--pause-at", "60"], "pause_at should be in (0, max_batches)"),
        (["demo", "--resume-ranks", "3"], "resume_ranks should divide the global batch of 16"),
        (["demo", "--ranks", "0"], "ranks should divide the global batch"),
    ],
)
def test_the_demo_command_refuses_bad_flags_before_launching_anything(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
