"""The validate phase of ``Trainer.fit``: evaluate on every rank under a forked RNG.

The trial validates if it has a validation loader and an evaluate method; its metrics are
reduced over every rank (NOTE [ metric reduction ]) and the training RNG is untouched
(NOTE [ trial RNG ]).
"""

from __future__ import annotations

from typing import Any

import torch

from . import _data, _preemption, _rng, _tensorboard
from ._context import TrialContext
from ._phase import Callbacks, overrides
from ._reducer import (
    Window,
    as_metrics,
    merge,
    reduce_wrapped,
    reducers_for,
)
from ._report import Reporter
from ._trial import Trial, takes_batch_idx

__all__ = ["ValidatePhase", "validates"]


def validates(trial: Trial) -> bool:
    """Whether ``trial`` has a validation loader and an evaluate method."""
    evaluates = overrides(trial, "evaluate_batch") or overrides(trial, "evaluate_full_dataset")
    return evaluates and overrides(trial, "build_validation_data_loader")


class ValidatePhase:
    """The phase that validates the trial and reports its metrics.

    Args:
        trial: The trial to validate (``validates(trial)`` should hold).
        context: The trial's context: its models, reducers and ranks.
        callbacks: The trial's callbacks, told of the validation.
        signals: The stop signals the validation loader's workers are shielded from.
    """

    def __init__(
        self,
        trial: Trial,
        context: TrialContext,
        callbacks: Callbacks,
        signals: _preemption.StopSignals,
    ) -> None:
        self.trial = trial
        self.context = context
        self.callbacks = callbacks
        self.signals = signals
        self.last: tuple[int, dict[str, Any]] = (-1, {})  # this fit's last: batch, metrics

    def metrics_at(self, batches: int) -> dict[str, Any] | None:
        """The metrics of this fit's validation at ``batches``, if it validated there."""
        done, metrics = self.last
        return metrics if done == batches else None

    def validate(self, reporter: Reporter, batches: int, test_mode: bool) -> dict[str, Any]:
        """Validate on every rank under a forked RNG; reduce and log the metrics.

        Returns:
            The metrics, reduced over every rank (as every rank logs them).
        """
        context, dist, trial = self.context, self.context.distributed, self.trial
        full = overrides(trial, "evaluate_full_dataset") and not overrides(trial, "evaluate_batch")
        for entry in context.reducers:
            if entry.for_validation:
                entry.reset()
        for model in context.models:
            model.eval()
        self.callbacks.call("on_validation_start")
        with _rng.fork(context.get_trial_seed(), "validation", batches), torch.no_grad():
            data = _data.validation_loader(trial.build_validation_data_loader(), context, full)
            _preemption.shield_workers(data, self.signals)
            if full:
                metrics = trial.evaluate_full_dataset(data) if dist.is_chief else None
                metrics = dict(as_metrics(dist.broadcast(metrics), "evaluate_full_dataset"))
            else:
                metrics = self._evaluate_batches(data, test_mode)
            validation = [e for e in context.reducers if e.for_validation]
            metrics.update(reduce_wrapped(validation, dist))
        reporter.log("validation", batches, metrics)
        if dist.is_chief and context.enable_tensorboard_logging:
            writer = context.get_tensorboard_writer()
            _tensorboard.log_metrics(writer, "validation", batches, metrics)
        self.last = (batches, metrics)
        self.callbacks.call("on_validation_end", metrics)
        return metrics

    def _evaluate_batches(self, data: Any, test_mode: bool) -> dict[str, Any]:
        """``evaluate_batch`` over this rank's shard; the metrics reduced over every rank."""
        context, dist, trial = self.context, self.context.distributed, self.trial
        with_idx = takes_batch_idx(trial.evaluate_batch)
        self.callbacks.call("on_validation_epoch_start")
        window, outputs, names = Window(), [], None
        for idx, batch in enumerate(data):
            if context.experimental.auto_to_device:
                batch = context.to_device(batch)
            if with_idx:
                returned = trial.evaluate_batch(batch, batch_idx=idx)
            else:
                returned = trial.evaluate_batch(batch)  # type: ignore[call-arg]
            metrics = as_metrics(returned, "evaluate_batch")
            if names is not None and set(metrics) != names:
                raise ValueError(
                    "evaluate_batch should return the same metric names for every batch, but "
                    f"got {sorted(names)} and then {sorted(metrics)}"
                )
            names = set(metrics)
            outputs.append(window.add(metrics, trial.get_batch_length(batch)))
            if test_mode:
                break
        self.callbacks.call("on_validation_epoch_end", outputs)
        partials = dist.all_gather(window.partial())
        every = sorted({name for partial in partials for name in partial["sums"]})
        return merge(partials, reducers_for(trial.evaluation_reducer(), every))
