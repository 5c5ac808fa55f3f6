"""The loader's batch sampler: the outermost stage, which numbers batches and checks state.

It is a :class:`~detsamplers.SkipBatchSampler` that yields each batch as a
:class:`PositionedBatch` carrying its global batch position (NOTE [ per-batch seeding ]),
and whose state adds the loader's fields and a divergence digest
(NOTE [ divergence digest ]) to the chain's ``{"version", "position", "fingerprint",
"chain"}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from .._errors import ReproducibilityError
from .._skip import SkipBatchSampler
from .._state import check_state
from ._digest import stream_digest
from ._seeding import PositionedBatch

__all__ = ["LoaderBatchSampler"]


class LoaderBatchSampler(SkipBatchSampler):
    """Skip into a batch chain and tag each batch with its global batch position.

    Args:
        batch_sampler: The batch chain (shard → batch, or shuffle → repeat → shard → batch).
        skip: Batches of this rank to skip, ``>= 0``.
        seed: The loader's seed (for the state's fields and digest).
        dataset_length: ``len(dataset)`` (for the state's fields and digest).
        num_replicas: The world size ``W``.
        rank: This rank ``r``; batch ``b`` gets the global position ``b * W + r``.

    Examples:
        >>> from itertools import islice
        >>> from torch.utils.data import BatchSampler
        >>> from detsamplers import RepeatSampler
        >>> batches = LoaderBatchSampler(BatchSampler(RepeatSampler(range(5)), 2, False), 1,
        ...                              seed=0, dataset_length=5, num_replicas=1, rank=0)
        >>> [(b, b.position) for b in islice(batches, 2)]
        [([2, 3], 1), ([4, 0], 2)]
    """

    def __init__(
        self,
        batch_sampler: Iterable[list[int]],
        skip: int,
        *,
        seed: int,
        dataset_length: int,
        num_replicas: int,
        rank: int,
    ) -> None:
        super().__init__(batch_sampler, skip)
        self._fields = {
            "seed": seed,
            "dataset_length": dataset_length,
            "num_replicas": num_replicas,
            "rank": rank,
        }
        # Batches in hand for the digest: the first one, and the one just yielded, so that
        # state_dict() (called for every batch StatefulDataLoader dispatches) looks up none.
        self._known: dict[int, list[int]] = {}
        self._first: list[int] | None = None

    def __iter__(self) -> Iterator[list[int]]:
        return self._positioned(super().__iter__())

    def _positioned(self, batches: Iterator[list[int]]) -> Iterator[list[int]]:
        world = self._fields["num_replicas"]
        rank = self._fields["rank"]
        for batch in batches:
            # The stage's cursor points just past the batch it yielded.
            position = self._cursor.position() - 1
            self._known = {position: batch}
            yield PositionedBatch(batch, position * world + rank)

    def state_dict(self) -> dict[str, Any]:
        """The chain's state plus the loader's fields and a divergence digest (fresh dicts).

        Examples:
            >>> from torch.utils.data import BatchSampler
            >>> from detsamplers import RepeatSampler
            >>> batches = LoaderBatchSampler(BatchSampler(RepeatSampler(range(5)), 2, False),
            ...                              3, seed=0, dataset_length=5, num_replicas=1, rank=0)
            >>> state = batches.state_dict()
            >>> state["position"], state["loader"]["dataset_length"], len(state["digest"])
            (3, 5, 16)
        """
        state = super().state_dict()
        fields = dict(self._fields)
        state["loader"] = fields
        if self._first is None and self.indexable:
            self._first = self.batches(np.zeros(1, dtype=np.int64))[0]
        known = dict(self._known)
        if self._first is not None:
            known[0] = self._first
        state["digest"] = stream_digest(
            self, state["position"], state["fingerprint"], fields, known
        )
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a state saved by an identical loader, after checking its digest.

        Raises:
            TypeError: ``state_dict`` is not a dict.
            ValueError: it lacks the loader's keys (``loader``, ``digest``).
            ReproducibilityError: the seed, dataset length, ranks or chain differ from the
                saved ones (each difference is named), or the stream at the claimed
                position differs although the configuration matches.
        """
        owner = type(self).__name__
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"state should be a dict from {owner}.state_dict(), "
                f"but got state of type {type(state_dict).__name__}"
            )
        missing = [key for key in ("loader", "digest") if key not in state_dict]
        if missing:
            raise ValueError(
                f"state should have the keys loader and digest from {owner}.state_dict(), "
                f"but it lacks {', '.join(missing)}; it was not saved by a "
                "detsamplers.loader DataLoader"
            )
        saved = state_dict["loader"]
        differences = [
            f"{key} is {saved.get(key)!r} in the state but {value!r} here"
            for key, value in self._fields.items()
            if saved.get(key) != value
        ]
        if differences:
            raise ReproducibilityError(
                f"cannot load this state into {owner}: it was saved by a loader with other "
                f"settings ({'; '.join(differences)}); resuming from it would train on other "
                "data. Rebuild the loader with the saved settings, or resume elastically "
                "with get_data_loader(skip=...)."
            )
        position = check_state(state_dict, self.chain_config(), owner)
        expected = stream_digest(self, position, state_dict["fingerprint"], dict(self._fields))
        if state_dict["digest"] != expected:
            raise ReproducibilityError(
                f"cannot load this state into {owner}: the batches before position {position} "
                f"differ from the saved run's (digest {state_dict['digest']!r} in the state "
                f"but {expected!r} here) although the seed, dataset length and chain match; "
                "the sampler's contents or the shuffle algorithm changed since the "
                "checkpoint. Resume with the code and data of the saved run."
            )
        super().load_state_dict(state_dict)
