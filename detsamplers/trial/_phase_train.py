"""The train phase of ``Trainer.fit``: one global batch, and the reports of a window of them.

One batch: epoch hooks, ``train_batch``, then the steps that follow it (AMP's scaler,
schedulers: NOTE [ AMP ], NOTE [ scheduler stepping ]). A window's metrics are reduced over
the ranks and reported (NOTE [ metric reduction ], NOTE [ training workloads ]).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import _tensorboard
from ._clock import Clock
from ._context import TrialContext
from ._lr_scheduler import auto_step
from ._phase import Callbacks
from ._reducer import (
    Window,
    as_metrics,
    batch_means,
    merge,
    reduce_wrapped,
)
from ._report import Reporter
from ._trial import Trial

__all__ = ["TrainPhase"]


class TrainPhase:
    """The phase that trains a batch and reports a window of them.

    Args:
        trial: The trial whose ``train_batch`` it calls.
        context: The trial's context: its models, schedulers, scalers and reducers.
        callbacks: The trial's callbacks, told of epochs and reported windows.
    """

    def __init__(self, trial: Trial, context: TrialContext, callbacks: Callbacks) -> None:
        self.trial = trial
        self.context = context
        self.callbacks = callbacks

    def train_batch(self, iterator: Iterator[Any], clock: Clock) -> tuple[dict[str, Any], int]:
        """Train the clock's next global batch and step what follows; its metrics and length."""
        context, trial = self.context, self.trial
        batch_idx, epoch_idx = clock.batches, clock.epoch
        first, last = clock.is_epoch_start(), clock.is_epoch_end()
        context._enter_batch(batch_idx, epoch_idx, first, last)
        if first:
            self.callbacks.epoch_start(epoch_idx)
        batch = next(iterator)
        if context.experimental.auto_to_device:
            batch = context.to_device(batch)
        for model in context.models:
            model.train()
        metrics = as_metrics(trial.train_batch(batch, epoch_idx, batch_idx), "train_batch")
        if context.profiler is not None:
            context.profiler.step()
        if context._should_step():  # NOTE [ AMP ], NOTE [ scheduler stepping ]
            if context.experimental.auto_amp:
                context.scalers[0].update()
            for scheduler in context.lr_schedulers:  # epochs ahead from the clock
                auto_step(scheduler, batch_idx, context.aggregation_frequency, clock.epoch_in)
        if last:
            self.callbacks.call("on_training_epoch_end", epoch_idx)
        return metrics, trial.get_batch_length(batch)

    def open_window(self) -> Window:
        """A new window of training metrics; the training reducers reset."""
        for entry in self.context.reducers:
            if entry.for_training:
                entry.reset()
        return Window()

    def report(self, reporter: Reporter, window: Window, batches: int, average: bool) -> None:
        """Reduce a training window, log it and run ``on_training_workload_end``."""
        context, dist = self.context, self.context.distributed
        partials = dist.all_gather(window.partial()) if average else [window.partial()]
        metrics = merge(partials)
        metrics.update(reduce_wrapped([e for e in context.reducers if e.for_training], dist))
        batch_metrics = batch_means(partials)
        reporter.log("training", batches, metrics)
        if dist.is_chief and context.enable_tensorboard_logging:
            writer = context.get_tensorboard_writer()
            _tensorboard.log_metrics(writer, "training", batches, metrics, batch_metrics)
        self.callbacks.call("on_training_workload_end", metrics, batch_metrics)
