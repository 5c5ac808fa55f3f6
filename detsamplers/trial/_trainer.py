"""``Trainer``: a lean, torchrun-native loop whose pause and resume are exact.

Run a script that builds a trial under ``init()`` and calls ``Trainer(trial, context).fit``::

    OMP_NUM_THREADS=1 torchrun --nproc_per_node=2 train.py   # or: python train.py

``fit`` reads top to bottom in phases: setup (the checkpoint to resume, callbacks'
startup) → data (the training loader, sharded and skipped; lengths) → model (the ranks'
agreement) → load checkpoint (state, RNG, checks) → loop (train, report, validate,
checkpoint) → close (a last validation and checkpoint, callbacks' shutdown). See
NOTE [ trial data ], NOTE [ epoch length ], NOTE [ trial RNG ], NOTE [ checkpoint layout ],
NOTE [ metric reduction ], NOTE [ callback ranks ], NOTE [ gradient aggregation ],
NOTE [ scheduler stepping ], NOTE [ AMP ], NOTE [ stop agreement ],
NOTE [ checkpoint retention ], NOTE [ batch size schedule ] and NOTE [ trial growth ].

NOTE [ training workloads ]
As in Determined's trial controller, the training metrics of a window of batches are
reduced and reported whenever any period ends (reporting, validation, checkpoint, or
``max_length``), before that validation or checkpoint; ``on_training_workload_end``
then runs with them. When training ends, the trial is validated unless the last batch
was just validated (if it has a validation loader and an evaluate method), and then
checkpointed unless the last batch was just checkpointed. A stop the ranks agreed on
(NOTE [ stop agreement ]) skips that last validation, as Determined's ``_ShouldExit`` does,
and only checkpoints.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from .._errors import ReproducibilityError, check_bool
from . import (
    _aggregation,
    _checkpoint,
    _data,
    _preemption,
    _retention,
    _rng,
    _schedule,
    _tensorboard,
)
from ._callbacks import CHIEF_ONLY, Callback, call_epoch_start
from ._clock import Clock
from ._context import TrialContext
from ._lr_scheduler import auto_step
from ._reducer import (
    Window,
    as_metrics,
    batch_means,
    merge,
    reduce_wrapped,
    reducers_for,
)
from ._report import Reporter
from ._trial import Trial, takes_batch_idx
from ._units import Batch, Epoch, Length, check_length

__all__ = ["Trainer"]

_REPORTING_PERIOD = Batch(100)


def _overrides(trial: Trial, name: str) -> bool:
    return getattr(type(trial), name) is not getattr(Trial, name)


def _json_or_none(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


@contextlib.contextmanager
def _profiling(profiler: Any) -> Iterator[None]:
    if profiler is None:
        yield
        return
    with profiler:
        yield


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
        ...         return loss
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
        self.callbacks: dict[str, Callback] = {}
        self._retention = _retention.Retention("none", None, True)
        self._last_validation: tuple[int, dict[str, Any]] = (-1, {})
        self._signals = _preemption.StopSignals(())
        self._weights_only = True

    def fit(
        self,
        max_length: Length,
        checkpoint_period: Length | None = None,
        validation_period: Length | None = None,
        checkpoint_dir: str = "checkpoints",
        latest_checkpoint: str | None = None,
        test_mode: bool = False,
        reporting_period: Length = _REPORTING_PERIOD,
        step_zero_validation: bool = False,
        average_training_metrics: bool = True,
        checkpoint_policy: str = "best",
        searcher_metric: str | None = None,
        smaller_is_better: bool = True,
        keep_last: int | None = None,
        keep_best: int = 0,
        stop_signals: Iterable[int] = _preemption.DEFAULT_STOP_SIGNALS,
        stop_check_period: Length | None = None,
        dataset_growth: bool = False,
        weights_only: bool = True,
    ) -> None:
        """Train until ``max_length`` in total, resuming from ``latest_checkpoint`` if given.

        A stop signal or ``context.set_stop_requested(True)`` pauses the run: every rank
        finishes the same batch, one checkpoint is written and ``fit`` returns normally
        (NOTE [ stop agreement ]). ``latest_checkpoint="auto"`` then resumes it.

        Args:
            max_length: The total length; a resumed run trains only what is left.
            checkpoint_period: Checkpoint every so many batches (and always at the end).
            validation_period: Validate every so many batches (and at the end, if the
                trial has a validation loader and an evaluate method).
            checkpoint_dir: Where checkpoint folders and ``metrics.jsonl`` go.
            latest_checkpoint: A checkpoint folder to resume from, or ``"auto"``: the
                newest complete checkpoint in ``checkpoint_dir`` if there is one, else a
                fresh start (for ``torchrun --max-restarts``, and relaunches after a pause).
            test_mode: Train one batch, validate one batch, checkpoint and return.
            reporting_period: Reduce and log the training metrics at least every so many
                batches (NOTE [ training workloads ]).
            step_zero_validation: Validate once before the first batch of a fresh run.
            average_training_metrics: Reduce the training metrics over every rank (the
                default); ``False`` reports rank 0's alone and skips that all-gather.
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
            dataset_growth: Let a resume whose dataset has more records than the
                checkpoint's record a growth at the sample reached: the rest of the epoch
                trains every record not yet trained and every new record once, and later
                epochs are ``len(dataset)`` long (NOTE [ trial growth ]). Needs a
                ``detsamplers.loader.DataLoader`` with ``shuffle=True``, or with a
                ``MixSampler`` that adds a dataset appended last from the sample reached
                (NOTE [ trial mixture ]). A run that grew resumes without it, from the
                history in its checkpoint.
            weights_only: Read the checkpoint's ``state-dict.pth`` as data (the default).
                ``False`` unpickles it in full, which runs any code the file holds: only
                for checkpoints you wrote and trust whose state holds your own classes;
                prefer ``torch.serialization.add_safe_globals`` (NOTE [ checkpoint files
                are data ]).

        A resume may change the world size and, over a ``detsamplers.loader.DataLoader``
        or a ``WebDatasetSource``, the global batch size: training continues at the
        sample the checkpoint reached (NOTE [ trial data ]). ``hparams["global_batch_size"]``
        may be a schedule (NOTE [ batch size schedule ]): the trainer rebuilds the
        training loader at each switch and continues at exactly the next sample; epochs
        are counted in samples (NOTE [ epoch length ]).

        Raises:
            ReproducibilityError: the training loader cannot resume reproducibly, or the
                checkpoint was saved with another seed or dataset (or, over a loader the
                trial skips itself, another global batch size), or a global batch size
                schedule whose past differs from the one trained; a dataset that shrank,
                or grew without ``dataset_growth``.
            ValueError: a bad schedule (the message names the segment), or a size the
                world size does not divide; a ``checkpoint_dir`` a rank cannot write; a
                checkpoint that is incomplete, invalid, of a newer format or not data;
                ``dataset_growth`` over a loader that cannot grow (a ``WebDatasetSource``,
                a user's sampler or batch sampler).
        """
        retention = _retention.Retention(
            checkpoint_policy, searcher_metric, smaller_is_better, keep_last, keep_best
        )
        dataset_growth = check_bool("dataset_growth", dataset_growth)
        self._weights_only = check_bool("weights_only", weights_only)
        with _preemption.StopSignals(stop_signals) as signals:
            self._fit(
                max_length, checkpoint_period, validation_period, checkpoint_dir,
                latest_checkpoint, test_mode, reporting_period, step_zero_validation,
                average_training_metrics, retention, signals, stop_check_period, dataset_growth,
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
        step_zero_validation: bool,
        average_training_metrics: bool,
        retention: _retention.Retention,
        signals: _preemption.StopSignals,
        stop_check_period: Length | None,
        dataset_growth: bool,
    ) -> None:
        context, dist, trial = self.context, self.context.distributed, self.trial
        self._signals = signals
        started = time.perf_counter()

        # Setup: where training stands, before the trial builds its loaders.
        checkpoint_dir = _checkpoint.check_checkpoint_dir(checkpoint_dir, dist)
        latest_checkpoint = _preemption.resolve_latest(latest_checkpoint, checkpoint_dir, dist)
        if latest_checkpoint is not None:
            retention.resumed_from = os.path.abspath(latest_checkpoint)
        self._retention, self._last_validation = retention, (-1, {})
        saved = None
        if latest_checkpoint is not None:  # NOTE [ checkpoint metadata ]
            saved = _checkpoint.read_checkpoint_metadata(latest_checkpoint, "latest_checkpoint")
        initial = 0 if saved is None else int(saved["batches_trained"])
        context._initial_batch = initial
        # The samples trained (NOTE [ trial data ]): a resume may change the global batch.
        samples = 0 if saved is None else _checkpoint.samples_trained(saved)
        periods = self._periods(
            checkpoint_period, validation_period, reporting_period, stop_check_period
        )
        check_length("max_length", max_length)
        for name, period in periods.items():
            if period is not None:
                check_length(f"{name}_period", period)
        context._clock = None
        if "global_batch_size" in context.hparams:  # NOTE [ batch size schedule ]
            schedule = context._batch_schedule()
            context._clock = Clock.restore(schedule, context.aggregation_frequency, saved, samples)
        if (validation_period is not None or step_zero_validation) and not self._validates():
            raise ValueError(
                f"{type(trial).__name__} should define build_validation_data_loader and "
                "evaluate_batch (or evaluate_full_dataset) to validate, but it does not; drop "
                "validation_period and step_zero_validation, or define them"
            )
        self.callbacks = trial.build_callbacks()
        self._call("on_trial_startup", initial, latest_checkpoint)
        try:
            # Data: the training loader, seeded, sharded and skipped (NOTE [ trial data ]).
            user_loader = trial.build_training_data_loader()
            if context._clock is None:
                context._inferred_global_batch = _data.inferred_global_batch(user_loader, context)
                schedule = context._batch_schedule()
                context._clock = Clock.restore(
                    schedule, context.aggregation_frequency, saved, samples
                )
            clock = context._clock
            rank, size = dist.get_rank(), dist.get_size()
            clock.check_world_size(size)
            context.get_per_slot_batch_size()  # the world size must divide the global batch
            data = _data.training_data(user_loader, context)
            # NOTE [ trial growth ]: the saved history, and a growth recorded now if allowed.
            data = _data.grown_data(data, saved, clock.samples, dataset_growth, latest_checkpoint)
            if data is None and schedule.sizes_from(clock.samples) != [clock.size]:
                raise ValueError(
                    "global_batch_size should be one size when the trainer cannot rebuild the "
                    f"training loader, but got global_batch_size={schedule.describe()!r} with "
                    "dataset reproducibility checks disabled; return a "
                    "detsamplers.loader.DataLoader or WebDatasetSource, or pass an int"
                )
            epoch_records = _data.records_per_epoch(user_loader) if data is None else data.records
            clock.restore_epoch(epoch_records, saved)
            built = context.get_per_slot_batch_size()
            train_data = user_loader if data is None else data.build(clock.samples, size, rank)
            _preemption.shield_workers(train_data, signals)  # NOTE [ stop agreement ]
            total = clock.total(max_length)
            if test_mode:
                total = initial + 1
            stop_every = periods["stop_check"]
            if isinstance(stop_every, Epoch):  # checks are spaced in batches
                stop_every = Batch(stop_every.length * clock.batches_per_epoch())

            # Model: the ranks' agreement on what defines the run.
            data_seed = None if data is None else data.seed
            here = {
                "global_batch_size": clock.size,
                "batch_size_schedule": schedule.describe(),
                "seed": context.get_trial_seed(),
                "dataset_length": epoch_records,
                "dataset_growth": None if data is None else data.history,
                "data_seed": data_seed,
                "aggregation_frequency": context.aggregation_frequency,
            }
            views = dist.all_gather(here)
            if any(view != here for view in views):
                raise ReproducibilityError(
                    f"the ranks should agree on {here}, but they got {views}"
                )

            # Load checkpoint: check the data, then restore state and RNG (NOTE [ trial RNG ]).
            if saved is not None and latest_checkpoint is not None:
                self._load(latest_checkpoint, saved, here, data, train_data, clock)
            else:
                _rng.seed_all(context.get_trial_seed(), "rank", rank, 0)
            if dist.is_chief:  # rows past the checkpoint are superseded (NOTE [ stop agreement ])
                _preemption.truncate_metrics(checkpoint_dir, initial)
                retention.remember(checkpoint_dir)

            # Loop.
            reporter = Reporter(checkpoint_dir, dist.is_chief, initial, total)
            limit = Batch(initial + 1) if test_mode else max_length
            last = {"validation": -1, "checkpoint": -1}
            if saved is not None:  # as Determined restores its trial state's last_val, last_ckpt
                last = {"validation": int(saved.get("last_validation", -1)), "checkpoint": initial}
            self._call("on_training_start")
            if step_zero_validation and initial == 0 and self._validates():
                last["validation"] = self._validate(reporter, 0, test_mode)
            window = self._open_window()
            batches = initial
            iterator = iter(train_data)
            stop_period = None if stop_every is None else stop_every.length
            agreement = _preemption.StopAgreement(dist, initial, stop_period)
            stop = 0
            with _profiling(context.profiler):
                while not clock.reached(limit):
                    switched = None
                    per_slot = context.get_per_slot_batch_size()
                    if data is not None and per_slot != built:  # NOTE [ batch size schedule ]
                        switched = time.perf_counter()
                        del iterator
                        train_data = data.build(clock.samples, size, rank, per_slot)
                        _preemption.shield_workers(train_data, signals)
                        iterator, built = iter(train_data), per_slot
                    window.add(*self._train_batch(iterator, clock))
                    if batches == initial and saved is not None:
                        elapsed = time.perf_counter() - started
                        reporter.log("resume", batches, {"seconds": elapsed})
                    if switched is not None:
                        seconds = time.perf_counter() - switched
                        row = {"global_batch_size": clock.size, "samples_trained": clock.samples}
                        reporter.log("batch_size", batches, {**row, "seconds": seconds})
                    clock.advance()
                    batches = clock.batches
                    reporter.advance()
                    due = {n for n, p in periods.items() if p is not None and clock.due(p)}
                    end = clock.reached(limit)
                    if due - {"stop_check"} or end:  # NOTE [ training workloads ]
                        self._report(reporter, window, batches, average_training_metrics)
                        window = self._open_window()
                    validated = "validation" in due and self._validates()
                    checkpoint = "checkpoint" in due
                    if validated:
                        last["validation"] = self._validate(reporter, batches, test_mode)
                        metrics = self._last_validation[1]
                        checkpoint |= retention.after_validation(metrics, dist)
                    if checkpoint and last["checkpoint"] != batches:
                        self._checkpoint(checkpoint_dir, data, epoch_records, clock, last)
                        last["checkpoint"] = batches
                    if not end and (agreement.due(batches) or validated):
                        stop = agreement.agree(batches, self._stop_code(signals))
                        if stop:
                            break

            # Stop: the ranks agreed to pause after this batch (NOTE [ stop agreement ]).
            if stop:
                stopping = time.perf_counter()
                if window.batches:
                    self._report(reporter, window, batches, average_training_metrics)
                if last["checkpoint"] != batches:
                    self._checkpoint(checkpoint_dir, data, epoch_records, clock, last)
                reason = _preemption.STOP_REASONS[stop]
                seconds = time.perf_counter() - stopping
                reporter.log("stop", batches, {"reason": reason, "checkpoint_seconds": seconds})
                reporter.close()
                return

            # Close: a last validation, then a last checkpoint (NOTE [ training workloads ]).
            if last["validation"] != batches and self._validates():
                last["validation"] = self._validate(reporter, batches, test_mode)
                retention.after_validation(self._last_validation[1], dist)  # the best so far
            if last["checkpoint"] != batches:
                self._checkpoint(checkpoint_dir, data, epoch_records, clock, last)
            reporter.close()
        finally:
            self._call("on_trial_shutdown")

    # The phases' steps.

    @staticmethod
    def _periods(
        checkpoint: Length | None,
        validation: Length | None,
        reporting: Length,
        stop_check: Length | None,
    ) -> dict[str, Length | None]:
        return {
            "checkpoint": checkpoint,
            "validation": validation,
            "reporting": reporting,
            "stop_check": stop_check,
        }

    def _stop_code(self, signals: _preemption.StopSignals) -> int:
        if signals.received is not None:
            return _preemption.SIGNALLED
        return _preemption.REQUESTED if self.context.get_stop_requested() else 0

    def _call(self, hook: str, *args: Any) -> None:
        """Run ``hook`` of every callback on its ranks (NOTE [ callback ranks ])."""
        if hook in CHIEF_ONLY and not self.context.distributed.is_chief:
            return
        for callback in self.callbacks.values():
            getattr(callback, hook)(*args)

    def _load(
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
        _checkpoint.restore_state(path, context, self.callbacks, self._weights_only)
        if "gradients" in rank_state:
            _aggregation.restore_gradients(context.optimizers, rank_state["gradients"], path)
        if same_world:
            _rng.restore(rank_state["rng"])
        else:
            _rng.seed_all(context.get_trial_seed(), "rank", rank, initial)

    def _train_batch(self, iterator: Iterator[Any], clock: Clock) -> tuple[dict[str, Any], int]:
        """Train the clock's next global batch and step what follows; its metrics and length."""
        context, trial = self.context, self.trial
        batch_idx, epoch_idx = clock.batches, clock.epoch
        first, last = clock.is_epoch_start(), clock.is_epoch_end()
        context._current_batch_idx = batch_idx
        context._current_epoch = (epoch_idx, first, last)
        if first:
            for callback in self.callbacks.values():
                call_epoch_start(callback, epoch_idx)
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
            self._call("on_training_epoch_end", epoch_idx)
        return metrics, trial.get_batch_length(batch)

    def _open_window(self) -> Window:
        for entry in self.context.reducers:
            if entry.for_training:
                entry.reset()
        return Window()

    def _report(self, reporter: Reporter, window: Window, batches: int, average: bool) -> None:
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
        self._call("on_training_workload_end", metrics, batch_metrics)

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
