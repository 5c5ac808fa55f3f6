"""The load-checkpoint phase of ``Trainer.fit``: check a checkpoint, then restore it.

It implements the resume checks of NOTE [ checkpoint layout ] (_checkpoint.py): what may
differ (an elastic global batch, a growth: NOTE [ trial growth ]), the data stream's digest,
gradients pending between aggregation steps (NOTE [ gradient aggregation ]) and the RNGs
(NOTE [ trial RNG ]).
"""

from __future__ import annotations

from typing import Any

from .._errors import ReproducibilityError
from . import _aggregation, _checkpoint, _data, _rng, _schedule
from ._clock import Clock
from ._context import TrialContext
from ._phase import Callbacks

__all__ = ["LoadPhase"]


class LoadPhase:
    """The phase that loads a checkpoint into the trial, its loader and the RNGs.

    Args:
        context: The trial's context: its models, optimizers, schedulers and ranks.
        callbacks: The trial's callbacks, whose state the checkpoint holds too.
        weights_only: Read ``state-dict.pth`` as data (``Trainer.fit``'s argument).
    """

    def __init__(self, context: TrialContext, callbacks: Callbacks, weights_only: bool) -> None:
        self.context = context
        self.callbacks = callbacks
        self.weights_only = weights_only

    def load(
        self,
        path: str,
        saved: dict[str, Any],
        here: dict[str, Any],
        data: _data.TrainingData | None,
        train_data: Any,
        clock: Clock,
    ) -> None:
        """Check the checkpoint against this run, then restore its state and RNGs."""
        context, dist = self.context, self.context.distributed
        rank, size = dist.get_rank(), dist.get_size()
        initial = clock.batches
        saved_frequency = saved.get("aggregation_frequency", context.aggregation_frequency)
        if saved_frequency != context.aggregation_frequency:
            raise ReproducibilityError(
                f"cannot resume from {path}: aggregation_frequency is {saved_frequency} in the "
                f"checkpoint but {context.aggregation_frequency} here; the optimizer steps would "
                "fall on other batches than in the uninterrupted run. Pass "
                f"init(aggregation_frequency={saved_frequency}) as saved, or start a fresh run in "
                "another checkpoint_dir."
            )
        elastic = data is not None and data.elastic_batch  # may the global batch change?
        free = {"batch_size_schedule", "global_batch_size"} if elastic else {"batch_size_schedule"}
        if isinstance(data, _data.MapData):  # _data.grown_data checked them (NOTE [ trial growth ])
            free |= {"dataset_length", "dataset_growth"}
        checked = {k: v for k, v in here.items() if k not in free}
        _checkpoint.check_resume(path, saved, checked)
        if "batch_segments" in saved:  # NOTE [ batch size schedule ]: the past is fixed
            segments = [(int(b), int(s), int(g)) for b, s, g in saved["batch_segments"]]
            _schedule.check_past(
                path, clock.schedule, context.aggregation_frequency, segments, clock.samples
            )
        same_world = saved["world_size"] == size
        same_grid = same_world and saved["global_batch_size"] == here["global_batch_size"]
        rank_state = _checkpoint.load_rank_state(path, rank) if same_world else {}
        if data is not None and same_grid:  # checks this rank's stream digest
            data.load(train_data, rank_state["loader"])
        elif isinstance(data, _data.MapData) and data.mixture:  # NOTE [ trial mixture ]
            saved_state = rank_state if same_world else _checkpoint.load_rank_state(path, 0)
            data.load(train_data, saved_state["loader"])  # the loader checks any grid
        elif data is not None:  # as saved: before a growth recorded now (NOTE [ trial growth ])
            digest = data.as_saved().global_digest(clock.samples, size)
            _checkpoint.check_resume(path, saved, {"data_global_digest": digest})
        if saved.get("pending_gradients") and not same_world:
            raise ReproducibilityError(
                f"cannot resume from {path} on {size} ranks: it was saved on "
                f"{saved['world_size']} ranks between two steps of gradient aggregation "
                f"(batch {initial}, aggregation_frequency={context.aggregation_frequency}), and "
                "each rank's accumulated gradients are its own (NOTE [ gradient aggregation ]); "
                f"resume on {saved['world_size']} ranks, or from a checkpoint at a multiple of "
                f"{context.aggregation_frequency} batches"
            )
        _checkpoint.restore_state(path, context, self.callbacks.by_name, self.weights_only)
        if "gradients" in rank_state:
            _aggregation.restore_gradients(context.optimizers, rank_state["gradients"], path)
        if same_world:
            _rng.restore(rank_state["rng"])
        else:
            _rng.seed_all(context.get_trial_seed(), "rank", rank, initial)
