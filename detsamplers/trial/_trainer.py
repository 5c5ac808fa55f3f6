"""``Trainer``: a lean, torchrun-native loop whose pause and resume are exact.

Run a script that builds a trial under ``init()`` and calls ``Trainer(trial, context).fit``::

    OMP_NUM_THREADS=1 torchrun --nproc_per_node=2 train.py   # or: python train.py

``fit`` reads top to bottom in phases, one method each: setup (``_setup``: the checkpoint
to resume, callbacks' startup) → data (``_build_data``: the training loader, sharded and
skipped; lengths) → model (``_agree``: the ranks' agreement) → load checkpoint
(``_restore``: state, RNG, checks) → loop (``_loop``: train, report, validate, checkpoint)
→ close (``_close``: a last validation and checkpoint; or ``_pause`` after an agreed stop),
then callbacks' shutdown. Each reads the frozen ``_Settings`` of ``fit`` and the answers of
the phases before it (``_Start``, ``_Run``, ``_End``). The phases the loop runs are objects
built once the data is (``_Phases``: ``LoadPhase``, ``TrainPhase``, ``ValidatePhase``,
``SavePhase``), each given what it reads and answering through what it returns. See
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
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .._errors import ReproducibilityError, check_bool
from . import (
    _checkpoint,
    _data,
    _preemption,
    _retention,
    _rng,
)
from ._callbacks import Callback
from ._clock import Clock
from ._context import TrialContext
from ._phase import Callbacks
from ._phase_load import LoadPhase
from ._phase_save import SavePhase
from ._phase_train import TrainPhase
from ._phase_validate import ValidatePhase, validates
from ._reducer import Window
from ._report import Reporter
from ._schedule import BatchSchedule
from ._trial import Trial
from ._units import Batch, Epoch, Length, check_length

__all__ = ["Trainer"]

_REPORTING_PERIOD = Batch(100)


def _stop_code(signals: _preemption.StopSignals, context: TrialContext) -> int:
    """Why this rank would stop now: a signal, a request, or 0 (NOTE [ stop agreement ])."""
    if signals.received is not None:
        return _preemption.SIGNALLED
    return _preemption.REQUESTED if context.get_stop_requested() else 0


def _validated_at(validate: ValidatePhase | None, batches: int) -> dict[str, Any] | None:
    """The metrics of this fit's validation at ``batches``, if there was one."""
    return None if validate is None else validate.metrics_at(batches)


@contextlib.contextmanager
def _profiling(profiler: Any) -> Iterator[None]:
    if profiler is None:
        yield
        return
    with profiler:
        yield


@dataclass(frozen=True)
class _Settings:
    """What ``fit`` was asked for: every phase reads it, none changes it."""

    max_length: Length
    periods: dict[str, Length | None]  # checkpoint, validation, reporting, stop_check
    checkpoint_dir: str
    latest_checkpoint: str | None
    test_mode: bool
    step_zero_validation: bool
    average_training_metrics: bool
    dataset_growth: bool
    retention: _retention.Retention
    signals: _preemption.StopSignals
    weights_only: bool


@dataclass(frozen=True)
class _Start:
    """Where training stands when ``fit`` begins: the setup phase's answer."""

    checkpoint_dir: str  # checked: every rank can write in it
    latest_checkpoint: str | None  # resolved ("auto" is the newest complete one, or None)
    saved: dict[str, Any] | None  # its metadata (NOTE [ checkpoint metadata ])
    initial: int  # global batches trained
    samples: int  # samples trained (NOTE [ trial data ])
    clock: Clock | None  # built now if hparams give the global batch size


@dataclass(frozen=True)
class _Run:
    """The training data as the data phase built it, and the lengths it implies."""

    clock: Clock
    schedule: BatchSchedule
    data: _data.TrainingData | None  # None: the trial's own loader, used as given
    train_data: Any  # the loader the loop starts with
    built: int  # the per-slot batch size ``train_data`` was built with
    epoch_records: int
    total: int | None  # global batches the run ends at (None: too far to count)
    stop_every: Length | None  # how often the ranks check for a stop, in batches
    rank: int
    size: int


@dataclass(frozen=True)
class _Phases:
    """The phases the loop runs, built once the data is: each with what it reads."""

    callbacks: Callbacks
    load: LoadPhase
    train: TrainPhase
    validate: ValidatePhase | None  # None: the trial does not validate
    save: SavePhase


@dataclass(frozen=True)
class _End:
    """How the loop ended: an agreed stop (its code) or the end of training (0)."""

    stop: int
    reporter: Reporter
    window: Window  # the training metrics not yet reported
    batches: int
    last: dict[str, int]  # the batches last validated and checkpointed


class Trainer:
    """Train a :class:`Trial` with the context it was built with.

    Examples:
        >>> import torch
        >>> from detsamplers.loader import DataLoader
        >>> from detsamplers.trial import Trial
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
        weights_only = check_bool("weights_only", weights_only)
        with _preemption.StopSignals(stop_signals) as signals:
            periods = self._periods(
                checkpoint_period, validation_period, reporting_period, stop_check_period
            )
            self._fit(
                _Settings(
                    max_length, periods, checkpoint_dir, latest_checkpoint, test_mode,
                    step_zero_validation, average_training_metrics, dataset_growth, retention,
                    signals, weights_only,
                )
            )  # fmt: skip

    def _fit(self, settings: _Settings) -> None:
        started = time.perf_counter()
        start = self._setup(settings)
        self.callbacks = self.trial.build_callbacks()
        callbacks = Callbacks(self.callbacks, self.context.distributed)
        callbacks.call("on_trial_startup", start.initial, start.latest_checkpoint)
        try:
            run = self._build_data(settings, start)
            here = self._agree(run)
            phases = self._phases(settings, start, run, callbacks)
            self._restore(settings, start, here, run, phases.load)
            end = self._loop(settings, start, run, phases, started)
            if end.stop:
                self._pause(settings, run, phases, end)
            else:
                self._close(settings, run, phases, end)
        finally:
            callbacks.call("on_trial_shutdown")

    # The phases of ``fit``, in order.

    def _setup(self, settings: _Settings) -> _Start:
        """Where training stands, before the trial builds its loaders; the checks of ``fit``."""
        context, dist = self.context, self.context.distributed
        checkpoint_dir = _checkpoint.check_checkpoint_dir(settings.checkpoint_dir, dist)
        latest = _preemption.resolve_latest(settings.latest_checkpoint, checkpoint_dir, dist)
        if latest is not None:
            settings.retention.resumed_from = os.path.abspath(latest)
        saved = None
        if latest is not None:  # NOTE [ checkpoint metadata ]
            saved = _checkpoint.read_checkpoint_metadata(latest, "latest_checkpoint")
        initial = 0 if saved is None else int(saved["batches_trained"])
        context._begin_fit(initial)
        # The samples trained (NOTE [ trial data ]): a resume may change the global batch.
        samples = 0 if saved is None else _checkpoint.samples_trained(saved)
        check_length("max_length", settings.max_length)
        for name, period in settings.periods.items():
            if period is not None:
                check_length(f"{name}_period", period)
        clock = None
        if "global_batch_size" in context.hparams:  # NOTE [ batch size schedule ]
            clock = context._restore_clock(saved, samples)
        validating = settings.periods["validation"] is not None or settings.step_zero_validation
        if validating and not validates(self.trial):
            raise ValueError(
                f"{type(self.trial).__name__} should define build_validation_data_loader and "
                "evaluate_batch (or evaluate_full_dataset) to validate, but it does not; drop "
                "validation_period and step_zero_validation, or define them"
            )
        return _Start(checkpoint_dir, latest, saved, initial, samples, clock)

    def _build_data(self, settings: _Settings, start: _Start) -> _Run:
        """The training loader, seeded, sharded and skipped (NOTE [ trial data ]); lengths."""
        context, dist = self.context, self.context.distributed
        user_loader = self.trial.build_training_data_loader()
        clock = start.clock
        if clock is None:
            context._infer_global_batch(_data.inferred_global_batch(user_loader, context))
            clock = context._restore_clock(start.saved, start.samples)
        schedule = clock.schedule
        rank, size = dist.get_rank(), dist.get_size()
        clock.check_world_size(size)
        context.get_per_slot_batch_size()  # the world size must divide the global batch
        data = _data.training_data(user_loader, context)
        # NOTE [ trial growth ]: the saved history, and a growth recorded now if allowed.
        data = _data.grown_data(
            data, start.saved, clock.samples, settings.dataset_growth, start.latest_checkpoint
        )
        if data is None and schedule.sizes_from(clock.samples) != [clock.size]:
            raise ValueError(
                "global_batch_size should be one size when the trainer cannot rebuild the "
                f"training loader, but got global_batch_size={schedule.describe()!r} with "
                "dataset reproducibility checks disabled; return a "
                "detsamplers.loader.DataLoader or WebDatasetSource, or pass an int"
            )
        epoch_records = _data.records_per_epoch(user_loader) if data is None else data.records
        clock.restore_epoch(epoch_records, start.saved)
        built = context.get_per_slot_batch_size()
        train_data = user_loader if data is None else data.build(clock.samples, size, rank)
        _preemption.shield_workers(train_data, settings.signals)  # NOTE [ stop agreement ]
        total = clock.total(settings.max_length)
        if settings.test_mode:
            total = start.initial + 1
        stop_every = settings.periods["stop_check"]
        if isinstance(stop_every, Epoch):  # checks are spaced in batches
            stop_every = Batch(stop_every.length * clock.batches_per_epoch())
        return _Run(
            clock, schedule, data, train_data, built, epoch_records, total, stop_every, rank, size
        )

    def _agree(self, run: _Run) -> dict[str, Any]:
        """The ranks' agreement on what defines the run (the model phase)."""
        context, data = self.context, run.data
        here = {
            "global_batch_size": run.clock.size,
            "batch_size_schedule": run.schedule.describe(),
            "seed": context.get_trial_seed(),
            "dataset_length": run.epoch_records,
            "dataset_growth": None if data is None else data.history,
            "data_seed": None if data is None else data.seed,
            "aggregation_frequency": context.aggregation_frequency,
        }
        views = context.distributed.all_gather(here)
        if any(view != here for view in views):
            raise ReproducibilityError(f"the ranks should agree on {here}, but they got {views}")
        return here

    def _phases(
        self, settings: _Settings, start: _Start, run: _Run, callbacks: Callbacks
    ) -> _Phases:
        """The phases of the loop, each given what it reads (the model phase's end)."""
        trial, context = self.trial, self.context
        validate = None
        if validates(trial):
            validate = ValidatePhase(trial, context, callbacks, settings.signals)
        return _Phases(
            callbacks,
            LoadPhase(context, callbacks, settings.weights_only),
            TrainPhase(trial, context, callbacks),
            validate,
            SavePhase(
                context, callbacks, start.checkpoint_dir, settings.retention, run.data,
                run.epoch_records,
            ),
        )  # fmt: skip

    def _restore(
        self, settings: _Settings, start: _Start, here: dict[str, Any], run: _Run, load: LoadPhase
    ) -> None:
        """Check the data, then restore state and RNG (NOTE [ trial RNG ])."""
        context, dist = self.context, self.context.distributed
        if start.saved is not None and start.latest_checkpoint is not None:
            load.load(
                start.latest_checkpoint, start.saved, here, run.data, run.train_data, run.clock
            )
        else:
            _rng.seed_all(context.get_trial_seed(), "rank", run.rank, 0)
        if dist.is_chief:  # rows past the checkpoint are superseded (NOTE [ stop agreement ])
            _preemption.truncate_metrics(start.checkpoint_dir, start.initial)
            settings.retention.remember(start.checkpoint_dir)

    def _loop(
        self, settings: _Settings, start: _Start, run: _Run, phases: _Phases, started: float
    ) -> _End:
        """Train, report, validate and checkpoint until the end or an agreed stop."""
        context, dist = self.context, self.context.distributed
        clock, data, initial, saved = run.clock, run.data, start.initial, start.saved
        test_mode, signals = settings.test_mode, settings.signals
        train, validate, save = phases.train, phases.validate, phases.save
        reporter = Reporter(start.checkpoint_dir, dist.is_chief, initial, run.total)
        limit = Batch(initial + 1) if test_mode else settings.max_length
        last = {"validation": -1, "checkpoint": -1}
        if saved is not None:  # as Determined restores its trial state's last_val, last_ckpt
            last = {"validation": int(saved.get("last_validation", -1)), "checkpoint": initial}
        phases.callbacks.call("on_training_start")
        if settings.step_zero_validation and initial == 0 and validate is not None:
            validate.validate(reporter, 0, test_mode)
            last["validation"] = 0
        window = train.open_window()
        batches = initial
        train_data, built = run.train_data, run.built
        iterator = iter(train_data)
        stop_period = None if run.stop_every is None else run.stop_every.length
        agreement = _preemption.StopAgreement(dist, initial, stop_period)
        stop = 0
        with _profiling(context.profiler):
            while not clock.reached(limit):
                switched = None
                per_slot = context.get_per_slot_batch_size()
                if data is not None and per_slot != built:  # NOTE [ batch size schedule ]
                    switched = time.perf_counter()
                    del iterator
                    train_data = data.build(clock.samples, run.size, run.rank, per_slot)
                    _preemption.shield_workers(train_data, signals)
                    iterator, built = iter(train_data), per_slot
                window.add(*train.train_batch(iterator, clock))
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
                due = {n for n, p in settings.periods.items() if p is not None and clock.due(p)}
                end = clock.reached(limit)
                if due - {"stop_check"} or end:  # NOTE [ training workloads ]
                    train.report(reporter, window, batches, settings.average_training_metrics)
                    window = train.open_window()
                validated = "validation" in due and validate is not None
                checkpoint = "checkpoint" in due
                if validated and validate is not None:
                    metrics = validate.validate(reporter, batches, test_mode)
                    last["validation"] = batches
                    checkpoint |= settings.retention.after_validation(metrics, dist)
                if checkpoint and last["checkpoint"] != batches:
                    save.save(clock, last["validation"], _validated_at(validate, batches))
                    last["checkpoint"] = batches
                if not end and (agreement.due(batches) or validated):
                    stop = agreement.agree(batches, _stop_code(signals, context))
                    if stop:
                        break
        return _End(stop, reporter, window, batches, last)

    def _pause(self, settings: _Settings, run: _Run, phases: _Phases, end: _End) -> None:
        """The ranks agreed to pause after this batch (NOTE [ stop agreement ])."""
        stopping = time.perf_counter()
        reporter, batches, last = end.reporter, end.batches, end.last
        if end.window.batches:
            phases.train.report(reporter, end.window, batches, settings.average_training_metrics)
        if last["checkpoint"] != batches:
            validation = _validated_at(phases.validate, batches)
            phases.save.save(run.clock, last["validation"], validation)
        reason = _preemption.STOP_REASONS[end.stop]
        seconds = time.perf_counter() - stopping
        reporter.log("stop", batches, {"reason": reason, "checkpoint_seconds": seconds})
        reporter.close()

    def _close(self, settings: _Settings, run: _Run, phases: _Phases, end: _End) -> None:
        """A last validation, then a last checkpoint (NOTE [ training workloads ])."""
        reporter, batches, last, validate = end.reporter, end.batches, end.last, phases.validate
        if last["validation"] != batches and validate is not None:
            metrics = validate.validate(reporter, batches, settings.test_mode)
            last["validation"] = batches
            settings.retention.after_validation(metrics, self.context.distributed)  # the best
        if last["checkpoint"] != batches:
            phases.save.save(run.clock, last["validation"], _validated_at(validate, batches))
        reporter.close()

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
