"""The train phase alone (detsamplers/trial/_phase_train.py).

``TrainPhase`` is built with the trial, the context and the callbacks; ``train_batch`` trains
the clock's next global batch (epoch hooks, ``train_batch``, then the schedulers on the
batches whose optimizer step ran: NOTE [ gradient aggregation ], NOTE [ scheduler stepping ])
and ``report`` reduces a window of them (NOTE [ training workloads ]).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from detsamplers.loader import DataLoader
from detsamplers.trial import (
    Callback,
    DistributedContext,
    LRScheduler,
    Trial,
    TrialContext,
    init,
)
from detsamplers.trial._clock import Clock
from detsamplers.trial._phase import Callbacks
from detsamplers.trial._phase_train import TrainPhase
from detsamplers.trial._report import Reporter
from detsamplers.trial._schedule import BatchSchedule


class Events(Callback):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        self.seen.append(("start", epoch_idx))

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        self.seen.append(("end", epoch_idx))

    def on_training_workload_end(self, avg_metrics: Any, batch_metrics: Any) -> None:
        self.seen.append(("workload", avg_metrics, len(batch_metrics)))


class Sums(Trial):
    """Each batch's metric is its sum; an epoch is 6 records in global batches of 2."""

    def __init__(self, context: TrialContext) -> None:
        super().__init__(context)
        self.model = context.wrap_model(torch.nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), 1.0))
        scheduler = torch.optim.lr_scheduler.StepLR(self.opt, 1, gamma=0.5)
        context.wrap_lr_scheduler(scheduler, LRScheduler.StepMode.STEP_EVERY_BATCH)
        self.events = Events()
        self.marks: list[tuple[int, int, bool, bool]] = []

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(torch.arange(6.0).reshape(6, 1), batch_size=2)

    def train_batch(self, batch: torch.Tensor, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        c = self.context
        self.marks.append((c.current_train_batch(), c.current_train_epoch(), c.is_epoch_start(),
                           c.is_epoch_end()))  # fmt: skip
        self.context.backward(self.model(batch).sum())
        self.context.step_optimizer(self.opt)
        return {"sum": batch.sum()}


def _phase(trial: Sums) -> TrainPhase:
    callbacks = Callbacks({"events": trial.events}, trial.context.distributed)
    return TrainPhase(trial, trial.context, callbacks)


def _batches(aggregation_frequency: int = 1) -> tuple[Sums, TrainPhase, Clock, Any]:
    context = TrialContext({"global_batch_size": 2}, 0, DistributedContext(), aggregation_frequency)
    trial = Sums(context)
    clock = Clock(BatchSchedule(2), aggregation_frequency, records=6)
    return trial, _phase(trial), clock, iter(trial.build_training_data_loader())


def test_train_batch_tells_the_context_and_the_callbacks_where_each_batch_stands() -> None:
    trial, phase, clock, batches = _batches()
    answers = []
    for _ in range(3):
        answers.append(phase.train_batch(batches, clock))
        clock.advance()
    assert trial.marks == [(0, 0, True, False), (1, 0, False, False), (2, 0, False, True)]
    assert trial.events.seen == [("start", 0), ("end", 0)]
    assert [(float(m["sum"]), n) for m, n in answers] == [(1.0, 2), (5.0, 2), (9.0, 2)]


@pytest.mark.parametrize(("frequency", "lrs"), [(1, [0.5, 0.25, 0.125]), (3, [1.0, 1.0, 0.125])])
def test_the_schedulers_step_only_after_batches_whose_optimizer_step_ran(
    frequency: int, lrs: list[float]
) -> None:
    # STEP_EVERY_BATCH with aggregation 3: none after batches 0 and 1, then the three of
    # batches 0..2 after batch 2's optimizer step (NOTE [ scheduler stepping ]).
    trial, phase, clock, batches = _batches(frequency)
    seen = []
    for _ in range(3):
        phase.train_batch(batches, clock)
        clock.advance()
        seen.append(trial.opt.param_groups[0]["lr"])
    assert seen == lrs


def test_report_logs_the_windows_mean_over_records_and_tells_the_callbacks(
    tmp_path: Path,
) -> None:
    with init(hparams={"global_batch_size": 2}) as context:
        trial = Sums(context)
        phase = _phase(trial)
        window = phase.open_window()
        window.add({"loss": 1.0}, 3)
        window.add({"loss": 4.0}, 1)
        phase.report(Reporter(str(tmp_path), True, 0, None), window, 2, average=True)
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert row == {"type": "training", "batches_trained": 2, "metrics": {"loss": 1.75}}
    assert trial.events.seen == [("workload", {"loss": 1.75}, 2)]
