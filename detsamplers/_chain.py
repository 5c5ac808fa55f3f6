"""Helpers that build whole chains in the right order.

``make_batch_sampler`` is the seeds' helper; ``make_mixed_batch_sampler`` builds the same
chain over a weighted mixture of datasets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.utils.data as tud

from ._errors import check_int, check_one_of
from ._mix import MixSampler
from ._repeat import RepeatSampler
from ._shard import DistributedSampler, _world_size
from ._shuffle import ReproducibleShuffleSampler
from ._skip import SkipBatchSampler

__all__ = ["make_batch_sampler", "make_mixed_batch_sampler"]


def make_batch_sampler(
    sampler_or_dataset: Any,
    mode: str,
    shuffle_seed: int,
    num_workers: int | None = None,
    rank: int | None = None,
    batch_size: int | None = None,
    skip: int = 0,
    *,
    skip_samples: int = 0,
    world_size: int | None = None,
) -> tud.BatchSampler:
    """Build shuffle → repeat → shard → batch → skip for training, or shard → batch else.

    This is the helper of Determined's "Customizing a Reproducible Dataset", working:
    the seed's own call passes ``dataset=`` and ``seed=``, which its signature does not
    have. Batching uses torch's ``BatchSampler`` with ``drop_last=False``, as there.

    Args:
        sampler_or_dataset: A sampler, or a map-style dataset (read with a
            ``SequentialSampler``).
        mode: ``"training"`` (shuffle, repeat and skip) or ``"validation"`` (neither:
            each rank gets its shard of one pass, NOTE [ shard lengths ]).
        shuffle_seed: The shuffle's seed, e.g. ``context.get_trial_seed()``.
        num_workers: The world size, under Determined's name (kept so that its positional
            calls work); pass it or ``world_size``, not both.
        rank: This process's rank, in ``[0, world size)``.
        batch_size: Records per batch on this rank (the per-slot batch size).
        skip: Batches already trained (``context.get_initial_batch()``), training only.
        skip_samples: Samples already trained (every rank's records, in total), training
            only: the first batch starts at that sample of the shuffled, repeated stream,
            whatever the batch size and world size (NOTE [ sample positions ]). Resume a
            run whose global batch size changed with ``skip=0,
            skip_samples=batches_trained * old_global_batch_size``; Determined counts
            ``get_initial_batch()`` in batches of the size the trial runs with now.
        world_size: The world size: the preferred keyword, since ``num_workers`` means a
            DataLoader's worker processes everywhere else.

    Returns:
        A batch sampler to pass as ``DataLoader(dataset, batch_sampler=...)``.

    Raises:
        TypeError: an argument has the wrong type, the world size is given twice (as
            ``num_workers`` and ``world_size``), or ``rank`` or ``batch_size`` is missing.
        ValueError: an argument is out of range, or ``skip`` or ``skip_samples`` is set
            in validation mode.

    Examples:
        >>> from itertools import islice
        >>> from detsamplers import make_batch_sampler
        >>> batches = make_batch_sampler(range(10), "training", shuffle_seed=0,
        ...                              world_size=2, rank=0, batch_size=3, skip=0)
        >>> first = list(islice(batches, 2))
        >>> [len(b) for b in first]
        [3, 3]
        >>> list(make_batch_sampler(range(5), "validation", 0, 2, 1, 2))
        [[1, 3]]

        Two global batches of 6 on 2 ranks, then two of 4 on 1 rank: 20 samples, every
        record of the 10 exactly twice.

        >>> six = [make_batch_sampler(range(10), "training", 0, 2, r, 3) for r in range(2)]
        >>> trained = [i for s in six for b in islice(s, 2) for i in b]
        >>> four = make_batch_sampler(range(10), "training", 0, 1, 0, 4, skip_samples=12)
        >>> rest = [i for b in islice(four, 2) for i in b]
        >>> sorted(trained + rest) == sorted(2 * list(range(10)))
        True
    """
    mode = check_one_of("mode", mode, ("training", "validation"))
    shuffle_seed = check_int("shuffle_seed", shuffle_seed)
    size = _world_size(num_workers, world_size)
    world_name = "world_size" if world_size is not None else "num_workers"
    for name, value in (("rank", rank), ("batch_size", batch_size)):
        if value is None:
            raise TypeError(f"missing {name}: pass {name}, an integer")
    rank = check_int("rank", rank, minimum=0, below=size, below_name=world_name)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    skip = check_int("skip", skip, minimum=0)
    skip_samples = check_int("skip_samples", skip_samples, minimum=0)
    for name, value in (("skip", skip), ("skip_samples", skip_samples)):
        if mode == "validation" and value:
            raise ValueError(
                f"{name} should be 0 in validation mode, but got {name}={value}: validation "
                "passes are never resumed mid-way; pass mode='training' to skip"
            )
    if isinstance(sampler_or_dataset, (tud.Sampler, range)):
        sampler: Any = sampler_or_dataset
    elif isinstance(sampler_or_dataset, tud.IterableDataset):
        raise TypeError(
            "sampler_or_dataset should be a sampler or a map-style dataset, but got an "
            f"IterableDataset ({type(sampler_or_dataset).__name__}), which has no indices "
            "to sample; use a map-style dataset"
        )
    elif hasattr(sampler_or_dataset, "__len__") and hasattr(sampler_or_dataset, "__getitem__"):
        sampler = tud.SequentialSampler(sampler_or_dataset)
    else:
        raise TypeError(
            "sampler_or_dataset should be a sampler or a map-style dataset (with __len__ "
            f"and __getitem__), but got {type(sampler_or_dataset).__name__}"
        )
    if mode == "training":
        sampler = RepeatSampler(ReproducibleShuffleSampler(sampler, shuffle_seed))
    sampler = DistributedSampler(sampler, num_workers=size, rank=rank)
    batch_sampler = tud.BatchSampler(sampler, batch_size, drop_last=False)
    if mode == "training":
        return SkipBatchSampler(batch_sampler, skip, skip_samples=skip_samples)
    return batch_sampler


def make_mixed_batch_sampler(
    datasets: Sequence[Any],
    weights: Sequence[float],
    shuffle_seed: int,
    num_workers: int,
    rank: int,
    batch_size: int,
    skip: int = 0,
    *,
    window: int | None = None,
    curriculum: Sequence[tuple[int, Sequence[float]]] = (),
) -> tud.BatchSampler:
    """Build shuffle each → mix → shard → batch → skip over several datasets, for training.

    Dataset ``k`` is shuffled with its own seed hashed from ``(shuffle_seed, k)``
    (:meth:`MixSampler.from_datasets`); the batches hold indices into
    ``torch.utils.data.ConcatDataset(datasets)``. With the same global batch
    (``batch_size * num_workers``) the global batches are the same for any world size.

    Args:
        datasets: Map-style datasets (anything with ``__len__``), in order.
        weights: One non-negative weight per dataset (NOTE [ mixture law ]).
        shuffle_seed: Keys the shuffles and the interleaving, e.g. the trial seed.
        num_workers: The world size.
        rank: This process's rank.
        batch_size: Records per batch on this rank.
        skip: Batches already trained on this rank.
        window: Positions per window of the mixture (see :class:`MixSampler`).
        curriculum: Later ``(start, weights)`` segments, ``start`` a mixture position.

    Returns:
        A batch sampler to pass as ``DataLoader(ConcatDataset(datasets), batch_sampler=...)``.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range (see :class:`MixSampler` for the weights).

    Examples:
        >>> from itertools import islice
        >>> from detsamplers import make_mixed_batch_sampler
        >>> batches = make_mixed_batch_sampler([range(6), range(2)], [3, 1], shuffle_seed=0,
        ...                                    num_workers=1, rank=0, batch_size=4)
        >>> [sum(i >= 6 for i in batch) for batch in islice(batches, 3)]
        [1, 1, 1]
    """
    shuffle_seed = check_int("shuffle_seed", shuffle_seed)
    size = check_int("num_workers", num_workers, minimum=1)
    rank = check_int("rank", rank, minimum=0, below=size, below_name="num_workers")
    batch_size = check_int("batch_size", batch_size, minimum=1)
    skip = check_int("skip", skip, minimum=0)
    if not isinstance(datasets, (list, tuple)):
        raise TypeError(
            f"datasets should be a list of map-style datasets, but got {type(datasets).__name__}"
        )
    mixture = MixSampler.from_datasets(
        datasets, weights, shuffle_seed, window=window, curriculum=curriculum
    )
    shard = DistributedSampler(mixture, num_workers=size, rank=rank)
    return SkipBatchSampler(tud.BatchSampler(shard, batch_size, drop_last=False), skip)
