"""The checkpoint phase of ``Trainer.fit``: metadata, each rank's state, retention.

It writes a checkpoint folder as NOTE [ checkpoint layout ] (_checkpoint.py) lays it out
(the folder counts once its metadata exists), with each rank's loader and RNG state and any
pending gradients (NOTE [ gradient aggregation ]), then applies NOTE [ checkpoint retention ].
"""

from __future__ import annotations

import os
from typing import Any

from . import _aggregation, _checkpoint, _data, _retention, _rng
from ._clock import Clock
from ._context import TrialContext
from ._phase import Callbacks, json_or_none

__all__ = ["SavePhase"]


class SavePhase:
    """The phase that saves a checkpoint of the trial at the clock, then applies retention.

    Args:
        context: The trial's context: what it wrapped is saved, and its ranks.
        callbacks: The trial's callbacks: saved too, and told of each checkpoint.
        checkpoint_dir: Where checkpoint folders go (checked by the setup phase).
        retention: Which checkpoints stay (NOTE [ checkpoint retention ]).
        data: The training data the trainer built (``None``: the trial's own loader).
        epoch_records: Records in an epoch (NOTE [ epoch length ]).
    """

    def __init__(
        self,
        context: TrialContext,
        callbacks: Callbacks,
        checkpoint_dir: str,
        retention: _retention.Retention,
        data: _data.TrainingData | None,
        epoch_records: int,
    ) -> None:
        self.context = context
        self.callbacks = callbacks
        self.checkpoint_dir = checkpoint_dir
        self.retention = retention
        self.data = data
        self.epoch_records = epoch_records

    def save(self, clock: Clock, last_validation: int, validation: dict[str, Any] | None) -> str:
        """Save a checkpoint at the clock (a collective: every rank calls it); its folder.

        Args:
            clock: Where training stands.
            last_validation: The batch last validated at (``-1``: none).
            validation: The metrics of a validation at the clock's batch, if there was one.
        """
        context, dist, data = self.context, self.context.distributed, self.data
        batches, samples = clock.batches, clock.samples
        loader_state = None
        if data is not None:  # a fresh stream at the position: workers prefetch ahead
            per_slot = context.get_per_slot_batch_size()  # the next batch's
            loader_state = data.state(samples, dist.get_size(), dist.get_rank(), per_slot)
        hparams = context.get_hparams()
        if callable(hparams.get("global_batch_size")):  # its realized past, as a list
            hparams["global_batch_size"] = [[s, g] for _, s, g in clock.segments]
        pending = batches % context.aggregation_frequency != 0
        metadata: dict[str, Any] = {
            "format_version": _checkpoint.FORMAT_VERSION,
            "batches_trained": batches,
            "samples_trained": samples,
            "records_consumed": samples,
            "global_batch_size": clock.size,
            "batch_size_schedule": clock.schedule.describe(),
            **clock.metadata(),
            "world_size": dist.get_size(),
            "seed": context.get_trial_seed(),
            "dataset_length": self.epoch_records,
            "dataset_growth": None if data is None else data.history,
            "aggregation_frequency": context.aggregation_frequency,
            "pending_gradients": pending,
            "last_validation": last_validation,
            "data_seed": None if data is None else data.seed,
            "data_fingerprint": None if loader_state is None else loader_state["fingerprint"],
            "data_digest": None if loader_state is None else loader_state["digest"],
            "data_global_digest": None
            if data is None
            else data.global_digest(samples, dist.get_size()),
            "hparams": json_or_none(hparams),
            "validation_metrics": json_or_none(validation),
        }
        rank_state: dict[str, Any] = {"rng": _rng.capture(), "loader": loader_state}
        if pending:  # NOTE [ gradient aggregation ]
            rank_state["gradients"] = _aggregation.capture_gradients(context.optimizers)
        folder = self.checkpoint_dir
        path = _checkpoint.save(folder, context, self.callbacks.by_name, metadata, rank_state)
        if dist.is_chief:  # only once the new folder is complete (NOTE [ checkpoint retention ])
            self.retention.apply(folder, batches)
        self.callbacks.call("on_checkpoint_end", path)
        self.callbacks.call("on_checkpoint_write_end", path)
        self.callbacks.call("on_checkpoint_upload_end", os.path.basename(path))
        return path
