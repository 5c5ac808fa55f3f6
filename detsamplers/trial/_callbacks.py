"""``Callback``: code that runs at points of the training loop, with state in checkpoints."""

from __future__ import annotations

from typing import Any

__all__ = ["Callback"]


class Callback:
    """Hooks into the trainer, shaped like Determined's ``PyTorchCallback``.

    Every hook runs on every rank. ``state_dict`` goes into ``state-dict.pth`` under
    ``callbacks[name]`` (rank 0's) and ``load_state_dict`` gets it back on resume.

    Examples:
        >>> class CountBatches(Callback):
        ...     def __init__(self): self.seen = 0
        ...     def on_training_batch_end(self, batch_idx, metrics): self.seen += 1
        ...     def state_dict(self): return {"seen": self.seen}
        ...     def load_state_dict(self, state): self.seen = state["seen"]
        >>> counter = CountBatches(); counter.on_training_batch_end(0, {})
        >>> counter.state_dict()
        {'seen': 1}
    """

    def on_training_start(self) -> None:
        """Before the first batch of this ``fit`` (after a checkpoint was loaded)."""

    def on_training_batch_end(self, batch_idx: int, metrics: dict[str, Any]) -> None:
        """After global batch ``batch_idx``, with this rank's metrics for it."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of epoch ``epoch_idx``."""

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """After a validation, with the metrics reduced across ranks."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After a checkpoint folder is complete."""

    def on_training_end(self) -> None:
        """When ``fit`` returns normally."""

    def state_dict(self) -> dict[str, Any]:
        """The state to checkpoint."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`."""
