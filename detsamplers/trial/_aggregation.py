"""Gradient aggregation: several batches' gradients for one optimizer step.

NOTE [ gradient aggregation ]
With ``init(aggregation_frequency=A)`` (Determined's name and place), global batch ``b``
steps the optimizers only when ``(b + 1) % A == 0``; on the other batches
``context.backward`` runs inside every DDP model's ``no_sync()`` (no all-reduce) and
``step_optimizer`` returns at once, so gradients accumulate. Before the step, each
optimizer's gradients are divided by ``A`` unless it was wrapped with
``average_aggregated_gradients=False``; ``auto_zero_grads=False`` is refused when
``A > 1``. Learning-rate schedulers follow NOTE [ scheduler stepping ].

A checkpoint taken between two steps (say at batch 3 with ``A = 2``) also saves each
rank's accumulated gradients in its rank file and restores them on a resume with the
same world size, so the resumed run steps with the same sums. They are per rank, so a
resume on another world size from such a checkpoint is refused; checkpoint at multiples
of ``A`` to change the world size.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["average_gradients", "capture_gradients", "no_sync", "restore_gradients", "steps"]


def steps(batch_idx: int, aggregation_frequency: int) -> bool:
    """Whether global batch ``batch_idx`` steps the optimizers.

    Examples:
        >>> [steps(b, 2) for b in range(4)]
        [False, True, False, True]
    """
    return (batch_idx + 1) % aggregation_frequency == 0


@contextlib.contextmanager
def no_sync(models: Iterable[nn.Module]) -> Iterator[None]:
    """Every DDP model's ``no_sync()`` at once (other models need none)."""
    with contextlib.ExitStack() as stack:
        for model in models:
            if isinstance(model, nn.parallel.DistributedDataParallel):
                stack.enter_context(model.no_sync())
        yield


def average_gradients(parameters: Iterable[torch.Tensor], divisor: int) -> None:
    """Divide every gradient by ``divisor`` in place."""
    if divisor == 1:
        return
    for parameter in parameters:
        if parameter.grad is not None:
            parameter.grad.div_(float(divisor))


def _parameters(optimizers: Iterable[torch.optim.Optimizer]) -> list[torch.Tensor]:
    return [p for opt in optimizers for group in opt.param_groups for p in group["params"]]


def capture_gradients(optimizers: Iterable[torch.optim.Optimizer]) -> list[torch.Tensor | None]:
    """The optimizers' parameters' gradients, cloned (``None`` where there is none)."""
    return [None if p.grad is None else p.grad.detach().clone() for p in _parameters(optimizers)]


def restore_gradients(
    optimizers: Iterable[torch.optim.Optimizer], saved: list[Any], path: str
) -> None:
    """Put :func:`capture_gradients`' result back into the gradients."""
    parameters = _parameters(optimizers)
    if len(parameters) != len(saved):
        raise ValueError(
            f"the checkpoint {path} holds accumulated gradients for {len(saved)} parameters, "
            f"but the wrapped optimizers have {len(parameters)}; build the trial as it was saved"
        )
    for parameter, grad in zip(parameters, saved, strict=True):
        parameter.grad = None if grad is None else grad.to(parameter.device).clone()
