"""``Trainer``: a lean, torchrun-native loop whose pause and resume are exact.

Run a script that builds a trial under ``init()`` and calls ``Trainer(trial, context).fit``::

    OMP_NUM_THREADS=1 torchrun --nproc_per_node=2 train.py   # or: python train.py

``fit`` reads top to bottom in phases: setup (lengths, the checkpoint to resume) → data
(the training loader, sharded and skipped) → model (callbacks, ranks' agreement) → load
checkpoint (state, RNG, checks) → loop (train, report, validate, checkpoint) → close.
See NOTE [ trial data ], NOTE [ trial RNG ], NOTE [ checkpoint layout ] and
NOTE [ metric reduction ], NOTE [ stop agreement ] and NOTE [ checkpoint retention ].
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from typing import Any

import torch

from .._errors import ReproducibilityError
from . import _checkpoint, _data, _preemption, _retention, _rng
from ._context import TrialContext
from ._lr_scheduler import LRScheduler
from ._reducer import Window
from ._report import Reporter
from ._trial import Trial
from ._units import Batch, Length, epoch_of, to_batches

__all__ = ["Trainer"]

_EVERY_BATCH = LRScheduler.StepMode.STEP_EVERY_BATCH
_EVERY_EPOCH = LRScheduler.StepMode.STEP_EVERY_EPOCH
_REPORTING_PERIOD = Batch(100)


def _overrides(trial: Trial, name: str) -> bool:
    return getattr(type(trial), name) is not getattr(Trial, name)


def _length(batch: Any) -> int:
    """The number of records in a batch: the first tensor's leading dimension."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    if isinstance(batch, dict) and batch:
        return _length(next(iter(batch.values())))
    if isinstance(batch, (list, tuple)) and batch:
        return _length(batch[0]) if isinstance(batch[0], (torch.Tensor, dict)) else len(batch)
    return 1


def _json_or_none(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


class Trainer:
    """Train a :class:`Trial` with the context it was built with.

    Examples:
        >>> import torch
        >>> from detsamplers.loader import DataLoader
        >>> class Fit(Trial):
        ...     def __init__(self, context):
        ...         super().__init__(context)
        ...         self.w = context.wrap_model(torch.nn.Linear(1, 1, bias=False))
        ...         self.opt = context.wrap_optimizer(torch.optim.SGD(self.w.parameters(), 0.5))
        ...     def build_training_data_loader(self):
        ...         return DataLoader(torch.ones(8, 1), batch_size=4, shuffle=True)
        ...     def train_batch(self, batch, epoch_idx, batch_idx):
        ...         loss = (self.w(batch) - 2).pow(2).mean()
        ...         self.context.backward(loss)
        ...         self.context.step_optimizer(self.opt)
        ...         return {"loss": loss}
        >>> import tempfile
        >>> from detsamplers.trial import Epoch, init
        >>> with init(hparams={"global_batch_size": 4}) as context:
        ...     Trainer(Fit(context), context).fit(Epoch(5), checkpoint_dir=tempfile.mkdtemp())
        ...     round(context.models[0].weight.item(), 3)
        [batch 10] training: loss=0.428004
        2.0
    """

    def __init__(self, trial: Trial, context: TrialContext) -> None:
        if not isinstance(trial, Trial):
            raise TypeError(f"trial should be a Trial, but got {type(trial).__name__}")
        self.trial = trial
        self.context = context
        self._retention = _retention.Retention("none", None, True)
        self._last_validation: tuple[int, dict[str, Any]] = (-1, {})
        self._signals = _preemption.StopSignals(())

    def fit(
        self,
        max_length: Length,
        checkpoint_period: Length | None = None,
        validation_period: Length | None = None,
        checkpoint_dir: str = "checkpoints",
        latest_checkpoint: str | None = None,
        test_mode: bool = False,
        reporting_period: Length = _REPORTING_PERIOD,
        checkpoint_policy: str = "best",
        searcher_metric: str | None = None,
        smaller_is_better: bool = True,
        keep_last: int | None = None,
        keep_best: int = 0,
        stop_signals: Iterable[int] = _preemption.DEFAULT_STOP_SIGNALS,
        stop_check_period: Length | None = None,
    ) -> None:
        """Train until ``max_length`` in total, resuming from ``latest_checkpoint`` if given.

        A stop signal or ``context.set_stop_requested(True)`` pauses the run: every rank
        finishes the same batch, one checkpoint is written and ``fit`` returns normally
        (NOTE [ stop agreement ]). ``latest_checkpoint="auto"`` then resumes it.

        Args:
            max_length: The total length; a resumed run trains only what is left.
            checkpoint_period: Checkpoint every so many batches (and always at the end).
            validation_period: Validate every so many batches (and at the end, if the
                trial has a validation loader).
            checkpoint_dir: Where checkpoint folders and ``metrics.jsonl`` go.
            latest_checkpoint: A checkpoint folder to resume from, or ``"auto"``: the
                newest complete checkpoint in ``checkpoint_dir`` if there is one, else a
                fresh start (for ``torchrun --max-restarts``, and relaunches after a pause).
            test_mode: Train one batch, validate one batch, checkpoint and return.
            reporting_period: Reduce and log the training metrics every so many batches
                (and at every validation, checkpoint and stop, as Determined does).
            checkpoint_policy: After a validation, ``"all"`` checkpoints, ``"best"``
                checkpoints if ``searcher_metric`` improved (``"all"`` without one, as
                Determined's local training does), ``"none"`` does not.
            searcher_metric: The validation metric that ranks checkpoints.
            smaller_is_better: Whether a lower ``searcher_metric`` is better.
            keep_last: Keep only this many newest checkpoints (``None``: keep all).
            keep_best: With ``keep_last``, also keep this many best by ``searcher_metric``.
            stop_signals: The signals that pause the run instead of killing it.
            stop_check_period: How often the ranks check for a stop; ``None`` spaces the
                checks to cost under 1% of training time, at most a second apart.

        Raises:
            ReproducibilityError: the training loader cannot resume reproducibly, or the
                checkpoint was saved with another global batch size, seed or dataset.
        """
        retention = _retention.Retention(
            checkpoint_policy, searcher_metric, smaller_is_better, keep_last, keep_best
        )
        with _preemption.StopSignals(stop_signals) as signals:
            self._fit(
                max_length, checkpoint_period, validation_period, checkpoint_dir,
                latest_checkpoint, test_mode, reporting_period, retention, signals,
                stop_check_period,
            )  # fmt: skip

    def _fit(
        self,
        max_length: Length,
        checkpoint_period: Length | None,
        validation_period: Length | None,
        checkpoint_dir: str,
        latest_checkpoint: str | None,
        test_mode: bool,
        reporting_period: Length,
        retention: _retention.Retention,
        signals: _preemption.StopSignals,
        stop_check_period: Length | None,
    ) -> None:
        context, dist = self.context, self.context.distributed
        self._signals = signals
        started = time.perf_counter()

        # Setup: where training stands, before the trial builds its loaders.
        latest_checkpoint = _preemption.resolve_latest(latest_checkpoint, checkpoint_dir, dist)
        if latest_checkpoint is not None:
            retention.resumed_from = os.path.abspath(latest_checkpoint)
        self._retention, self._last_validation = retention, (-1, {})
        saved = None if latest_checkpoint is None else _checkpoint.read_metadata(latest_checkpoint)
        if latest_checkpoint is not None and saved is None:
            raise ValueError(
                "latest_checkpoint should be a complete checkpoint folder, but got "
                f"{latest_checkpoint!r}; use find_latest_checkpoint(checkpoint_dir)"
            )
        initial = 0 if saved is None else int(saved["batches_trained"])
        context._initial_batch = context._current_batch = initial
        global_batch = context.get_global_batch_size()
        context.get_per_slot_batch_size()  # the world size must divide the global batch

        # Data: the training loader, seeded, sharded and skipped (NOTE [ trial data ]).
        user_loader = self.trial.build_training_data_loader()
        data = _data.training_data(user_loader, context)
        epoch_records = _data.records_per_epoch(user_loader) if data is None else data.records
        rank, size = dist.get_rank(), dist.get_size()
        train_data = user_loader if data is None else data.build(initial, size, rank)
        _preemption.shield_workers(train_data, signals)  # NOTE [ stop agreement ]
        total = to_batches("max_length", max_length, epoch_records, global_batch)
        if test_mode:
            total = min(total, initial + 1)
        periods = {
            "checkpoint": checkpoint_period,
            "validation": validation_period,
            "reporting": reporting_period,
            "stop_check": stop_check_period,
        }
        every = {
            name: None
            if p is None
            else to_batches(f"{name}_period", p, epoch_records, global_batch)
            for name, p in periods.items()
        }

        # Model: the callbacks, and the ranks' agreement on what defines the run.
        callbacks = self.trial.build_callbacks()
        data_seed = None if data is None else data.seed
        here = {
            "global_batch_size": global_batch,
            "seed": context.get_trial_seed(),
            "dataset_length": epoch_records,
            "data_seed": data_seed,
        }
        views = dist.all_gather(here)
        if any(view != here for view in views):
            raise ReproducibilityError(f"the ranks should agree on {here}, but they got {views}")

        # Load checkpoint: check the data, then restore state and RNG (NOTE [ trial RNG ]).
        if saved is not None and latest_checkpoint is not None:
            _checkpoint.check_resume(latest_checkpoint, saved, here)
            same_world = saved["world_size"] == size
            rank_state = _checkpoint.load_rank_state(latest_checkpoint, rank) if same_world else {}
            if data is not None and same_world:  # checks this rank's stream digest
                data.load(train_data, rank_state["loader"])
            elif data is not None:
                digest = data.global_digest(initial, size)
                _checkpoint.check_resume(latest_checkpoint, saved, {"data_global_digest": digest})
            _checkpoint.restore_state(latest_checkpoint, context, callbacks)
            if same_world:
                _rng.restore(rank_state["rng"])
            else:
                _rng.seed_all(context.get_trial_seed(), "rank", rank, initial)
        else:
            _rng.seed_all(context.get_trial_seed(), "rank", rank, 0)
        if dist.is_chief:  # rows past the checkpoint are superseded (NOTE [ stop agreement ])
            _preemption.truncate_metrics(checkpoint_dir, initial)
            retention.remember(checkpoint_dir)

        # Loop.
        reporter = Reporter(checkpoint_dir, dist.is_chief, initial, total)
        entries = [e for e in context.reducers if e.for_training]
        window = Window(entries)
        batches = initial
        last_checkpoint = last_validation = -1
        agreement = _preemption.StopAgreement(dist, initial, every["stop_check"])
        stop = 0
        for callback in callbacks.values():
            callback.on_training_start()
        iterator = iter(train_data)
        while batches < total:
            epoch_idx = epoch_of(batches, global_batch, epoch_records)
            context._current_epoch = epoch_idx
            batch = context.to_device(next(iterator))
            for model in context.models:
                model.train()
            metrics = self.trial.train_batch(batch, epoch_idx, batches)
            if batches == initial and saved is not None:
                reporter.log("resume", batches, {"seconds": time.perf_counter() - started})
            batches += 1
            context._current_batch = batches
            window.add(metrics, context.get_per_slot_batch_size())
            for callback in callbacks.values():
                callback.on_training_batch_end(batches - 1, metrics)
            for scheduler in context.lr_schedulers:
                if scheduler.step_mode == _EVERY_BATCH:
                    scheduler.step()
            if epoch_of(batches, global_batch, epoch_records) > epoch_idx:
                for scheduler in context.lr_schedulers:
                    if scheduler.step_mode == _EVERY_EPOCH:
                        scheduler.step()
                for callback in callbacks.values():
                    callback.on_training_epoch_end(epoch_idx)
            reporter.advance()
            end = batches == total
            validate = self._due(every["validation"], batches) or bool(end and every["validation"])
            checkpoint = self._due(every["checkpoint"], batches) or end
            if end or validate or checkpoint or self._due(every["reporting"], batches):
                reporter.log("training", batches, window.reduce(dist))
                window = Window(entries)
            if validate:
                self._validate(reporter, batches, callbacks, test_mode)
                last_validation = batches
                done, validated = self._last_validation
                checkpoint |= done == batches and retention.after_validation(validated, dist)
            if checkpoint:
                self._checkpoint(checkpoint_dir, callbacks, data, epoch_records, batches)
                last_checkpoint = batches
            if not end and (agreement.due(batches) or validate):
                stop = agreement.agree(batches, self._stop_code(signals))
                if stop:
                    break
        if test_mode and last_validation != batches:
            self._validate(reporter, batches, callbacks, test_mode)
        if test_mode and last_checkpoint != batches:
            self._checkpoint(checkpoint_dir, callbacks, data, epoch_records, batches)

        # Stop: the ranks agreed to pause after this batch (NOTE [ stop agreement ]).
        if stop:
            stopping = time.perf_counter()
            if window.batches:
                reporter.log("training", batches, window.reduce(dist))
            if last_checkpoint != batches:
                self._checkpoint(checkpoint_dir, callbacks, data, epoch_records, batches)
            reason = _preemption.STOP_REASONS[stop]
            seconds = time.perf_counter() - stopping
            reporter.log("stop", batches, {"reason": reason, "checkpoint_seconds": seconds})

        # Close.
        reporter.close()
        for callback in callbacks.values():
            callback.on_training_end()

    @staticmethod
    def _due(period: int | None, batches: int) -> bool:
        return period is not None and batches % period == 0

    def _stop_code(self, signals: _preemption.StopSignals) -> int:
        if signals.received is not None:
            return _preemption.SIGNALLED
        return _preemption.REQUESTED if self.context.get_stop_requested() else 0

    def _validate(
        self, reporter: Reporter, batches: int, callbacks: dict[str, Any], test_mode: bool
    ) -> None:
        """Validate on every rank under a forked RNG; reduce and log the metrics."""
        context, dist, trial = self.context, self.context.distributed, self.trial
        full = _overrides(trial, "evaluate_full_dataset") and not _overrides(
            trial, "evaluate_batch"
        )
        if not (full or _overrides(trial, "evaluate_batch")):
            return
        for model in context.models:
            model.eval()
        with _rng.fork(context.get_trial_seed(), "validation", batches), torch.no_grad():
            data = _data.validation_loader(trial.build_validation_data_loader(), context, full)
            _preemption.shield_workers(data, self._signals)
            if full:
                metrics = trial.evaluate_full_dataset(data) if dist.is_chief else None
                metrics = dist.broadcast(metrics)
            else:
                window = Window([e for e in context.reducers if e.for_validation])
                for batch in data:
                    window.add(trial.evaluate_batch(context.to_device(batch)), _length(batch))
                    if test_mode:
                        break
                metrics = window.reduce(dist)
        reporter.log("validation", batches, metrics)
        self._last_validation = (batches, metrics)
        for callback in callbacks.values():
            callback.on_validation_end(metrics)

    def _checkpoint(
        self,
        checkpoint_dir: str,
        callbacks: dict[str, Any],
        data: _data.TrainingData | None,
        epoch_records: int,
        batches: int,
    ) -> None:
        """Save a checkpoint at ``batches`` (a collective: every rank calls it)."""
        context, dist = self.context, self.context.distributed
        done, validation = self._last_validation
        loader_state = None
        if data is not None:  # a fresh stream at the position: workers prefetch ahead
            loader_state = data.state(batches, dist.get_size(), dist.get_rank())
        metadata: dict[str, Any] = {
            "format_version": _checkpoint.FORMAT_VERSION,
            "batches_trained": batches,
            "records_consumed": batches * context.get_global_batch_size(),
            "global_batch_size": context.get_global_batch_size(),
            "world_size": dist.get_size(),
            "seed": context.get_trial_seed(),
            "dataset_length": epoch_records,
            "data_seed": None if data is None else data.seed,
            "data_fingerprint": None if loader_state is None else loader_state["fingerprint"],
            "data_digest": None if loader_state is None else loader_state["digest"],
            "data_global_digest": None
            if data is None
            else data.global_digest(batches, dist.get_size()),
            "hparams": _json_or_none(context.get_hparams()),
            "validation_metrics": _json_or_none(validation) if done == batches else None,
        }
        rank_state = {"rng": _rng.capture(), "loader": loader_state}
        path = _checkpoint.save(checkpoint_dir, context, callbacks, metadata, rank_state)
        if dist.is_chief:  # only once the new folder is complete (NOTE [ checkpoint retention ])
            self._retention.apply(checkpoint_dir, batches)
        for callback in callbacks.values():
            callback.on_checkpoint_write_end(path)
