"""The trial's data: check the loaders, set their seed, shard and skip them.

NOTE [ trial data ]
A ``detsamplers.loader.DataLoader`` from ``build_training_data_loader`` is turned into
``get_data_loader(repeat=True, skip=k, num_replicas=W, rank=r)``, where ``k`` is the
global batches already trained. Global batch ``k`` is then the records ``[k*G, (k+1)*G)``
of the shuffled, repeated stream (``G`` the global batch size) for every world size, so
the epoch of a batch is ``k * G // len(dataset)``.

Seed policy: a loader built without ``seed`` (and without ``generator``) gets the trial
seed; one built with its own seed keeps it. The loader cannot tell ``seed=0`` from no
seed, so an explicit 0 also takes the trial seed. The data seed in use is saved in the
checkpoint and a resume that changes it is refused.

Any other loader raises :class:`~detsamplers.ReproducibilityError` unless the trial called
``context.experimental.disable_dataset_reproducibility_checks()``; it is then used as
given, and the trial skips ``context.get_initial_batch()`` batches itself.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .._errors import ReproducibilityError
from ..loader import DataLoader
from ..loader._dataloader import DEFAULT_SEED
from ._context import TrialContext

__all__ = [
    "checked_loader",
    "global_batch",
    "global_digest",
    "records_per_epoch",
    "validation_loader",
]

_FIX = (
    "return detsamplers.loader.DataLoader(dataset, batch_size="
    "context.get_per_slot_batch_size(), shuffle=True) from {method}, which the trainer "
    "shards, repeats and skips; or call "
    "context.experimental.disable_dataset_reproducibility_checks() in __init__ and skip "
    "context.get_initial_batch() batches yourself"
)


def checked_loader(
    loader: Any, context: TrialContext, method: str, training: bool = True
) -> DataLoader | None:
    """``loader`` with its seed set, or None for an unchecked loader (NOTE [ trial data ])."""
    if not isinstance(loader, DataLoader):
        if context.experimental.dataset_reproducibility_checks:
            raise ReproducibilityError(
                f"{method} should return a detsamplers.loader.DataLoader, but got "
                f"{type(loader).__name__}: a plain loader restarts from its first batch on "
                f"resume and shards nothing; {_FIX.format(method=method)}"
            )
        return None
    per_slot = context.get_per_slot_batch_size() if training else None
    if per_slot is not None and loader.batch_size not in (None, per_slot):
        raise ValueError(
            f"the batch_size of the DataLoader from {method} should be "
            f"context.get_per_slot_batch_size()={per_slot}, but got "
            f"batch_size={loader.batch_size}; the global batch is per-slot batch size times "
            "the world size"
        )
    if loader.seed == DEFAULT_SEED and loader.generator is None:
        loader.seed = context.get_trial_seed()
    return loader


def records_per_epoch(loader: Any) -> int:
    """``len(loader.dataset)``: the records in one epoch."""
    dataset = getattr(loader, "dataset", None)
    if dataset is None or not hasattr(dataset, "__len__"):
        raise TypeError(
            f"the training loader should have a sized dataset, but got {type(loader).__name__} "
            "whose dataset has no len(); epochs are counted in records of the dataset"
        )
    return len(dataset)


def global_batch(loader: DataLoader, position: int, size: int) -> list[int]:
    """The records of global batch ``position`` in stream order, from every rank's share.

    Examples:
        >>> loader = DataLoader(range(10), batch_size=2, shuffle=True, seed=3)
        >>> global_batch(loader, 2, 2) == global_batch(loader, 4, 1) + global_batch(loader, 5, 1)
        True
    """
    shares = []
    for rank in range(size):
        chain = loader.get_data_loader(True, position, size, rank).batch_sampler
        shares.append([int(i) for i in next(iter(chain))])  # type: ignore[arg-type]
    return [share[j] for j in range(len(shares[0])) for share in shares if j < len(share)]


def global_digest(loader: DataLoader, batches_trained: int, size: int) -> str:
    """A world-size-free digest of the global batches: the first and the last trained."""
    probes = sorted({0, batches_trained - 1}) if batches_trained else []
    batches = [global_batch(loader, p, size) for p in probes]
    fields = [len(loader.dataset), loader.seed, batches_trained, batches]
    text = json.dumps(fields, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def validation_loader(trial_loader: Any, context: TrialContext, full: bool) -> Any:
    """The torch loader a rank validates on: its shard, or all of it for ``full``."""
    loader = checked_loader(trial_loader, context, "build_validation_data_loader", False)
    if loader is None:
        return trial_loader
    if full:
        return loader.get_data_loader(repeat=False)
    dist = context.distributed
    return loader.get_data_loader(False, 0, dist.get_size(), dist.get_rank())
