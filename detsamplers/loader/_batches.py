"""The loader's batch sampler: the outermost stage, which numbers batches and checks state.

It is a :class:`~detsamplers.SkipBatchSampler` that yields each batch as a
:class:`PositionedBatch` carrying its number and RNG key (NOTE [ per-batch seeding ]),
and whose state adds the loader's fields and a divergence digest
(NOTE [ divergence digest ]) to the chain's ``{"version", "position", "fingerprint",
"chain", "samples"}``. Over a training chain (a sample grid, NOTE [ sample positions ])
the digest is of the sample stream and the state loads into a loader with another batch
size, world size or rank, at the saved sample.

Iterated by the loader's own iterators, it also knows the position after the last batch
handed to the caller (NOTE [ handed batches ]), and its state is saved there rather than
where prefetching workers have drawn to.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import ReproducibilityError, check_int
from .._mix import adopt_curriculum
from .._samples import saved_grid, stream_links
from .._skip import SkipBatchSampler
from .._source import Node
from .._stage import _Cursor
from .._state import check_state, fingerprint
from ._digest import sample_digest, sample_probes, stream_digest
from ._epochs import data_differences, record_epochs, stream_epochs
from ._frameworks import accelerate_skip
from ._prepare import PreparedIteration, accelerate_prepared, check_form, each_for_every_process
from ._seeding import PositionedBatch, batch_key, batch_keys, positioned_batch

__all__ = ["Handed", "LoaderBatchSampler", "check_loader_keys"]


def check_loader_keys(state: Any, owner: str = "LoaderBatchSampler") -> None:
    """Check that ``state`` has the loader's own keys, ``loader`` (a dict) and ``digest``.

    Raises:
        TypeError: ``state`` or its ``loader`` entry is not a dict.
        ValueError: a key is missing.
    """
    if not isinstance(state, Mapping):
        raise TypeError(
            f"state should be a dict from {owner}.state_dict(), "
            f"but got state of type {type(state).__name__}"
        )
    missing = [key for key in ("loader", "digest") if key not in state]
    if missing:
        raise ValueError(
            f"state should have the keys loader and digest from {owner}.state_dict(), "
            f"but it lacks {', '.join(missing)}; it was not saved by a "
            "detsamplers.loader DataLoader"
        )
    if not isinstance(state["loader"], Mapping):
        raise TypeError(
            f"state['loader'] should be the dict of loader fields from {owner}.state_dict(), "
            f"but got {state['loader']!r}"
        )


class Handed:
    """Where one loader iteration stands: after the last batch handed to the caller.

    ``position`` is None where it cannot be known (NOTE [ handed batches ]); ``why``
    then says why.
    """

    __slots__ = ("position", "why")

    def __init__(self, position: int | None, why: str = "") -> None:
        self.position = position
        self.why = why


class LoaderBatchSampler(SkipBatchSampler):
    """Skip into a batch chain and tag each batch with its global batch position.

    Args:
        batch_sampler: The batch chain (shard → batch, or shuffle → repeat → shard → batch).
        skip: Batches of this rank to skip, ``>= 0``.
        skip_samples: Samples of the stream to skip first (NOTE [ sample positions ]).
        seed: The loader's seed (for the state's fields and digest).
        dataset_length: ``len(dataset)`` (for the state's fields and digest).
        num_replicas: The world size ``W``.
        rank: This rank ``r``. Over a sample grid, batch ``b`` is numbered by the sample
            of its first record, ``S + b W B + r``; over any other chain by ``b * W + r``.
        record_seed: The seed of per-record seeding (``DataLoader(seeding="record")``), or
            None to seed per batch (NOTE [ per-batch seeding ]).
        epochs: Attach each record's epoch to the batches of a training stream, for a
            dataset that reads them (NOTE [ epoch-aware datasets ]).
        data: The dataset's ``data_config()`` fields, kept in the state and checked on
            load (NOTE [ epoch-aware datasets ]), or None.

    Examples:
        >>> from itertools import islice
        >>> from torch.utils.data import BatchSampler
        >>> from detsamplers import RepeatSampler
        >>> batches = LoaderBatchSampler(BatchSampler(RepeatSampler(range(5)), 2, False), 1,
        ...                              seed=0, dataset_length=5, num_replicas=1, rank=0)
        >>> [(b, b.position) for b in islice(batches, 2)]
        [([2, 3], 2), ([4, 0], 4)]
    """

    _state_extra = ("samples", "loader", "digest")

    def __init__(
        self,
        batch_sampler: Iterable[list[int]],
        skip: int,
        *,
        skip_samples: int = 0,
        seed: int,
        dataset_length: int,
        num_replicas: int,
        rank: int,
        record_seed: int | None = None,
        epochs: bool = False,
        epochs_matter: bool = True,
        data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(batch_sampler, skip, skip_samples=skip_samples)
        self.record_seed = record_seed
        self._data = data
        # The sample stream whose passes are the records' epochs, or None.
        self._epochs: Node | None = None
        if epochs and self.infinite:
            grid = self.grid
            if grid is not None and stream_epochs(grid.samples):
                self._epochs = grid.samples
            elif epochs_matter:  # else the records are alike in every epoch: epoch 0's
                raise ValueError(
                    "dataset reads each record's epoch (it has getitems_in_epochs), but this "
                    "training stream's records have no sample positions to tell the epoch "
                    "(a batch_sampler, or a sampler without passes); build the DataLoader "
                    "with batch_size= and shuffle= or sampler= instead"
                )
        # The loader iteration that counts handed batches (NOTE [ handed batches ]), and
        # whether the next iteration to start is that loader's.
        self._handed: Handed | None = None
        self._tracked = False
        # The iteration of Accelerate's prepared loader, if it iterates (NOTE [ accelerate
        # prepare ]).
        self._prepared: PreparedIteration | None = None
        self._fields = {
            "seed": seed,
            "dataset_length": dataset_length,
            "num_replicas": num_replicas,
            "rank": rank,
        }
        # The block being yielded (its first position and batches), so that state_dict()
        # (called for every batch StatefulDataLoader dispatches) finds the batch just
        # yielded without a lookup; and the first batch, looked up once.
        self._block: tuple[int, list[PositionedBatch]] | None = None
        self._first: list[int] | None = None
        self._first_sample: int | None = None
        self._stream: str | None = None

    def _numbers(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The numbers of the batches at ``positions`` (NOTE [ per-batch seeding ])."""
        if self.grid is not None:
            return self.grid.first_samples(positions, self.origin)
        out: npt.NDArray[np.int64] = positions * self._fields["num_replicas"] + self._fields["rank"]
        return out

    def _emit_batches(self, positions: npt.NDArray[np.int64]) -> list[Any]:
        # Tag a whole block at once, keys vectorised: cheaper than work per batch.
        start = int(positions[0]) if len(positions) else 0
        numbers = self._numbers(positions)
        keys = batch_keys(self._fields["seed"], numbers)
        stride = 0 if self.grid is None else self.grid.world_size
        batches = self.batches(positions)
        epochs: list[Any] = [None] * len(batches)
        if self._epochs is not None and batches:  # NOTE [ epoch-aware datasets ]
            size = len(batches[0])
            samples = numbers[:, None] + np.arange(size, dtype=np.int64) * stride
            found = record_epochs(self._epochs, samples.ravel()).reshape(len(batches), size)
            epochs = found.tolist()
        block = [
            positioned_batch(batch, number, key, stride, at, epoch)
            for batch, number, key, at, epoch in zip(
                batches, numbers.tolist(), keys, positions.tolist(), epochs, strict=True
            )
        ]
        self._block = (start, block)
        return block

    def _generate_fallback(self, cursor: Any, start: int, epoch: int) -> Iterator[Any]:
        # A chain that cannot be addressed yields its batches at consecutive positions
        # (it has no sample grid, so batch b is numbered b * W + r).
        world, rank, seed = (self._fields[k] for k in ("num_replicas", "rank", "seed"))
        for position, batch in enumerate(super()._generate_fallback(cursor, start, epoch), start):
            number = position * world + rank
            yield positioned_batch(batch, number, batch_key(seed, number), 0, position)

    def __iter__(self) -> Iterator[Any]:
        # Accelerate's skip_first_batches, answered by a seek (NOTE [ accelerate skip ]).
        seekable = self.infinite and self.indexable
        skip = accelerate_skip(self) if seekable else 0
        prepared = accelerate_prepared(self, sys._getframe(1), seekable)
        previous, self._prepared = self._prepared, None
        if skip:
            self._cursor = _Cursor(self._continue_at(previous) + skip)
            self._handed, self._tracked = None, False
        if prepared is None:
            return self._generate()
        # Accelerate's prepared loader (NOTE [ accelerate prepare ]).
        fields = self._fields
        stride = check_form(fields["num_replicas"], fields["rank"], prepared)
        if self.infinite:
            start = self._continue_at(previous) if not skip else self._cursor.position()
            start += prepared.skip * stride
            self._cursor = _Cursor(start)
            self._handed, self._tracked = None, False
        else:
            start = self._next_start()[0]
        self._prepared = PreparedIteration(start, stride, prepared.frame)
        if stride == 1 and prepared.num_processes > 1:
            return each_for_every_process(self._generate(), prepared.num_processes)
        return self._generate()

    def _continue_at(self, previous: PreparedIteration | None) -> int:
        """Where an endless stream's next iteration starts: after the batches handed out."""
        start = previous.position() if previous is not None else None
        if start is None:
            handed = self._handed
            start = handed.position if handed is not None else None
        return self._next_start()[0] if start is None else start

    # -- handed batches (NOTE [ handed batches ]) ------------------------------------------

    def begin_handed(self) -> Handed:
        """Start a loader iteration that counts the batches it hands out.

        An endless stream continues after the last batch handed out, so batches that
        workers fetched but the caller never got come again; a finite chain starts its
        next pass (or the loaded position), as torch's DataLoader does.
        """
        if self.infinite:
            self._cursor = _Cursor(self._continue_at(self._prepared))
        self._prepared = None
        handed = Handed(self._next_start()[0])
        self._handed, self._tracked = handed, True
        return handed

    def _claim(self) -> tuple[int, int | None, int]:
        if self._tracked:
            self._tracked = False
        else:  # iterated by another loader: its batch sampler position is the state
            self._handed = None
        return super()._claim()

    def _state_position(self) -> int:
        prepared = self._prepared.position() if self._prepared is not None else None
        if prepared is not None:
            return prepared
        handed = self._handed
        if handed is None:
            return super()._state_position()
        if handed.position is None:
            raise ValueError(
                f"cannot save the loader's state: {handed.why}, so the batches handed to the "
                "caller are not known; build the DataLoader with the default in_order=True "
                "and call loader.state_dict() on the loader from get_data_loader"
            )
        return handed.position

    def set_epoch(self, epoch: int) -> None:
        """Select pass ``epoch`` of a validation chain; on a training stream, change nothing.

        Frameworks call it on every pass (NOTE [ framework hooks ]). A training stream
        numbers its passes by position, so the call is checked and recorded, never obeyed:
        no batch depends on it, and forgetting it repeats nothing.

        Args:
            epoch: A non-negative integer.

        Examples:
            >>> from torch.utils.data import BatchSampler
            >>> from detsamplers import RepeatSampler
            >>> batches = LoaderBatchSampler(BatchSampler(RepeatSampler(range(4)), 2, False),
            ...                              0, seed=0, dataset_length=4, num_replicas=1, rank=0)
            >>> batches.set_epoch(3)
            >>> next(iter(batches))
            [0, 1]
        """
        if self.infinite:
            check_int("epoch", epoch, minimum=0)
            return
        super().set_epoch(epoch)

    def _last_yielded(self, position: int) -> dict[int, list[int]]:
        if self._block is None or position < 1:
            return {}
        start, block = self._block
        offset = position - 1 - start
        return {position - 1: block[offset]} if 0 <= offset < len(block) else {}

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
        fields: dict[str, Any] = dict(self._fields)
        state["loader"] = fields
        if self.grid is not None and state["samples"] is not None:
            records: dict[int, int] = {}
            if self._first_sample is not None:
                records[0] = self._first_sample
            last = self._last_yielded(state["position"])
            for batch in last.values():  # the batch just yielded: its first record's sample
                records[batch.position] = batch[0]  # type: ignore[attr-defined]
            probes = sample_probes(state["samples"], self.grid.global_batch, self.grid.rank)
            state["digest"] = self._sample_digest(state["samples"], probes, records)
            if 0 in probes and self._first_sample is None:
                self._first_sample = int(self.grid.samples.records(np.zeros(1, np.int64))[0])
            if self._data is not None:
                fields["data"] = dict(self._data)
            return state
        if self._first is None and self.indexable:
            self._first = self.batches(np.zeros(1, dtype=np.int64))[0]
        known = self._last_yielded(state["position"])
        if self._first is not None:
            known[0] = self._first
        state["digest"] = stream_digest(
            self, state["position"], state["fingerprint"], dict(self._fields), known
        )
        if self._data is not None:
            fields["data"] = dict(self._data)
        return state

    def _stream_fingerprint(self) -> str:
        if self._stream is None:
            self._stream = fingerprint(stream_links(self.chain_config()))
        return self._stream

    def _shared_fields(self) -> dict[str, Any]:
        """The fields every rank and every batch size share."""
        return {key: self._fields[key] for key in ("seed", "dataset_length")}

    def _sample_digest(
        self, samples: int, probes: list[int], known: dict[int, int] | None = None
    ) -> str:
        assert self.grid is not None
        return sample_digest(
            self.grid.samples,
            samples,
            self._stream_fingerprint(),
            self._shared_fields(),
            probes,
            known,
        )

    def samples_digest(self, samples: int) -> str:
        """A digest of the sample stream before ``samples``, free of any batch grid.

        It probes samples 0 and ``samples - 1``, so any rank of any world size and batch
        size computes the same digest (the trial loop saves it in the checkpoint).

        Raises:
            ValueError: the chain has no sample grid (NOTE [ sample positions ]).
        """
        if self.grid is None:
            raise ValueError(
                "samples_digest needs a training chain with sample positions, but this "
                "loader's chain has none; build it with batch_size= and repeat=True"
            )
        return self._sample_digest(samples, sample_probes(samples, 1, 0))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a state saved by a loader over the same data, checking its digest.

        Over a training chain (a sample grid, NOTE [ sample positions ]) the saving
        loader may have had another batch size, world size or rank: the stream continues
        at the saved ``samples``. Otherwise it must have been identical.

        Raises:
            TypeError: ``state_dict`` is not a dict.
            ValueError: it lacks the loader's keys (``loader``, ``digest``).
            ReproducibilityError: the seed, dataset length or chain (or, without a sample
                grid, the ranks) differ from the saved ones (each difference is named), or
                the stream at the claimed position differs although the configuration
                matches.
        """
        owner = type(self).__name__
        check_loader_keys(state_dict, owner)
        different = data_differences(state_dict["loader"].get("data"), self._data)
        if different:
            raise ReproducibilityError(
                f"cannot load this state into {owner}: it was saved over another dataset "
                f"({'; '.join(different)}); resuming from it would train on other data. "
                "Rebuild the dataset with the saved settings."
            )
        state_dict = self._adopt_growth(state_dict)
        saved = state_dict["loader"]
        elastic = self.grid is not None and state_dict.get("samples") is not None
        compared = self._shared_fields() if elastic else self._fields
        differences = [
            f"{key} is {saved.get(key)!r} in the state but {value!r} here"
            for key, value in compared.items()
            if saved.get(key) != value
        ]
        if differences:
            raise ReproducibilityError(
                f"cannot load this state into {owner}: it was saved by a loader with other "
                f"settings ({'; '.join(differences)}); resuming from it would train on other "
                "data. Rebuild the loader with the saved settings, or resume elastically "
                "with get_data_loader(skip_samples=...)."
            )
        self._block = None  # batches in hand belong to the stream before the load
        self._prepared = None
        if elastic:
            super().load_state_dict(state_dict)  # at the saved samples, any batch grid
            samples = int(state_dict["samples"])
            global_batch, rank = saved_grid(state_dict["chain"])
            expected = self._sample_digest(samples, sample_probes(samples, global_batch, rank))
            if state_dict["digest"] != expected:
                raise self._diverged(state_dict, f"sample {state_dict['samples']}", expected)
            self._handed, self._tracked = None, False  # the next iter() starts at the state
            return
        position = check_state(
            adopt_curriculum(self, state_dict), self.chain_config(), owner, self._state_extra
        )
        expected = stream_digest(self, position, state_dict["fingerprint"], dict(self._fields))
        if state_dict["digest"] != expected:
            raise self._diverged(state_dict, f"position {position}", expected)
        super().load_state_dict(state_dict)
        self._handed, self._tracked = None, False  # the next iter() starts at the state

    def _adopt_growth(self, state: Mapping[str, Any]) -> Any:
        """``state`` in this loader's terms if its data only changed from the saved sample.

        The dataset grew, or a mixture's curriculum changed or gained samplers appended
        last, from the saved sample on (NOTE [ growth law ], NOTE [ adding a component ]).
        The saved digest is checked against the saved configuration (the records before
        the saved sample are the same), then recomputed for this one.
        """
        adopted = self.adopt_saved(state)  # NOTE [ state hooks ]
        saved, samples = state["loader"], state.get("samples")
        if adopted is state or self.grid is None or not isinstance(samples, int):
            return state
        fields = {**self._shared_fields(), "dataset_length": saved.get("dataset_length")}
        old_stream = fingerprint(stream_links([dict(link) for link in state["chain"]]))
        global_batch, rank = saved_grid(state["chain"])
        probes = sample_probes(samples, global_batch, rank)
        digest = sample_digest(self.grid.samples, samples, old_stream, fields, probes)
        if state["digest"] != digest:
            return state  # the data before the growth differs: the checks below say so
        loader = {**saved, "dataset_length": self._fields["dataset_length"]}
        return {**adopted, "loader": loader, "digest": self._sample_digest(samples, probes)}

    def _diverged(self, state: Mapping[str, Any], where: str, expected: str) -> Exception:
        return ReproducibilityError(
            f"cannot load this state into {type(self).__name__}: the batches before {where} "
            f"differ from the saved run's (digest {state['digest']!r} in the state but "
            f"{expected!r} here) although the seed, dataset length and chain match; the "
            "sampler's contents or the shuffle algorithm changed since the checkpoint. "
            "Resume with the code and data of the saved run."
        )
