"""TensorBoard: the trial's writer, the trainer's metric events and the profiler's traces.

``context.get_tensorboard_writer()`` is a ``torch.utils.tensorboard.SummaryWriter`` on
``context.get_tensorboard_path()`` (``init(tensorboard_dir=...)``, ``"tensorboard"`` by
default), made on first use; it needs the ``tensorboard`` package (the ``tensorboard``
extra). With ``init(enable_tensorboard_logging=True)`` rank 0 also writes the metrics it
logs to ``metrics.jsonl``, under Determined's tags: ``Determined/<name>`` for training,
one point per batch (each batch's mean over the ranks) plus window-level values of the
wrapped reducers; validation metrics at the batch they were taken, prefixed ``val_``
unless their name starts with ``val``. ``context.set_profiler(...)`` takes
``torch.profiler.profile``'s arguments; its traces go to the same directory and the
trainer steps it after every training batch.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["log_metrics", "summary_writer"]


def summary_writer(path: str) -> Any:
    """A ``SummaryWriter`` on ``path``; a clear ImportError without ``tensorboard``."""
    if importlib.util.find_spec("tensorboard") is None:
        raise ImportError(
            "get_tensorboard_writer() needs the tensorboard package, but it is not installed; "
            "pip install tensorboard (in a clone of detsamplers, the tensorboard extra)"
        )
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(path)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def log_metrics(
    writer: Any,
    kind: str,
    batches_trained: int,
    metrics: Mapping[str, Any],
    batch_metrics: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Write ``metrics`` under Determined's tags (see the module docstring), then flush."""
    seen: set[str] = set()
    for i, row in enumerate(batch_metrics):
        step = batches_trained - len(batch_metrics) + i
        for name, value in row.items():
            if _is_scalar(value):
                writer.add_scalar("Determined/" + name, value, step)
            seen.add(name)
    for name, value in metrics.items():
        if name in seen:
            continue
        if kind == "validation" and not name.startswith("val"):
            name = "val_" + name
        if _is_scalar(value):
            writer.add_scalar("Determined/" + name, value, batches_trained)
    writer.flush()
