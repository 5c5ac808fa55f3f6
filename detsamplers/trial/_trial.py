"""``Trial``: the base class a user's training code fills in, shaped like PyTorchTrial."""

from __future__ import annotations

from typing import Any

from ._callbacks import Callback
from ._context import TrialContext

__all__ = ["Trial"]


class Trial:
    """Override the ``build_*`` methods, ``train_batch`` and one of the evaluate methods.

    Build and wrap models, optimizers and schedulers in ``__init__`` with the context's
    ``wrap_*`` methods: only wrapped objects are checkpointed and restored.

    Examples:
        >>> import torch
        >>> from detsamplers.loader import DataLoader
        >>> class Mean(Trial):
        ...     def __init__(self, context):
        ...         super().__init__(context)
        ...         self.model = context.wrap_model(torch.nn.Linear(1, 1))
        ...         self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), 0.1))
        ...     def build_training_data_loader(self):
        ...         data = torch.ones(8, 1)
        ...         return DataLoader(data, batch_size=self.context.get_per_slot_batch_size())
        ...     def train_batch(self, batch, epoch_idx, batch_idx):
        ...         loss = (self.model(batch) - 1).pow(2).mean()
        ...         self.context.backward(loss)
        ...         self.context.step_optimizer(self.opt)
        ...         return {"loss": loss}
        >>> issubclass(Mean, Trial)
        True
    """

    def __init__(self, context: TrialContext) -> None:
        self.context = context

    def build_training_data_loader(self) -> Any:
        """A ``detsamplers.loader.DataLoader`` with ``batch_size=get_per_slot_batch_size()``.

        The trainer shards, repeats and skips it. Another loader needs
        ``context.experimental.disable_dataset_reproducibility_checks()``.
        """
        raise NotImplementedError(f"{type(self).__name__} should define build_training_data_loader")

    def build_validation_data_loader(self) -> Any:
        """The validation ``detsamplers.loader.DataLoader`` (one pass, sharded by the trainer)."""
        raise NotImplementedError(
            f"{type(self).__name__} should define build_validation_data_loader to validate"
        )

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        """Train on this rank's share of global batch ``batch_idx``; return its metrics."""
        raise NotImplementedError(f"{type(self).__name__} should define train_batch")

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        """The metrics of one validation batch (reduced over records and ranks)."""
        raise NotImplementedError(f"{type(self).__name__} should define evaluate_batch")

    def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
        """The metrics of the whole validation set, computed on rank 0 with an unsharded loader."""
        raise NotImplementedError(f"{type(self).__name__} should define evaluate_full_dataset")

    def build_callbacks(self) -> dict[str, Callback]:
        """Named callbacks; their state is checkpointed under these names."""
        return {}
