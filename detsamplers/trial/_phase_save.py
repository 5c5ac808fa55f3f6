"""The checkpoint phase of ``Trainer.fit``: metadata, each rank's state, retention.

It writes a checkpoint folder as NOTE [ checkpoint layout ] (_checkpoint.py) lays it out
(the folder counts once its metadata exists), with each rank's loader and RNG state and any
pending gradients (NOTE [ gradient aggregation ]), then applies NOTE [ checkpoint retention ].
"""

from __future__ import annotations

import os
from typing import Any

from . import _aggregation, _checkpoint, _data, _rng
from ._clock import Clock
from ._phase import Phase, _json_or_none

__all__ = ["CheckpointPhase"]


class CheckpointPhase(Phase):
    """The phase that saves a checkpoint of the trial at the clock."""

    def _checkpoint(
        self,
        checkpoint_dir: str,
        data: _data.TrainingData | None,
        epoch_records: int,
        clock: Clock,
        last: dict[str, int],
    ) -> None:
        """Save a checkpoint at the clock (a collective: every rank calls it)."""
        context, dist = self.context, self.context.distributed
        done, validation = self._last_validation
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
            "dataset_length": epoch_records,
            "dataset_growth": None if data is None else data.history,
            "aggregation_frequency": context.aggregation_frequency,
            "pending_gradients": pending,
            "last_validation": last["validation"],
            "data_seed": None if data is None else data.seed,
            "data_fingerprint": None if loader_state is None else loader_state["fingerprint"],
            "data_digest": None if loader_state is None else loader_state["digest"],
            "data_global_digest": None
            if data is None
            else data.global_digest(samples, dist.get_size()),
            "hparams": _json_or_none(hparams),
            "validation_metrics": _json_or_none(validation) if done == batches else None,
        }
        rank_state: dict[str, Any] = {"rng": _rng.capture(), "loader": loader_state}
        if pending:  # NOTE [ gradient aggregation ]
            rank_state["gradients"] = _aggregation.capture_gradients(context.optimizers)
        path = _checkpoint.save(checkpoint_dir, context, self.callbacks, metadata, rank_state)
        if dist.is_chief:  # only once the new folder is complete (NOTE [ checkpoint retention ])
            self._retention.apply(checkpoint_dir, batches)
        self._call("on_checkpoint_end", path)
        self._call("on_checkpoint_write_end", path)
        self._call("on_checkpoint_upload_end", os.path.basename(path))
