"""``Trial``: the base class a user's training code fills in, shaped like PyTorchTrial."""

from __future__ import annotations

import inspect
from typing import Any

from ._callbacks import Callback
from ._context import TrialContext
from ._reducer import Reducer

__all__ = ["Trial", "batch_length", "takes_batch_idx"]


def batch_length(batch: Any) -> int:
    """Determined's ``data_length``: the length of the first array in a (nested) batch.

    Examples:
        >>> import torch
        >>> batch_length({"x": torch.zeros(3, 2), "y": torch.zeros(3)})
        3
    """
    if isinstance(batch, dict):
        if not batch:
            raise ValueError("a batch dict should hold at least one tensor, but it is empty")
        return batch_length(next(iter(batch.values())))
    if isinstance(batch, (list, tuple)):
        if not batch:
            raise ValueError("a batch list should hold at least one tensor, but it is empty")
        first = batch[0]
        return batch_length(first) if isinstance(first, (dict, list, tuple)) else len(first)
    if hasattr(batch, "__len__"):
        return len(batch)
    raise TypeError(
        f"the length of a batch of type {type(batch).__name__} is unknown; override "
        "Trial.get_batch_length(batch) to count its records"
    )


def takes_batch_idx(method: Any) -> bool:
    """Whether a bound ``evaluate_batch`` takes ``batch_idx`` (Determined's rule).

    It does if it has a parameter named ``batch_idx`` or a second positional parameter.
    """
    names = inspect.getfullargspec(method).args
    return "batch_idx" in names or len(names) > 2


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

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        """Train on this rank's share of global batch ``batch_idx``; return its metrics.

        Return a dict of scalars, or the loss tensor alone (read as ``{"loss": loss}``).
        """
        raise NotImplementedError(f"{type(self).__name__} should define train_batch")

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        """The metrics of one validation batch (reduced per :meth:`evaluation_reducer`).

        ``batch_idx`` is the batch's index in this rank's pass; as in Determined, an
        override may leave it out (``def evaluate_batch(self, batch)``).
        """
        raise NotImplementedError(f"{type(self).__name__} should define evaluate_batch")

    def evaluation_reducer(self) -> Reducer | dict[str, Reducer]:
        """How validation metrics are reduced: one :class:`Reducer`, or one per metric.

        ``Reducer.AVG`` (the default) is the mean over records (NOTE [ metric reduction ]).
        """
        return Reducer.AVG

    def get_batch_length(self, batch: Any) -> int:
        """The records in ``batch``: the length of its first tensor or array.

        Override it for custom batch types; it weighs the batch in ``Reducer.AVG``.
        """
        return batch_length(batch)

    def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
        """The metrics of the whole validation set, computed on rank 0 with an unsharded loader."""
        raise NotImplementedError(f"{type(self).__name__} should define evaluate_full_dataset")

    def build_callbacks(self) -> dict[str, Callback]:
        """Named callbacks; their state is checkpointed under these names."""
        return {}
