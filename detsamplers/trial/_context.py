"""``TrialContext``: what a trial asks of its run, and what the trainer saves for it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from .._errors import check_bool, check_int
from . import _aggregation, _amp, _tensorboard
from ._clock import Clock
from ._distributed import DistributedContext
from ._lr_scheduler import LRScheduler
from ._reducer import MetricReducer, SimpleReducer, WrappedReducer
from ._schedule import BatchSchedule

__all__ = ["ExperimentalContext", "TrialContext"]


class ExperimentalContext:
    """Opt-outs and opt-ins, as in Determined's ``context.experimental``."""

    def __init__(self, parent: TrialContext) -> None:
        self._parent = parent
        self.dataset_reproducibility_checks = True
        self.auto_amp = False
        self.auto_to_device = True

    def disable_dataset_reproducibility_checks(self) -> None:
        """Accept any loader from ``build_*_data_loader``, used as given.

        The trainer then neither shards nor skips it: build it from
        ``context.get_initial_batch()``, ``get_per_slot_batch_size()`` and the ranks.
        """
        self.dataset_reproducibility_checks = False

    def disable_auto_to_device(self) -> None:
        """Hand batches to the trial as the loader made them (it calls ``to_device`` itself)."""
        self.auto_to_device = False

    def use_amp(self) -> None:
        """Mixed precision with no code changes: autocast, scaled loss, one scaler.

        Call it before ``wrap_model``, and do not also call ``wrap_scaler``
        (NOTE [ AMP ]).
        """
        parent = self._parent
        if parent.models:
            raise ValueError(
                "use_amp() should be called before wrap_model(), but a model is already "
                "wrapped; its forward pass would not run under autocast"
            )
        parent.wrap_scaler(_amp.new_scaler(parent.device))
        self.auto_amp = True


class TrialContext:
    """The context a :class:`Trial` is built with; made by :func:`init`.

    Args:
        hparams: The hyperparameters. ``global_batch_size`` sets the records per optimizer
            step over all ranks: an int, or a schedule of sizes by samples trained, a list
            of ``[from_sample, size]`` segments or a callable (NOTE [ batch size
            schedule ]); without it, the trainer takes the training ``DataLoader``'s
            ``batch_size`` times the world size.
        seed: The trial seed (keys the data order, per-batch seeding and rank RNGs).
        distributed: This process's rank and world size.
        aggregation_frequency: Batches whose gradients make one optimizer step
            (NOTE [ gradient aggregation ]).
        tensorboard_dir: Where TensorBoard files go (``get_tensorboard_path()``).
        enable_tensorboard_logging: Whether rank 0 writes the metrics to TensorBoard.
        exp_conf: An experiment configuration for ``get_experiment_config()``.

    Examples:
        >>> context = TrialContext({"global_batch_size": 8, "lr": 0.1}, 0, DistributedContext())
        >>> context.get_hparam("lr"), context.get_per_slot_batch_size()
        (0.1, 8)
    """

    def __init__(
        self,
        hparams: dict[str, Any],
        seed: int,
        distributed: DistributedContext,
        aggregation_frequency: int = 1,
        tensorboard_dir: str = "tensorboard",
        enable_tensorboard_logging: bool = False,
        exp_conf: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(hparams, Mapping):
            raise TypeError(
                f"hparams should be a dict of hyperparameters, but got hparams={hparams!r} of "
                f"type {type(hparams).__name__}; pass e.g. {{'global_batch_size': 32}}"
            )
        self.hparams = dict(hparams)
        self.exp_conf = exp_conf
        self.seed = check_int("seed", seed)
        self.distributed = distributed
        self.aggregation_frequency = check_int(
            "aggregation_frequency", aggregation_frequency, minimum=1
        )
        self.tensorboard_dir = os.fspath(tensorboard_dir)
        self.enable_tensorboard_logging = check_bool(
            "enable_tensorboard_logging", enable_tensorboard_logging
        )
        self.experimental = ExperimentalContext(self)
        if torch.cuda.is_available():
            self.device = torch.device("cuda", distributed.get_local_rank())
        else:
            self.device = torch.device("cpu")
        self.models: list[nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.optimizer_configs: dict[torch.optim.Optimizer, dict[str, Any]] = {}
        self.lr_schedulers: list[LRScheduler] = []
        self.scalers: list[Any] = []
        self.reducers: list[WrappedReducer] = []
        self.profiler: Any = None
        self._tensorboard_writer: Any = None
        self._inferred_global_batch: int | None = None
        self._initial_batch = 0
        self._current_batch_idx: int | None = None
        self._current_epoch: tuple[int, bool, bool] | None = None  # epoch, is start, is end
        self._clock: Clock | None = None
        self._schedule: tuple[Any, BatchSchedule] | None = None
        self._stop_requested = False

    # Hyperparameters and batch sizes.

    def get_hparams(self) -> dict[str, Any]:
        """All hyperparameters (a copy)."""
        return dict(self.hparams)

    def get_hparam(self, name: str) -> Any:
        """The hyperparameter ``name``; a KeyError lists the ones there are."""
        if name not in self.hparams:
            raise KeyError(
                f"hyperparameter {name!r} is not set; the hyperparameters are "
                f"{sorted(self.hparams)}; pass it in init(hparams=...)"
            )
        return self.hparams[name]

    def get_global_batch_size(self) -> int:
        """Records per optimizer step over all ranks, now: ``hparams["global_batch_size"]``.

        Under a schedule (NOTE [ batch size schedule ]) it is the size of the global batch
        being trained (from ``train_batch`` and callbacks) or of the next one (between
        batches; in ``build_training_data_loader``, the size the run resumes with); before
        ``fit``, the schedule's first size. Without that hyperparameter it is known once
        ``fit`` has built the training loader: its ``batch_size`` times the world size.

        Examples:
            >>> context = TrialContext({"global_batch_size": [[0, 8], [64, 16]]}, 0,
            ...                        DistributedContext())
            >>> context.get_global_batch_size()
            8
        """
        if self._clock is not None:
            return self._clock.size
        if "global_batch_size" in self.hparams:
            return self._batch_schedule().size_at(0)
        if self._inferred_global_batch is not None:
            return self._inferred_global_batch
        raise ValueError(
            "the global batch size is not known: hparams has no 'global_batch_size' and no "
            "training loader has been built yet; pass init(hparams={'global_batch_size': ...}) "
            "to size the per-slot batches, or build the training DataLoader with an explicit "
            "batch_size (the trainer then uses batch_size times the world size)"
        )

    def _batch_schedule(self) -> BatchSchedule:
        """``hparams["global_batch_size"]`` (or the inferred size), checked."""
        if "global_batch_size" not in self.hparams:
            return BatchSchedule(self.get_global_batch_size())
        value = self.hparams["global_batch_size"]
        if self._schedule is None or self._schedule[0] is not value:
            self._schedule = (value, BatchSchedule(value))
        return self._schedule[1]

    def get_per_slot_batch_size(self) -> int:
        """``global_batch_size // world size``; the world size must divide it."""
        size = self.distributed.get_size()
        total = self.get_global_batch_size()
        if total % size:
            raise ValueError(
                f"global_batch_size should be divisible by the world size, but got "
                f"global_batch_size={total} with world size {size}; pick a global batch size "
                f"that is a multiple of {size}, or another number of ranks"
            )
        return total // size

    def get_trial_seed(self) -> int:
        """The trial seed."""
        return self.seed

    def get_experiment_config(self) -> dict[str, Any]:
        """The ``exp_conf`` given to :func:`init` (Determined's local-mode argument)."""
        if self.exp_conf is None:
            raise ValueError(
                "the experiment config is not set; pass init(exp_conf={...}) to read it here"
            )
        return self.exp_conf

    def get_data_config(self) -> dict[str, Any]:
        """The experiment config's ``data`` section (``{}`` if it has none)."""
        data: dict[str, Any] = self.get_experiment_config().get("data", {})
        return data

    # Where training stands.

    def get_initial_batch(self) -> int:
        """Global batches already trained when this ``fit`` started (0 on a fresh run)."""
        return self._initial_batch

    # What the trainer tells the context as a fit goes on (its only writes to it).

    def _begin_fit(self, initial_batch: int) -> None:
        """A fit starts at global batch ``initial_batch``; its clock is not built yet."""
        self._initial_batch = initial_batch
        self._clock = None

    def _infer_global_batch(self, size: int) -> None:
        """Take ``size`` as the global batch when hparams set none (the loader's, or saved)."""
        self._inferred_global_batch = size

    def _set_clock(self, clock: Clock) -> None:
        """From now on the global batch size is ``clock``'s (NOTE [ batch size schedule ])."""
        self._clock = clock

    def _restore_clock(self, saved: dict[str, Any] | None, samples: int) -> Clock:
        """The run's clock at ``samples`` trained, over this context's schedule; kept."""
        clock = Clock.restore(self._batch_schedule(), self.aggregation_frequency, saved, samples)
        self._set_clock(clock)
        return clock

    def _enter_batch(self, batch_idx: int, epoch_idx: int, first: bool, last: bool) -> None:
        """The trainer is training global batch ``batch_idx``, of epoch ``epoch_idx``."""
        self._current_batch_idx = batch_idx
        self._current_epoch = (epoch_idx, first, last)

    def _started(self) -> tuple[int, tuple[int, bool, bool]]:
        if self._current_batch_idx is None or self._current_epoch is None:
            raise RuntimeError(
                "training has not started: the batch and epoch are known from the first "
                "train_batch of Trainer.fit on"
            )
        return self._current_batch_idx, self._current_epoch

    def current_train_batch(self) -> int:
        """The index of the global batch being (or last) trained, as in Determined."""
        return self._started()[0]

    def current_train_epoch(self) -> int:
        """The epoch of that batch (NOTE [ epoch length ])."""
        return self._started()[1][0]

    def is_epoch_start(self) -> bool:
        """Whether the batch being trained is the first of its epoch."""
        return self._started()[1][1]

    def is_epoch_end(self) -> bool:
        """Whether the batch being trained is the last of its epoch."""
        return self._started()[1][2]

    def _should_step(self) -> bool:
        """Whether this batch steps the optimizers (NOTE [ gradient aggregation ])."""
        if self._current_batch_idx is None:
            return True
        return _aggregation.steps(self._current_batch_idx, self.aggregation_frequency)

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the trainer to stop: it finishes the batch, checkpoints and ``fit`` returns.

        Call it from ``train_batch``, ``evaluate_batch`` or a callback, e.g. for early
        stopping. One rank asking is enough: the ranks agree on one stop batch at their
        next check (NOTE [ stop agreement ]), which on a single process, or after a
        validation, is the end of the current batch.

        Examples:
            >>> context = TrialContext({}, 0, DistributedContext())
            >>> context.set_stop_requested(True); context.get_stop_requested()
            True
            >>> context.set_stop_requested(1)
            Traceback (most recent call last):
            ...
            TypeError: stop_requested should be a bool, but got stop_requested=1 of type int
        """
        self._stop_requested = check_bool("stop_requested", stop_requested)

    def get_stop_requested(self) -> bool:
        """Whether a stop was requested with :meth:`set_stop_requested`."""
        return self._stop_requested

    # Wrapping.

    def wrap_model(self, model: nn.Module) -> nn.Module:
        """Move ``model`` to this rank's device, in DDP when there are several ranks."""
        if not isinstance(model, nn.Module):
            raise TypeError(f"model should be a torch.nn.Module, but got {type(model).__name__}")
        model = model.to(self.device)
        if self.experimental.auto_amp:
            _amp.autocast_forward(model, self.device)
        if self.distributed.get_size() > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
        self.models.append(model)
        return model

    def wrap_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        backward_passes_per_step: int = 1,
        fp16_compression: bool | None = None,
        average_aggregated_gradients: bool | None = None,
    ) -> torch.optim.Optimizer:
        """Register ``optimizer`` for checkpoints; step it with :meth:`step_optimizer`.

        Args:
            optimizer: The optimizer, over wrapped models' parameters.
            backward_passes_per_step: Backward passes per ``train_batch``, ``>= 1``. As
                in Determined, only Horovod uses it; DDP needs nothing.
            fp16_compression: Horovod's gradient compression in Determined; DDP here
                has none, so only ``None`` or ``False`` is accepted.
            average_aggregated_gradients: Divide the aggregated gradients by
                ``aggregation_frequency`` before stepping (default ``True``).
        """
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer should be a torch.optim.Optimizer, but got {type(optimizer).__name__}"
            )
        check_int("backward_passes_per_step", backward_passes_per_step, minimum=1)
        if fp16_compression:
            raise ValueError(
                "fp16_compression should be None or False, but got fp16_compression=True: it "
                "compresses Horovod's all-reduce in Determined, and ranks here use DDP"
            )
        average = True if average_aggregated_gradients is None else average_aggregated_gradients
        self.optimizer_configs[optimizer] = {
            "average_aggregated_gradients": check_bool("average_aggregated_gradients", average)
        }
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(
        self, lr_scheduler: Any, step_mode: LRScheduler.StepMode, frequency: int = 1
    ) -> Any:
        """Register ``lr_scheduler``, stepped per ``step_mode`` and saved in checkpoints.

        Returns ``lr_scheduler`` itself, as Determined does (NOTE [ scheduler stepping ]).
        """
        if isinstance(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) and (
            step_mode != LRScheduler.StepMode.MANUAL_STEP
        ):
            raise ValueError(
                f"step_mode should be MANUAL_STEP for ReduceLROnPlateau, but got {step_mode}: "
                "it steps on a metric; step it from a callback's on_validation_end"
            )
        optimizer = getattr(lr_scheduler, "optimizer", None)
        if optimizer is not None and optimizer not in self.optimizers:
            raise ValueError(
                "the LR scheduler's optimizer should be wrapped with context.wrap_optimizer() "
                "first, but it is not"
            )
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency))
        return lr_scheduler

    def wrap_scaler(self, scaler: Any) -> Any:
        """Register an AMP gradient scaler for checkpoints (NOTE [ AMP ]).

        Returns a :class:`~detsamplers.trial._amp.WrappedScaler`: the scaler, whose
        ``update()`` waits out the batches that only accumulate gradients.
        """
        _amp.check_scaler(scaler)
        if self.experimental.auto_amp:
            raise ValueError(
                "wrap_scaler() should not be called after experimental.use_amp(), which wraps "
                "a scaler of its own"
            )
        if any(_amp.unwrap_scaler(s) is scaler for s in self.scalers):
            raise ValueError("this scaler is already wrapped; wrap each scaler once")
        wrapped = _amp.WrappedScaler(scaler, self._should_step)
        self.scalers.append(wrapped)
        return wrapped

    def wrap_reducer(
        self,
        reducer: MetricReducer | Callable[[list[Any]], Any],
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> Any:
        """Register a custom reducer; the trial feeds it (NOTE [ metric reduction ]).

        Args:
            reducer: A :class:`MetricReducer`, or a function of the flat list of every
                value passed to ``.update()`` on every rank.
            name: The metric it reports, or ``None`` for a reducer returning a dict.
            for_training: Reduce it for each training window.
            for_validation: Reduce it for each validation.

        Returns:
            ``reducer`` itself for a ``MetricReducer``; for a function, a reducer whose
            ``update(value)`` the trial calls.
        """
        if any(entry.reducer is reducer for entry in self.reducers):
            raise ValueError("this reducer is already wrapped; wrap each reducer once")
        if isinstance(reducer, MetricReducer):
            wrapped: MetricReducer = reducer
        elif callable(reducer):
            wrapped = SimpleReducer(reducer)
        else:
            raise TypeError(
                "reducer should be a MetricReducer or a function of a list of values, but got "
                f"{type(reducer).__name__}"
            )
        if name is not None and any(entry.name == name for entry in self.reducers):
            raise ValueError(f"name should be unique, but a reducer named {name!r} exists")
        self.reducers.append(WrappedReducer(wrapped, name, for_training, for_validation))
        return wrapped

    # Stepping.

    def backward(
        self,
        loss: torch.Tensor,
        gradient: torch.Tensor | None = None,
        retain_graph: bool = False,
        create_graph: bool = False,
    ) -> None:
        """``loss.backward(...)``; DDP averages the gradients when this batch steps.

        On a batch that only accumulates (NOTE [ gradient aggregation ]) it runs in the
        models' ``no_sync()``; under ``use_amp()`` the loss is scaled first.
        """
        if self.experimental.auto_amp:
            loss = self.scalers[0].scale(loss)
        if self.distributed.get_size() > 1 and not self._should_step():
            with _aggregation.no_sync(self.models):
                torch.autograd.backward(loss, gradient, retain_graph, create_graph)
        else:
            torch.autograd.backward(loss, gradient, retain_graph, create_graph)

    def step_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Callable[[Iterable[torch.Tensor]], Any] | None = None,
        auto_zero_grads: bool = True,
        scaler: Any = None,
    ) -> None:
        """Average, clip (if asked), step and zero the gradients of ``optimizer``.

        It returns at once on a batch that only accumulates gradients
        (NOTE [ gradient aggregation ]).

        Args:
            optimizer: A wrapped optimizer.
            clip_grads: Called with the optimizer's parameters before the step, e.g.
                ``lambda params: torch.nn.utils.clip_grad_norm_(params, 1.0)``. With a
                scaler of your own, call ``scaler.unscale_(optimizer)`` before.
            auto_zero_grads: Zero the gradients after the step (must be ``True`` with
                ``aggregation_frequency > 1``).
            scaler: A wrapped gradient scaler: the step is ``scaler.step(optimizer)``;
                call ``scaler.update()`` after stepping every optimizer (NOTE [ AMP ]).
        """
        if optimizer not in self.optimizers:
            raise ValueError(
                "optimizer should be wrapped with context.wrap_optimizer() before it is stepped"
            )
        if self.aggregation_frequency > 1 and not auto_zero_grads:
            raise ValueError(
                "auto_zero_grads should be True when aggregation_frequency > 1, but got "
                f"auto_zero_grads=False with aggregation_frequency={self.aggregation_frequency}"
            )
        if not self._should_step():
            return
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        if self.optimizer_configs[optimizer]["average_aggregated_gradients"]:
            _aggregation.average_gradients(parameters, self.aggregation_frequency)
        if scaler is None and self.experimental.auto_amp:
            scaler = self.scalers[0]
        if clip_grads is not None:
            if self.experimental.auto_amp:
                scaler.unscale_(optimizer)
            clip_grads(parameters)
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()

    def to_device(self, data: Any) -> Any:
        """``data`` (tensors and numpy arrays in dicts, lists and tuples) on this rank's device."""
        if isinstance(data, torch.Tensor):
            return data.to(self.device)
        if isinstance(data, dict):
            return {key: self.to_device(value) for key, value in data.items()}
        if isinstance(data, tuple) and hasattr(data, "_fields"):  # a namedtuple
            return type(data)(*(self.to_device(value) for value in data))
        if isinstance(data, (list, tuple)):
            return type(data)(self.to_device(value) for value in data)
        kind = getattr(getattr(data, "dtype", None), "kind", None)
        if type(data).__module__ == "numpy" and kind is not None and kind in "fciub":
            return torch.from_numpy(data).to(self.device)
        return data

    # TensorBoard and the profiler.

    def get_tensorboard_path(self) -> str:
        """Where TensorBoard files go: ``init(tensorboard_dir=...)``."""
        return self.tensorboard_dir

    def get_tensorboard_writer(self) -> Any:
        """A ``torch.utils.tensorboard.SummaryWriter`` on :meth:`get_tensorboard_path`."""
        if self._tensorboard_writer is None:
            self._tensorboard_writer = _tensorboard.summary_writer(self.tensorboard_dir)
        return self._tensorboard_writer

    def set_enable_tensorboard_logging(self, enable_tensorboard_logging: bool) -> None:
        """Turn rank 0's TensorBoard metric logging on or off."""
        self.enable_tensorboard_logging = check_bool(
            "enable_tensorboard_logging", enable_tensorboard_logging
        )

    def get_enable_tensorboard_logging(self) -> bool:
        """Whether rank 0 writes the metrics to TensorBoard."""
        return self.enable_tensorboard_logging

    def set_profiler(self, *args: Any, **kwargs: Any) -> None:
        """Profile training with ``torch.profiler.profile(*args, **kwargs)``.

        Its traces go to :meth:`get_tensorboard_path` (``on_trace_ready`` is set, as in
        Determined); the trainer starts it before the first batch, steps it after each
        one and stops it at the end.
        """
        if "on_trace_ready" in kwargs:
            raise ValueError(
                "set_profiler() sets on_trace_ready itself (a TensorBoard trace handler on "
                "get_tensorboard_path()); leave it out"
            )
        handler = torch.profiler.tensorboard_trace_handler(self.tensorboard_dir)
        self.profiler = torch.profiler.profile(*args, on_trace_ready=handler, **kwargs)
