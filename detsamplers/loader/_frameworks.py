"""What a training framework reads on the loader: its sampler, and the epochs it sets.

NOTE [ framework hooks ]
Lightning, Accelerate and the HF Trainer inspect a DataLoader before they use it, and
each rebuilds it when it thinks the data is not yet split between processes: Lightning
re-instantiates the loader with a ``DistributedSampler`` injected into its batch sampler
unless ``loader.sampler`` already is one; Accelerate's ``prepare`` wraps
``loader.batch_sampler`` in its ``BatchSamplerShard``, which keeps every ``W``-th batch.
Our loader is already split: rank ``r`` of ``W`` reads only its own batches, so either
rebuild would split it a second time and lose ``(W - 1) / W`` of the records.

The loader :meth:`~detsamplers.loader.DataLoader.get_data_loader` returns therefore
carries a :class:`ShardView` as ``loader.sampler`` and ``loader.batch_sampler.sampler``:
a ``torch.utils.data.DistributedSampler`` (so Lightning leaves the loader alone) that
describes this rank's shard (``num_replicas``, ``rank``, ``seed``, ``shuffle``) and is
never iterated: the loader's batch sampler is. Accelerate's multi-process ``prepare``
gives the sampler a ``generator`` to keep in step across processes; the view keeps it and
uses it for nothing (the order is keyed by the seed), and the batch sampler then meets
Accelerate's sharder (NOTE [ accelerate prepare ]).

``set_epoch(epoch)``, which the frameworks call on every pass (Accelerate on every
``iter()`` with its own count, Lightning and the HF Trainer once per epoch), never changes
which batches come next on a training stream: there, the pass a record belongs to is its
position divided by the dataset length, so a resume lands in the right pass whatever
epoch number the framework believes in, and forgetting the call repeats nothing. The
number is recorded as ``epoch``. On a validation loader (``repeat=False``) it selects
the pass, as torch's ``DistributedSampler.set_epoch`` does.

NOTE [ accelerate skip ]
``accelerate.skip_first_batches(loader, n)`` (also ``Accelerator.skip_first_batches``, and
the HF Trainer's resume) rebuilds the loader around its ``SkipBatchSampler``, whose
``__iter__`` enumerates ``loader.batch_sampler`` from its start and discards the first
``n`` batches: a replay of ``n`` batches of indices, ``O(n)`` before the first batch. Our
batch sampler answers it in O(1): when its ``__iter__`` is called from that
``SkipBatchSampler.__iter__`` on itself (the caller's frame; Accelerate is never
imported by us, only recognised once the user has), :func:`accelerate_skip` takes the
wrapper's count and sets it to 0, and the stream starts ``n`` batches on, where the
replay would have started yielding. The batches are the same; none of the skipped ones
is drawn or fetched. The wrapper's count is read on every item, so it yields from the
first batch ours yields; a second ``iter()`` of the rebuilt loader continues the stream
(the replay would skip ``n`` more, losing them). Any other caller, or an Accelerate whose
``SkipBatchSampler`` no longer looks like this, gets the replay: slower, same batches.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import torch
import torch.utils.data as tud

from .._errors import check_int

__all__ = ["ShardView", "accelerate_skip"]


class ShardView(tud.DistributedSampler[int]):
    """This rank's shard of a detsamplers loader, as a framework sees ``loader.sampler``.

    A description, not an iterable of its own: the loader's batch sampler yields the
    batches (NOTE [ framework hooks ]). ``set_epoch`` is forwarded to the batch sampler.

    Args:
        batch_sampler: The loader's batch sampler (a ``LoaderBatchSampler``).
        dataset: The user's dataset.
        num_replicas: The world size.
        rank: This rank.
        seed: The loader's seed.
        shuffle: Whether the loader shuffles.

    Examples:
        >>> from detsamplers.loader import DataLoader
        >>> train = DataLoader(range(8), batch_size=2, shuffle=True, seed=3).get_data_loader(
        ...     repeat=True, num_replicas=2, rank=1)
        >>> view = train.sampler
        >>> isinstance(view, torch.utils.data.DistributedSampler), view.num_replicas, view.rank
        (True, 2, 1)
        >>> before = train.batch_sampler.state_dict()["position"]
        >>> view.set_epoch(5)  # a training stream's pass is its position's: nothing moves
        >>> train.batch_sampler.state_dict()["position"] == before, view.epoch
        (True, 5)
    """

    def __init__(
        self,
        batch_sampler: Any,
        dataset: Any,
        num_replicas: int,
        rank: int,
        seed: int,
        shuffle: bool,
    ) -> None:
        # DistributedSampler.__init__ would ask torch.distributed for the world; the
        # fields are the loader's, set directly.
        self._batches = batch_sampler
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = False
        self.epoch = 0
        self._generator: torch.Generator | None = None
        length = len(dataset)
        self.num_samples = length // num_replicas + (rank < length % num_replicas)
        self.total_size = length

    @property
    def generator(self) -> torch.Generator | None:
        """The generator Accelerate keeps in step across processes; the order never reads it."""
        return self._generator

    @generator.setter
    def generator(self, value: torch.Generator | None) -> None:
        # Accelerate's multi-process prepare sets it before it shards the batch sampler
        # (NOTE [ accelerate prepare ]); the loader's order is keyed by its seed.
        if value is not None and not isinstance(value, torch.Generator):
            raise TypeError(
                "generator should be a torch.Generator or None, but got "
                f"{type(value).__name__}; the loader's order is keyed by its seed, not by it"
            )
        self._generator = value

    def set_epoch(self, epoch: int) -> None:
        """Record the framework's epoch number; on a validation loader, select that pass.

        Args:
            epoch: A non-negative integer (NOTE [ framework hooks ]).
        """
        epoch = check_int("epoch", epoch, minimum=0)
        self._batches.set_epoch(epoch)
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        raise TypeError(
            "loader.sampler of a detsamplers loader describes this rank's shard and is not "
            "iterated: iterate loader.batch_sampler (or the loader) for its batches"
        )

    def __len__(self) -> int:
        return self.num_samples


def attach_shard_view(loader: tud.DataLoader[Any], view: ShardView) -> None:
    """Set ``loader.sampler`` and ``loader.batch_sampler.sampler`` to ``view``.

    torch's DataLoader refuses to have ``sampler`` set once built; torch itself never
    reads it when a batch sampler is given (its iterators read ``batch_sampler``).
    """
    object.__setattr__(loader, "sampler", view)
    loader.batch_sampler.sampler = view  # type: ignore[union-attr]


def accelerate_skip(batch_sampler: object) -> int:
    """The batches Accelerate's ``SkipBatchSampler`` would replay, taken over (0 if none).

    Called by the batch sampler's ``__iter__``: if its caller is Accelerate's
    ``SkipBatchSampler.__iter__`` over ``batch_sampler``, the wrapper's ``skip_batches``
    is returned and set to 0, so the caller seeks instead (NOTE [ accelerate skip ]).
    """
    module = sys.modules.get("accelerate.data_loader")
    wrapper_class = getattr(module, "SkipBatchSampler", None)
    code = getattr(getattr(wrapper_class, "__iter__", None), "__code__", None)
    if code is None:
        return 0
    caller = sys._getframe(2)  # accelerate's frame, above the batch sampler's __iter__
    if caller.f_code is not code:
        return 0
    wrapper = caller.f_locals.get("self")
    skip = getattr(wrapper, "skip_batches", None)
    if getattr(wrapper, "batch_sampler", None) is not batch_sampler or type(skip) is not int:
        return 0
    if skip <= 0:
        return 0
    wrapper.skip_batches = 0  # type: ignore[union-attr]
    return skip
