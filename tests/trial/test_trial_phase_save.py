"""The save phase alone (detsamplers/trial/_phase_save.py).

``SavePhase`` is built with the context, the callbacks, the checkpoint folder, the retention
policy and the training data; ``save`` writes a checkpoint at the clock (NOTE [ checkpoint
layout ]) with what the loop tells it of validations, then applies NOTE [ checkpoint
retention ], and tells the callbacks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from detsamplers.trial import Callback, init
from detsamplers.trial._checkpoint import load_rank_state, read_checkpoint_metadata
from detsamplers.trial._clock import Clock
from detsamplers.trial._context import TrialContext
from detsamplers.trial._phase import Callbacks
from detsamplers.trial._phase_save import SavePhase
from detsamplers.trial._retention import Retention, complete_checkpoints
from detsamplers.trial._schedule import BatchSchedule


class Ends(Callback):
    def __init__(self) -> None:
        self.paths: list[str] = []
        self.uploads: list[str] = []

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        self.paths.append(checkpoint_dir)

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.uploads.append(uuid)


def _phase(
    context: TrialContext, folder: Path, retention: Retention, callback: Callback | None = None
) -> SavePhase:
    callbacks = Callbacks({} if callback is None else {"c": callback}, context.distributed)
    return SavePhase(context, callbacks, str(folder), retention, None, 16)


def _kept(folder: Path) -> list[int]:
    return [batches for batches, _, _ in complete_checkpoints(str(folder))]


def test_save_keeps_the_newest_keep_last_checkpoints(tmp_path: Path) -> None:
    with init(hparams={"global_batch_size": 4}) as context:
        context.wrap_model(torch.nn.Linear(1, 1))
        phase = _phase(context, tmp_path, Retention("all", None, True, keep_last=2))
        clock = Clock(BatchSchedule(4), 1, records=16)
        kept = []
        for _ in range(5):
            clock.advance()
            phase.save(clock, -1, None)
            kept.append(_kept(tmp_path))
    assert kept == [[1], [1, 2], [2, 3], [3, 4], [4, 5]]


def test_save_keeps_the_best_validated_checkpoint_beside_the_newest(tmp_path: Path) -> None:
    retention = Retention("all", "loss", True, keep_last=1, keep_best=1)
    losses: dict[int, dict[str, Any] | None] = {1: {"loss": 0.5}, 2: {"loss": 0.9}, 3: None}
    with init(hparams={"global_batch_size": 4}) as context:
        phase = _phase(context, tmp_path, retention)
        clock = Clock(BatchSchedule(4), 1, records=16)
        for batches in (1, 2, 3, 4):
            clock.advance()
            phase.save(clock, batches, losses.get(batches, {"loss": 0.7}))
    assert _kept(tmp_path) == [1, 4]


def test_save_records_the_validation_it_is_told_of_and_tells_the_callbacks(
    tmp_path: Path,
) -> None:
    ends = Ends()
    with init(hparams={"global_batch_size": 4, "lr": 0.1}, seed=5) as context:
        phase = _phase(context, tmp_path, Retention("none", None, True), ends)
        clock = Clock(BatchSchedule(4), 1, records=16)
        clock.advance()
        clock.advance()
        first = phase.save(clock, 2, {"acc": 0.5})
        clock.advance()
        second = phase.save(clock, 2, None)
    saved = [read_checkpoint_metadata(path) for path in (first, second)]
    assert [m["validation_metrics"] for m in saved] == [{"acc": 0.5}, None]
    assert [m["last_validation"] for m in saved] == [2, 2]
    assert [(m["batches_trained"], m["samples_trained"]) for m in saved] == [(2, 8), (3, 12)]
    assert saved[0]["seed"] == 5 and saved[0]["hparams"] == {"global_batch_size": 4, "lr": 0.1}
    assert ends.paths == [first, second]
    assert ends.uploads == [os.path.basename(first), os.path.basename(second)]


def test_save_between_aggregation_steps_keeps_each_ranks_pending_gradients(
    tmp_path: Path,
) -> None:
    with init(hparams={"global_batch_size": 4}, aggregation_frequency=2) as context:
        model = context.wrap_model(torch.nn.Linear(2, 1))
        optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), 0.1))
        context.backward(model(torch.ones(4, 2)).sum())
        phase = _phase(context, tmp_path, Retention("none", None, True))
        clock = Clock(BatchSchedule(4), 2, records=16)
        clock.advance()
        path = phase.save(clock, -1, None)
        pending = [p.grad for group in optimizer.param_groups for p in group["params"]]
    assert read_checkpoint_metadata(path)["pending_gradients"] is True
    gradients = load_rank_state(path, 0)["gradients"]
    assert all(g is not None for g in pending) and len(gradients) == len(pending) == 2
    assert all(torch.equal(a, b) for a, b in zip(gradients, pending, strict=True))
