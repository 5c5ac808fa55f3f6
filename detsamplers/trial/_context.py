"""``TrialContext``: what a trial asks of its run, and what the trainer saves for it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from .._errors import check_bool, check_int
from ._distributed import DistributedContext
from ._lr_scheduler import LRScheduler
from ._reducer import MetricReducer, ReducerEntry

__all__ = ["ExperimentalContext", "TrialContext"]


class ExperimentalContext:
    """Opt-outs, as in Determined's ``context.experimental``."""

    def __init__(self) -> None:
        self.dataset_reproducibility_checks = True

    def disable_dataset_reproducibility_checks(self) -> None:
        """Accept any loader from ``build_*_data_loader``, used as given.

        The trainer then neither shards nor skips it: build it from
        ``context.get_initial_batch()``, ``get_per_slot_batch_size()`` and the ranks.
        """
        self.dataset_reproducibility_checks = False


class TrialContext:
    """The context a :class:`Trial` is built with; made by :func:`init`.

    Args:
        hparams: The hyperparameters; ``global_batch_size`` is required to train.
        seed: The trial seed (keys the data order, per-batch seeding and rank RNGs).
        distributed: This process's rank and world size.

    Examples:
        >>> context = TrialContext({"global_batch_size": 8, "lr": 0.1}, 0, DistributedContext())
        >>> context.get_hparam("lr"), context.get_per_slot_batch_size()
        (0.1, 8)
    """

    def __init__(self, hparams: dict[str, Any], seed: int, distributed: DistributedContext) -> None:
        if not isinstance(hparams, Mapping):
            raise TypeError(
                f"hparams should be a dict of hyperparameters, but got hparams={hparams!r} of "
                f"type {type(hparams).__name__}; pass e.g. {{'global_batch_size': 32}}"
            )
        self.hparams = dict(hparams)
        self.seed = check_int("seed", seed)
        self.distributed = distributed
        self.experimental = ExperimentalContext()
        if torch.cuda.is_available():
            self.device = torch.device("cuda", distributed.get_local_rank())
        else:
            self.device = torch.device("cpu")
        self.models: list[nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self.scaler: Any = None
        self.reducers: list[ReducerEntry] = []
        self._initial_batch = 0
        self._current_batch = 0
        self._current_epoch = 0
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
        """``hparams["global_batch_size"]``: records per optimizer step over all ranks."""
        if "global_batch_size" not in self.hparams:
            raise KeyError(
                "hyperparameter 'global_batch_size' is not set; pass it in "
                "init(hparams={'global_batch_size': ...})"
            )
        return check_int("global_batch_size", self.hparams["global_batch_size"], minimum=1)

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

    # Where training stands.

    def get_initial_batch(self) -> int:
        """Global batches already trained when this ``fit`` started (0 on a fresh run)."""
        return self._initial_batch

    def current_train_batch(self) -> int:
        """Global batches trained so far."""
        return self._current_batch

    def current_train_epoch(self) -> int:
        """The epoch of the batch being trained, from records consumed."""
        return self._current_epoch

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
        if self.distributed.get_size() > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            model = nn.parallel.DistributedDataParallel(model, device_ids=ids)
        self.models.append(model)
        return model

    def wrap_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Register ``optimizer`` for checkpoints; step it with :meth:`step_optimizer`."""
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer should be a torch.optim.Optimizer, but got {type(optimizer).__name__}"
            )
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(self, scheduler: Any, step_mode: LRScheduler.StepMode) -> LRScheduler:
        """Register ``scheduler``, stepped per ``step_mode`` and saved in checkpoints."""
        wrapped = LRScheduler(scheduler, step_mode)
        self.lr_schedulers.append(wrapped)
        return wrapped

    def wrap_scaler(self, scaler: Any) -> Any:
        """Register an AMP ``GradScaler`` for checkpoints."""
        self.scaler = scaler
        return scaler

    def wrap_reducer(
        self,
        reducer: MetricReducer | Callable[[list[Any]], Any],
        name: str,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer | Callable[[list[Any]], Any]:
        """Reduce metric ``name`` with ``reducer`` (NOTE [ metric reduction ])."""
        if not (isinstance(reducer, MetricReducer) or callable(reducer)):
            raise TypeError(
                "reducer should be a MetricReducer or a function of a list of values, but got "
                f"{type(reducer).__name__}"
            )
        if any(entry.name == name for entry in self.reducers):
            raise ValueError(f"name should be unique, but a reducer named {name!r} exists")
        self.reducers.append(ReducerEntry(reducer, name, for_training, for_validation))
        return reducer

    # Stepping.

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``; DDP averages the gradients across ranks."""
        torch.autograd.backward(loss)

    def step_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Callable[[Iterable[torch.Tensor]], Any] | None = None,
        scaler: Any = None,
    ) -> None:
        """Clip (if asked), step and zero the gradients of ``optimizer``.

        Args:
            optimizer: A wrapped optimizer.
            clip_grads: Called with the optimizer's parameters before the step, e.g.
                ``lambda params: torch.nn.utils.clip_grad_norm_(params, 1.0)``.
            scaler: A wrapped ``GradScaler``: unscale before clipping, step through it.
        """
        if optimizer not in self.optimizers:
            raise ValueError(
                "optimizer should be wrapped with context.wrap_optimizer() before it is stepped"
            )
        if clip_grads is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)
            clip_grads([p for group in optimizer.param_groups for p in group["params"]])
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad()

    def to_device(self, data: Any) -> Any:
        """``data`` (tensors in dicts, lists and tuples) moved to this rank's device."""
        if isinstance(data, torch.Tensor):
            return data.to(self.device)
        if isinstance(data, dict):
            return {key: self.to_device(value) for key, value in data.items()}
        if isinstance(data, tuple) and hasattr(data, "_fields"):  # a namedtuple
            return type(data)(*(self.to_device(value) for value in data))
        if isinstance(data, (list, tuple)):
            return type(data)(self.to_device(value) for value in data)
        return data
