"""The validate phase of ``Trainer.fit``: evaluate on every rank under a forked RNG.

The trial validates if it has a validation loader and an evaluate method; its metrics are
reduced over every rank (NOTE [ metric reduction ]) and the training RNG is untouched
(NOTE [ trial RNG ]).
"""

from __future__ import annotations

from typing import Any

import torch

from . import _data, _preemption, _rng, _tensorboard
from ._phase import Phase, _overrides
from ._reducer import (
    Window,
    as_metrics,
    merge,
    reduce_wrapped,
    reducers_for,
)
from ._report import Reporter
from ._trial import takes_batch_idx

__all__ = ["ValidatePhase"]


class ValidatePhase(Phase):
    """The phase that validates the trial and reports its metrics."""

    def _validates(self) -> bool:
        trial = self.trial
        evaluates = _overrides(trial, "evaluate_batch") or _overrides(
            trial, "evaluate_full_dataset"
        )
        return evaluates and _overrides(trial, "build_validation_data_loader")

    def _validate(self, reporter: Reporter, batches: int, test_mode: bool) -> int:
        """Validate on every rank under a forked RNG; reduce and log the metrics.

        Returns:
            ``batches``, the batch it validated at.
        """
        context, dist, trial = self.context, self.context.distributed, self.trial
        full = _overrides(trial, "evaluate_full_dataset") and not _overrides(
            trial, "evaluate_batch"
        )
        for entry in context.reducers:
            if entry.for_validation:
                entry.reset()
        for model in context.models:
            model.eval()
        self._call("on_validation_start")
        with _rng.fork(context.get_trial_seed(), "validation", batches), torch.no_grad():
            data = _data.validation_loader(trial.build_validation_data_loader(), context, full)
            _preemption.shield_workers(data, self._signals)
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
        self._last_validation = (batches, metrics)
        self._call("on_validation_end", metrics)
        return batches

    def _evaluate_batches(self, data: Any, test_mode: bool) -> dict[str, Any]:
        """``evaluate_batch`` over this rank's shard; the metrics reduced over every rank."""
        context, dist, trial = self.context, self.context.distributed, self.trial
        with_idx = takes_batch_idx(trial.evaluate_batch)
        self._call("on_validation_epoch_start")
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
        self._call("on_validation_epoch_end", outputs)
        partials = dist.all_gather(window.partial())
        every = sorted({name for partial in partials for name in partial["sums"]})
        return merge(partials, reducers_for(trial.evaluation_reducer(), every))
