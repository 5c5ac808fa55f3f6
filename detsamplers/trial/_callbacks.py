"""``Callback``: code that runs at points of the training loop, with state in checkpoints.

NOTE [ callback ranks ]
The hooks are Determined's ``PyTorchCallback`` hooks, called at the same points and on
the same ranks as its trial controller (0.38.1) calls them: every hook runs on every
rank except ``on_checkpoint_save_start``, ``on_checkpoint_write_end`` and the deprecated
``on_checkpoint_end``, which run on rank 0 only, the rank that writes ``state-dict.pth``.
``on_validation_end`` gets the metrics reduced across ranks on every rank, and
``on_training_workload_end`` gets each reporting window's averaged and per-batch metrics
on every rank. ``on_checkpoint_upload_end`` runs on every rank once a checkpoint folder
is complete, with the folder's name as the ``uuid`` (there is no upload). Determined has
no ``on_before_optimizer_step`` hook; neither does this class.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["CHIEF_ONLY", "Callback", "call_epoch_start"]

CHIEF_ONLY = frozenset({"on_checkpoint_save_start", "on_checkpoint_write_end", "on_checkpoint_end"})


class Callback:
    """Hooks into the trainer: Determined's ``PyTorchCallback``, hook for hook.

    ``state_dict`` goes into ``state-dict.pth`` under ``callbacks[name]`` (rank 0's) and
    ``load_state_dict`` gets it back on resume. See NOTE [ callback ranks ] for which
    ranks run which hook.

    Examples:
        >>> class CountBatches(Callback):
        ...     def __init__(self): self.seen = 0
        ...     def on_training_workload_end(self, avg_metrics, batch_metrics):
        ...         self.seen += len(batch_metrics)
        ...     def state_dict(self): return {"seen": self.seen}
        ...     def load_state_dict(self, state): self.seen = state["seen"]
        >>> counter = CountBatches()
        >>> counter.on_training_workload_end({"loss": 1.0}, [{"loss": 1.0}] * 4)
        >>> counter.state_dict()
        {'seen': 4}
    """

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        """Before the loaders are built: the first batch to train and the checkpoint to load."""

    def on_trial_shutdown(self) -> None:
        """When ``fit`` ends, normally or with an error."""

    def on_validation_start(self) -> None:
        """Before every validation."""

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """After every validation, with the metrics reduced across ranks."""

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        """Before the state in ``checkpoint`` (``state-dict.pth``'s dict) is restored."""

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        """Rank 0, before ``checkpoint`` is written; changes to it are saved."""

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        """Deprecated in Determined: use :meth:`on_checkpoint_write_end` (rank 0 only)."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """Rank 0, after ``state-dict.pth`` is written into ``checkpoint_dir``."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """Every rank, once the checkpoint folder is complete; ``uuid`` is its name."""

    def state_dict(self) -> dict[str, Any]:
        """The state to checkpoint."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`."""

    def on_training_start(self) -> None:
        """After a checkpoint was loaded, before the first batch of this ``fit``."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of epoch ``epoch_idx`` (NOTE [ epoch length ])."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of epoch ``epoch_idx``."""

    def on_training_workload_end(
        self, avg_metrics: dict[str, Any], batch_metrics: list[dict[str, Any]]
    ) -> None:
        """After each reporting window: its reduced metrics and each batch's rank mean."""

    def on_validation_epoch_start(self) -> None:
        """Before the first validation batch (``evaluate_batch`` trials)."""

    def on_validation_epoch_end(self, outputs: list[Any]) -> None:
        """After the last validation batch, with this rank's per-batch metrics."""


def call_epoch_start(callback: Callback, epoch_idx: int) -> None:
    """``on_training_epoch_start(epoch_idx)``, or without it for an old one-argument hook."""
    hook: Any = callback.on_training_epoch_start
    if inspect.signature(hook).parameters:
        hook(epoch_idx)
    else:
        hook()
