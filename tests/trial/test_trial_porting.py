"""A Determined trial runs unedited: each behaviour in the seeds' own code shape.

Where Determined has the rule as code (its epoch length, its scheduler stepping, its
callback class, its step_optimizer), the test runs Determined's code next to ours.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.utils.data as tud
from determined import core as det_core
from determined import pytorch as det_pytorch
from determined import util as det_util
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from detsamplers.loader import DataLoader
from detsamplers.trial import (
    Batch,
    Callback,
    Epoch,
    LRScheduler,
    Trainer,
    Trial,
    init,
)
from detsamplers.trial._lr_scheduler import auto_step
from detsamplers.trial._trial import takes_batch_idx
from detsamplers.trial._units import epoch_length


def rows(folder: Path) -> list[dict[str, Any]]:
    with open(folder / "metrics.jsonl") as f:
        return [json.loads(line) for line in f]


def regression(records: int) -> tud.TensorDataset:
    x = torch.linspace(-1, 1, records).unsqueeze(1)
    return tud.TensorDataset(x, 3 * x + 1)


class Line(Trial):
    """The seeds' shape: wrap in __init__, backward and step in train_batch."""

    records = 40

    def __init__(self, context: Any) -> None:
        self.context = context
        self.model = context.wrap_model(nn.Linear(1, 1))
        self.optimizer = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), 0.1))

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(
            regression(self.records), batch_size=self.context.get_per_slot_batch_size()
        )

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(regression(10), batch_size=4)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        return {"validation_loss": nn.functional.mse_loss(self.model(x), y)}


FOUR = Batch(4)


def fit(trial_class: type[Trial], folder: Path, length: Any = FOUR, **kwargs: Any) -> Any:
    hparams = kwargs.pop("hparams", {"global_batch_size": 8})
    init_kwargs = {k: kwargs.pop(k) for k in ("aggregation_frequency",) if k in kwargs}
    with init(hparams=hparams, seed=1, **init_kwargs) as context:
        trial = trial_class(context)
        Trainer(trial, context).fit(length, checkpoint_dir=str(folder), **kwargs)
    return trial


# Breaks ported code today.


def test_evaluate_batch_gets_batch_idx_when_it_takes_it(tmp_path: Path) -> None:
    seen: list[int] = []

    class WithIndex(Line):
        def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            seen.append(batch_idx)
            return super().evaluate_batch(batch, batch_idx)

    fit(WithIndex, tmp_path)
    assert seen == [0, 1, 2]  # 10 validation records in batches of 4, after training


def test_an_evaluate_batch_without_batch_idx_still_runs(tmp_path: Path) -> None:
    class Seed000(Line):
        def evaluate_batch(self, batch: Any) -> dict[str, Any]:  # type: ignore[override]
            x, y = batch
            return {"validation_loss": nn.functional.mse_loss(self.model(x), y).item()}

    fit(Seed000, tmp_path)
    assert [r["type"] for r in rows(tmp_path)] == ["training", "validation"]


def test_batch_idx_detection_is_determineds_has_param_rule() -> None:
    class Shapes:
        def named(self, batch: Any, batch_idx: int) -> None: ...
        def positional(self, batch: Any, index: int) -> None: ...
        def one(self, batch: Any) -> None: ...
        def keyword_only(self, batch: Any, *, batch_idx: int) -> None: ...

    for name in ("named", "positional", "one", "keyword_only"):
        method = getattr(Shapes(), name)
        assert takes_batch_idx(method) == det_util.has_param(method, "batch_idx", 2), name


def test_train_batch_may_return_the_loss_tensor_alone(tmp_path: Path) -> None:
    class Bare(Line):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            return super().train_batch(batch, epoch_idx, batch_idx)["loss"]

    fit(Bare, tmp_path)
    assert set(rows(tmp_path)[0]["metrics"]) == {"loss"}


class Amp(Line):
    """Seed 004's AMP pattern, on CPU: GradScaler("cpu") and bfloat16 autocast."""

    def __init__(self, context: Any) -> None:
        self.scaler = context.wrap_scaler(torch.amp.GradScaler("cpu", init_scale=256.0))
        super().__init__(context)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        x, y = batch
        with torch.autocast("cpu"):
            output = self.model(x)
        loss = nn.functional.mse_loss(output.float(), y)
        self.context.backward(self.scaler.scale(loss))
        self.context.step_optimizer(self.optimizer, scaler=self.scaler)
        self.scaler.update()
        return {"loss": loss}


@pytest.mark.parametrize("aggregation_frequency", [1, 2])
def test_seed_004s_amp_pattern_trains_and_checkpoints_the_scaler(
    tmp_path: Path, aggregation_frequency: int
) -> None:
    trial = fit(Amp, tmp_path, aggregation_frequency=aggregation_frequency)
    assert trial.scaler.is_enabled()  # a real, enabled CPU scaler, not a disabled CUDA one
    assert trial.model.weight.dtype == torch.float32
    state = torch.load(tmp_path / "batch-000004" / "state-dict.pth", weights_only=False)
    assert state["scalers_state_dict"] == [trial.scaler.state_dict()]
    assert state["scalers_state_dict"][0]["scale"] == 256.0  # no inf/nan: never backed off


class Spy:
    """A scaler that records what is called on it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def scale(self, loss: Any) -> Any:
        return loss

    def unscale_(self, optimizer: Any) -> None:
        self.calls.append("unscale_")

    def step(self, optimizer: Any) -> None:
        self.calls.append("step")
        optimizer.step()

    def update(self, new_scale: Any = None) -> None:
        self.calls.append("update")

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def determined_context(aggregation_frequency: int) -> Any:
    core = SimpleNamespace(distributed=det_core.DummyDistributedContext())
    return det_pytorch.PyTorchTrialContext(
        core_context=core,
        trial_seed=0,
        hparams={"global_batch_size": 4},
        slots_per_trial=1,
        num_gpus=0,
        exp_conf=None,
        aggregation_frequency=aggregation_frequency,
        steps_completed=0,
        managed_training=True,
        debug_enabled=False,
    )


@pytest.mark.parametrize("aggregation_frequency", [1, 2, 3])
@pytest.mark.parametrize("clip", [False, True])
def test_step_optimizer_calls_the_scaler_exactly_as_determined_does(
    aggregation_frequency: int, clip: bool
) -> None:
    clip_grads = (lambda params: None) if clip else None
    calls = []
    for make in (determined_context, None):
        with init(
            hparams={"global_batch_size": 4}, aggregation_frequency=aggregation_frequency
        ) as ours:
            context = make(aggregation_frequency) if make else ours
            spy = Spy()
            context.wrap_scaler(spy)
            model = context.wrap_model(nn.Linear(1, 1))
            optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), 0.1))
            for batch_idx in range(6):
                context._current_batch_idx = batch_idx
                model(torch.ones(2, 1)).sum().backward()
                context.step_optimizer(optimizer, clip_grads=clip_grads, scaler=spy)
            calls.append(spy.calls)
    assert calls[0] == calls[1]
    assert calls[1] == ["step"] * (6 // aggregation_frequency)  # never update, never unscale_


def test_use_amp_autocasts_scales_steps_and_updates_one_scaler(tmp_path: Path) -> None:
    class Auto(Line):
        def __init__(self, context: Any) -> None:
            context.experimental.use_amp()
            super().__init__(context)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            output = self.model(batch[0])
            assert output.dtype == torch.float32  # cast back after the bfloat16 forward
            return super().train_batch(batch, epoch_idx, batch_idx)

    trial = fit(Auto, tmp_path)
    scaler = trial.context.scalers[0]
    assert scaler.is_enabled() and scaler.get_scale() == 65536.0
    assert scaler.scaler._growth_tracker.item() == 4  # update() ran once per batch
    with init(hparams={"global_batch_size": 8}) as context:
        context.wrap_model(nn.Linear(1, 1))
        with pytest.raises(ValueError, match=r"use_amp\(\) should be called before wrap_model"):
            context.experimental.use_amp()


def test_several_scalers_are_wrapped_and_restored_in_order(tmp_path: Path) -> None:
    class Two(Amp):
        def __init__(self, context: Any) -> None:
            self.other = context.wrap_scaler(torch.amp.GradScaler("cpu", init_scale=8.0))
            super().__init__(context)

    trial = fit(Two, tmp_path)
    with init(hparams={"global_batch_size": 8}, seed=1) as context:
        fresh = Two(context)
        Trainer(fresh, context).fit(
            Batch(4), checkpoint_dir=str(tmp_path), latest_checkpoint=str(tmp_path / "batch-000004")
        )
    assert [s.get_scale() for s in fresh.context.scalers] == [8.0, 256.0]
    assert [s.state_dict() for s in fresh.context.scalers] == [
        s.state_dict() for s in trial.context.scalers
    ]


def test_wrap_reducer_returns_a_reducer_with_update_and_reports_it_under_name(
    tmp_path: Path,
) -> None:
    class Reduced(Line):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            self.count = context.wrap_reducer(lambda values: sum(values), name="records")

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            self.count.update(len(batch[0]))
            return super().train_batch(batch, epoch_idx, batch_idx)

        def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            self.count.update(len(batch[0]))
            return super().evaluate_batch(batch, batch_idx)

    fit(Reduced, tmp_path)
    training, validation = rows(tmp_path)
    assert training["metrics"]["records"] == 32 and validation["metrics"]["records"] == 10


@given(
    records=st.integers(1, 300),
    per_slot=st.integers(1, 17),
    world=st.integers(1, 4),
)
def test_an_epoch_is_as_many_batches_as_determineds_training_loader_has(
    records: int, per_slot: int, world: int
) -> None:
    loader = det_pytorch.DataLoader(range(records), batch_size=per_slot)
    theirs = len(loader.get_data_loader(repeat=True, num_replicas=world, rank=0))
    assert epoch_length(records, per_slot * world) == theirs


def test_epoch_lengths_and_periods_use_one_rule(tmp_path: Path) -> None:
    class Big(Line):
        records = 2000

    with init(hparams={"global_batch_size": 64}, seed=1) as context:
        trial = Big(context)
        Trainer(trial, context).fit(
            Epoch(3), validation_period=Epoch(1), checkpoint_dir=str(tmp_path)
        )
    validated = [r["batches_trained"] for r in rows(tmp_path) if r["type"] == "validation"]
    assert validated == [32, 64, 96]  # Determined's: 2,000 / 64 is 32 batches an epoch
    assert context.current_train_batch() == 95 and context.current_train_epoch() == 2


def test_training_ends_with_a_validation_and_then_a_checkpoint(tmp_path: Path) -> None:
    order: list[str] = []

    class Order(Callback):
        def on_validation_end(self, metrics: dict[str, Any]) -> None:
            order.append("validation")

        def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
            order.append(os.path.basename(checkpoint_dir))

    class Ends(Line):
        def build_callbacks(self) -> dict[str, Callback]:
            return {"order": Order()}

    fit(Ends, tmp_path, Batch(5), checkpoint_period=Batch(2))
    assert order == ["batch-000002", "batch-000004", "validation", "batch-000005"]


def test_hparams_without_global_batch_size_take_the_loaders_batch_size(tmp_path: Path) -> None:
    class Local(Line):
        def build_training_data_loader(self) -> DataLoader:
            return DataLoader(regression(self.records), batch_size=5)

    trial = fit(Local, tmp_path, Epoch(1), hparams={})
    assert trial.context.get_global_batch_size() == 5
    assert trial.context.current_train_batch() == 7  # 40 records, 5 a batch: batches 0..7
    with open(tmp_path / "batch-000008" / "metadata.json") as f:
        assert json.load(f)["global_batch_size"] == 5


def test_without_global_batch_size_or_a_batch_size_the_error_says_what_to_pass(
    tmp_path: Path,
) -> None:
    class NoSize(Line):
        def build_training_data_loader(self) -> DataLoader:
            sampler = tud.BatchSampler(tud.SequentialSampler(range(40)), 5, False)
            return DataLoader(regression(self.records), batch_sampler=sampler)

    with pytest.raises(ValueError, match=r"hparams should set 'global_batch_size'.*init\(hparams"):
        fit(NoSize, tmp_path, hparams={})


# The missing surface.


def test_the_callback_has_exactly_determineds_hooks() -> None:
    def hooks(cls: type) -> set[str]:
        return {name for name in vars(cls) if not name.startswith("_")}

    assert hooks(Callback) == hooks(det_pytorch.PyTorchCallback)


def test_every_hook_runs_in_determineds_order(tmp_path: Path) -> None:
    log: list[str] = []

    class Everything(Callback):
        def __getattribute__(self, name: str) -> Any:
            attribute = object.__getattribute__(self, name)
            if name.startswith("on_"):
                log.append(name)
            return attribute

    class Hooked(Line):
        def build_callbacks(self) -> dict[str, Callback]:
            return {"everything": Everything()}

    fit(Hooked, tmp_path, Batch(2), checkpoint_period=Batch(1))
    log_resumed = list(log)
    log.clear()
    fit(Hooked, tmp_path, Batch(3), latest_checkpoint=str(tmp_path / "batch-000002"))
    epoch = "on_training_epoch_start"
    checkpoint = [
        "on_checkpoint_save_start",
        "on_checkpoint_end",
        "on_checkpoint_write_end",
        "on_checkpoint_upload_end",
    ]
    validation = [
        "on_validation_start",
        "on_validation_epoch_start",
        "on_validation_epoch_end",
        "on_validation_end",
    ]
    workload = "on_training_workload_end"
    assert log_resumed == [
        "on_trial_startup", "on_training_start", epoch, workload, *checkpoint,
        workload, *checkpoint, *validation, "on_trial_shutdown",
    ]  # fmt: skip  # batch 2 was checkpointed by its period, so no checkpoint follows
    assert log == [
        "on_trial_startup", "on_checkpoint_load_start", "on_training_start", workload,
        *validation, *checkpoint, "on_trial_shutdown",
    ]  # fmt: skip


def test_on_trial_shutdown_runs_when_training_fails(tmp_path: Path) -> None:
    closed: list[bool] = []

    class Shutdown(Callback):
        def on_trial_shutdown(self) -> None:
            closed.append(True)

    class Fails(Line):
        def build_callbacks(self) -> dict[str, Callback]:
            return {"shutdown": Shutdown()}

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fit(Fails, tmp_path)
    assert closed == [True]


def test_epoch_start_and_end_hooks_and_flags_follow_the_epoch_rule(tmp_path: Path) -> None:
    seen: list[tuple[str, int]] = []

    class Epochs(Callback):
        def on_training_epoch_start(self, epoch_idx: int) -> None:
            seen.append(("start", epoch_idx))

        def on_training_epoch_end(self, epoch_idx: int) -> None:
            seen.append(("end", epoch_idx))

    class Flags(Line):
        records = 20  # 3 batches of 8 an epoch

        def build_callbacks(self) -> dict[str, Callback]:
            return {"epochs": Epochs()}

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            flags = (self.context.is_epoch_start(), self.context.is_epoch_end())
            seen.append((f"batch {batch_idx} epoch {epoch_idx} {flags}", batch_idx))
            return super().train_batch(batch, epoch_idx, batch_idx)

    fit(Flags, tmp_path, Epoch(2))
    assert [s for s, _ in seen] == [
        "start", "batch 0 epoch 0 (True, False)", "batch 1 epoch 0 (False, False)",
        "batch 2 epoch 0 (False, True)", "end",
        "start", "batch 3 epoch 1 (True, False)", "batch 4 epoch 1 (False, False)",
        "batch 5 epoch 1 (False, True)", "end",
    ]  # fmt: skip


def determined_steps(mode: str, frequency: int, aggregation: int, epoch_len: int, n: int) -> int:
    """How often Determined's trial controller steps a scheduler over ``n`` batches."""
    calls = []
    scheduler = SimpleNamespace(step=lambda: calls.append(1))
    wrapped = det_pytorch.LRScheduler(scheduler, det_pytorch.LRScheduler.StepMode[mode], frequency)
    context = SimpleNamespace(_aggregation_frequency=aggregation, _epoch_len=epoch_len)
    controller = SimpleNamespace(context=context, _get_epoch_idx=lambda b: b // epoch_len)
    for batch_idx in range(n):
        context._should_communicate_and_update = lambda b=batch_idx: (b + 1) % aggregation == 0
        det_pytorch._PyTorchTrialController._auto_step_lr_scheduler_per_batch(
            controller, batch_idx, wrapped
        )
    return len(calls)


@given(
    mode=st.sampled_from(["STEP_EVERY_BATCH", "STEP_EVERY_OPTIMIZER_STEP", "STEP_EVERY_EPOCH"]),
    frequency=st.integers(1, 4),
    aggregation=st.integers(1, 4),
    epoch_len=st.integers(1, 7),
    n=st.integers(0, 30),
)
def test_schedulers_step_as_often_as_determineds_controller_steps_them(
    mode: str, frequency: int, aggregation: int, epoch_len: int, n: int
) -> None:
    calls: list[int] = []
    scheduler = SimpleNamespace(step=lambda: calls.append(1), state_dict=dict)
    ours = LRScheduler(scheduler, LRScheduler.StepMode[mode], frequency)
    for batch_idx in range(n):
        if (batch_idx + 1) % aggregation == 0:
            auto_step(ours, batch_idx, aggregation, epoch_len)
    assert len(calls) == determined_steps(mode, frequency, aggregation, epoch_len, n)


def test_the_step_modes_have_determineds_names_and_values() -> None:
    theirs = det_pytorch.LRScheduler.StepMode
    assert {m.name: m.value for m in LRScheduler.StepMode} == {m.name: m.value for m in theirs}


def test_aggregating_two_batches_steps_like_one_batch_of_twice_the_size(tmp_path: Path) -> None:
    class Counted(Line):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            self.steps = getattr(self, "steps", 0)
            before = self.model.weight.detach().clone()
            metrics = super().train_batch(batch, epoch_idx, batch_idx)
            self.steps += int(not torch.equal(before, self.model.weight))
            return metrics

    aggregated = fit(Counted, tmp_path / "a", Batch(4), aggregation_frequency=2)
    doubled = fit(Counted, tmp_path / "b", Batch(2), hparams={"global_batch_size": 16})
    assert aggregated.steps == doubled.steps == 2
    for a, b in zip(aggregated.model.parameters(), doubled.model.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_a_checkpoint_between_aggregation_steps_resumes_bit_identically(tmp_path: Path) -> None:
    straight = fit(Line, tmp_path / "straight", Batch(6), aggregation_frequency=2)
    fit(Line, tmp_path / "paused", Batch(3), aggregation_frequency=2)
    resumed = fit(
        Line,
        tmp_path / "paused",
        Batch(6),
        aggregation_frequency=2,
        latest_checkpoint=str(tmp_path / "paused" / "batch-000003"),
    )
    for a, b in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_auto_zero_grads_false_is_refused_with_aggregation() -> None:
    with init(hparams={"global_batch_size": 4}, aggregation_frequency=2) as context:
        model = context.wrap_model(nn.Linear(1, 1))
        optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), 0.1))
        with pytest.raises(ValueError, match="auto_zero_grads should be True when aggregation"):
            context.step_optimizer(optimizer, auto_zero_grads=False)


def test_step_zero_validation_validates_before_the_first_batch(tmp_path: Path) -> None:
    fit(Line, tmp_path, Batch(2), step_zero_validation=True)
    assert [(r["type"], r["batches_trained"]) for r in rows(tmp_path)] == [
        ("validation", 0),
        ("training", 2),
        ("validation", 2),
    ]


def test_get_batch_length_weighs_the_validation_mean(tmp_path: Path) -> None:
    class Weighted(Line):
        def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            return {"batch": batch_idx}

        def get_batch_length(self, batch: Any) -> int:
            return 1  # every batch counts once, as Determined's unweighted mean

    fit(Weighted, tmp_path, Batch(1))
    assert rows(tmp_path)[-1]["metrics"] == {"batch": 1.0}  # (0 + 1 + 2) / 3


def test_metrics_go_to_tensorboard_under_determineds_tags(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with init(
        hparams={"global_batch_size": 8},
        tensorboard_dir=str(tmp_path / "tb"),
        enable_tensorboard_logging=True,
    ) as context:
        trial = Line(context)
        Trainer(trial, context).fit(Batch(3), checkpoint_dir=str(tmp_path))
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert sorted(tags) == ["Determined/loss", "Determined/validation_loss"]
    assert [e.step for e in events.Scalars("Determined/loss")] == [0, 1, 2]
    assert [e.step for e in events.Scalars("Determined/validation_loss")] == [3]
    assert context.get_tensorboard_path() == str(tmp_path / "tb")


def test_set_profiler_writes_traces_to_the_tensorboard_path(tmp_path: Path) -> None:
    class Profiled(Line):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            context.set_profiler(
                activities=[torch.profiler.ProfilerActivity.CPU],
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=2),
            )

    with init(hparams={"global_batch_size": 8}, tensorboard_dir=str(tmp_path / "tb")) as context:
        Trainer(Profiled(context), context).fit(Batch(4), checkpoint_dir=str(tmp_path))
    traces = [name for name in os.listdir(tmp_path / "tb") if name.endswith(".pt.trace.json")]
    assert len(traces) == 1
    with open(tmp_path / "tb" / traces[0]) as f:
        assert "traceEvents" in json.load(f)


@pytest.mark.parametrize("average", [True, False])
def test_average_training_metrics_false_reports_rank_0s_metrics_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, average: bool
) -> None:
    with init(hparams={"global_batch_size": 8}, seed=1) as context:
        gather = context.distributed.all_gather

        def with_a_second_rank(obj: Any) -> list[Any]:
            if isinstance(obj, dict) and "sums" in obj:  # a training window: rank 1's loss 100
                return [obj, {**obj, "sums": {"loss": 100.0 * 8}, "counts": {"loss": 8}}]
            return gather(obj)

        monkeypatch.setattr(context.distributed, "all_gather", with_a_second_rank)
        Trainer(Line(context), context).fit(
            Batch(1), checkpoint_dir=str(tmp_path), average_training_metrics=average
        )
    loss = rows(tmp_path)[0]["metrics"]["loss"]
    assert (loss > 50) == average


def test_a_validation_period_without_a_validation_loader_is_refused(tmp_path: Path) -> None:
    class TrainOnly(Trial):
        def __init__(self, context: Any) -> None:
            self.context = context
            self.model = context.wrap_model(nn.Linear(1, 1))

        def build_training_data_loader(self) -> DataLoader:
            return DataLoader(regression(8), batch_size=8)

    with pytest.raises(ValueError, match="TrainOnly should define build_validation_data_loader"):
        fit(TrainOnly, tmp_path, validation_period=Batch(1))


def test_a_scaler_that_finds_infs_skips_steps_backs_off_and_resumes_bit_identically(
    tmp_path: Path,
) -> None:
    class Overflowing(Amp):
        def __init__(self, context: Any) -> None:
            self.scaler = context.wrap_scaler(torch.amp.GradScaler("cpu", init_scale=2.0**127))
            Line.__init__(self, context)
            self.initial = self.model.weight.detach().clone()

    straight = fit(Overflowing, tmp_path / "straight", Batch(6), aggregation_frequency=2)
    scale = straight.scaler.get_scale()
    assert scale == 2.0**125  # two of the three steps found infs, were skipped, halved it
    assert not torch.equal(straight.model.weight, straight.initial)  # and others stepped
    fit(Overflowing, tmp_path / "paused", Batch(3), aggregation_frequency=2)
    resumed = fit(
        Overflowing,
        tmp_path / "paused",
        Batch(6),
        aggregation_frequency=2,
        latest_checkpoint=str(tmp_path / "paused" / "batch-000003"),
    )
    assert resumed.scaler.get_scale() == scale
    for a, b in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_resuming_a_finished_run_neither_validates_nor_checkpoints_again(tmp_path: Path) -> None:
    fit(Line, tmp_path, Batch(4))
    before = rows(tmp_path)
    written = os.stat(tmp_path / "batch-000004" / "metadata.json").st_mtime_ns
    fit(Line, tmp_path, Batch(4), latest_checkpoint=str(tmp_path / "batch-000004"))
    assert rows(tmp_path) == before
    assert os.stat(tmp_path / "batch-000004" / "metadata.json").st_mtime_ns == written


def test_a_wrapped_scaler_is_the_scaler_for_every_call_and_copies() -> None:
    import copy

    with init(hparams={"global_batch_size": 4}) as context:
        scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
        wrapped = context.wrap_scaler(scaler)
        assert wrapped.scaler is scaler and wrapped.get_scale() == 4.0
        assert copy.deepcopy(wrapped).get_scale() == 4.0
        with pytest.raises(ValueError, match="already wrapped"):
            context.wrap_scaler(scaler)
        with pytest.raises(TypeError, match="without scale, step, update"):
            context.wrap_scaler(object())


def test_a_resume_with_another_aggregation_frequency_is_refused(tmp_path: Path) -> None:
    from detsamplers import ReproducibilityError

    fit(Line, tmp_path, Batch(2), aggregation_frequency=2)
    with pytest.raises(ReproducibilityError, match=r"aggregation_frequency is 2 in the checkpoint"):
        fit(Line, tmp_path, Batch(4), latest_checkpoint=str(tmp_path / "batch-000002"))


def test_exp_conf_is_read_back_as_in_determineds_local_mode() -> None:
    with init(exp_conf={"data": {"url": "file:///tmp/x"}}) as context:
        assert context.get_data_config() == {"url": "file:///tmp/x"}
    with init() as context, pytest.raises(ValueError, match=r"pass init\(exp_conf="):
        context.get_experiment_config()


@pytest.mark.parametrize(
    "batch",
    [
        torch.zeros(3, 2),
        (torch.zeros(5), torch.zeros(5, 1)),
        [torch.zeros(2, 2)],
        {"x": torch.zeros(4, 3), "y": torch.zeros(4)},
    ],
    ids=["tensor", "tuple", "list", "dict"],
)
def test_get_batch_length_is_determineds_data_length(batch: Any) -> None:
    with init(hparams={"global_batch_size": 4}) as context:
        assert Line(context).get_batch_length(batch) == det_pytorch.data_length(batch)


def test_get_batch_length_recurses_into_nested_batches_as_determined_documents() -> None:
    # Determined's data_length says it traverses the tree to the first tensor, but for a
    # dict it returns len() of the first value: 1 for a list holding one tensor of 6.
    batch = {"data": [{"sub_data1": torch.zeros(6, 2)}], "label": (torch.zeros(6),)}
    assert det_pytorch.data_length(batch) == 1
    with init(hparams={"global_batch_size": 4}) as context:
        assert Line(context).get_batch_length(batch) == 6


def test_to_device_moves_what_determineds_to_device_moves() -> None:
    import numpy as np

    batch = {"x": np.ones((2, 3), dtype=np.float32), "y": [torch.zeros(2)], "name": "a"}
    with init(hparams={"global_batch_size": 4}) as context:
        ours = context.to_device(batch)
    theirs = det_pytorch.to_device(batch, torch.device("cpu"))
    assert torch.equal(ours["x"], theirs["x"]) and ours["name"] == theirs["name"] == "a"
    assert type(ours["y"]) is type(theirs["y"]) is list
