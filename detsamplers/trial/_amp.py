"""Automatic mixed precision: wrapped gradient scalers and ``experimental.use_amp()``.

NOTE [ AMP ]
Determined's semantics (0.38.1), which ``TrialContext`` follows:

- ``scaler = context.wrap_scaler(GradScaler())``: the trial scales its loss
  (``context.backward(scaler.scale(loss))``), calls ``scaler.unscale_(opt)`` itself
  before clipping, passes ``scaler=`` to ``step_optimizer`` (which calls
  ``scaler.step(opt)`` and nothing else) and calls ``scaler.update()`` itself after
  stepping every optimizer, as seed 004 shows. The scaler's state is checkpointed.
- ``context.experimental.use_amp()``: the context wraps one scaler of its own, runs each
  wrapped model's forward under ``torch.autocast`` (outputs cast back to float32),
  scales the loss in ``backward``, unscales before ``clip_grads``, steps through the
  scaler, and calls ``update()`` once after ``train_batch``.

Two differences, both for trials that fail in Determined:

- Several scalers may be wrapped (Determined allows one); each is checkpointed, in
  order. ``use_amp()`` still excludes ``wrap_scaler``.
- With gradient aggregation, ``step_optimizer`` returns early on the batches that only
  accumulate (NOTE [ gradient aggregation ]), so an enabled ``GradScaler`` has recorded
  no inf checks when the trial calls ``update()`` and torch raises "No inf checks were
  recorded prior to update". ``wrap_scaler`` returns a :class:`WrappedScaler` that
  passes every call on to the scaler except ``update()`` on those batches, which it
  skips, so seed 004's pattern runs with ``aggregation_frequency > 1``.

On CPU, ``torch.amp.GradScaler("cpu")`` is enabled and ``torch.autocast("cpu")`` computes
in bfloat16; ``use_amp()`` uses the context's device type for both.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["WrappedScaler", "autocast_forward", "check_scaler", "new_scaler"]

_SCALER_METHODS = ("scale", "step", "update", "state_dict", "load_state_dict")


def check_scaler(scaler: Any) -> None:
    """Refuse an object that is not a gradient scaler, naming what it lacks."""
    missing = [name for name in _SCALER_METHODS if not callable(getattr(scaler, name, None))]
    if missing:
        raise TypeError(
            "scaler should be a torch.amp.GradScaler (with scale, step, update, state_dict and "
            f"load_state_dict), but got {type(scaler).__name__} without {', '.join(missing)}"
        )


class WrappedScaler:
    """A gradient scaler whose ``update()`` waits for the batches that step (NOTE [ AMP ]).

    Every attribute is the wrapped scaler's; ``scaler`` is the scaler itself.

    Examples:
        >>> scaler = WrappedScaler(torch.amp.GradScaler("cpu"), stepping=lambda: False)
        >>> scaler.update()  # an accumulating batch: nothing to update, nothing raised
        >>> scaler.get_scale() == scaler.scaler.get_scale()
        True
    """

    def __init__(self, scaler: Any, stepping: Callable[[], bool]) -> None:
        self.scaler = scaler
        self._stepping = stepping

    def update(self, new_scale: Any = None) -> None:
        """``scaler.update(new_scale)``, skipped on a batch whose optimizers did not step."""
        if self._stepping():
            self.scaler.update(new_scale)

    def __getattr__(self, name: str) -> Any:
        if name == "scaler":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.scaler, name)


def unwrap_scaler(scaler: Any) -> Any:
    """The scaler behind a :class:`WrappedScaler`, or ``scaler`` itself."""
    return scaler.scaler if isinstance(scaler, WrappedScaler) else scaler


def new_scaler(device: torch.device) -> Any:
    """The scaler ``use_amp()`` makes: ``torch.amp.GradScaler`` for the device type."""
    return torch.amp.GradScaler(device.type)


def _to_float(output: Any) -> Any:
    if isinstance(output, torch.Tensor):
        return output.float() if output.dtype in (torch.float16, torch.bfloat16) else output
    if isinstance(output, dict):
        return {key: _to_float(value) for key, value in output.items()}
    if isinstance(output, (list, tuple)) and not hasattr(output, "_fields"):
        return type(output)(_to_float(value) for value in output)
    return output


def autocast_forward(model: nn.Module, device: torch.device) -> None:
    """Run ``model``'s forward under ``torch.autocast`` and return float32 outputs."""
    forward = model.forward

    @functools.wraps(forward)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device.type):
            output = forward(*args, **kwargs)
        return _to_float(output)

    model.forward = wrapped
