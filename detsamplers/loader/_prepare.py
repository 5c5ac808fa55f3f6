"""Accelerate's ``prepare``: its sharder given the batches that are this process's own.

NOTE [ accelerate prepare ]
``accelerator.prepare(model, optimizer, loader)`` rebuilds the loader as a
``DataLoaderShard`` whose batch sampler is, on ``W > 1`` processes, a
``BatchSamplerShard`` around ``loader.batch_sampler``: it iterates that sampler from its
start and keeps batch ``i`` on process ``i mod W``. When our batch sampler's ``__iter__``
is called from that wrapper (recognised by its code, as in NOTE [ accelerate skip ]), it
answers by the loader's form:

- unsharded (``num_replicas=1``): the stream as it is. Process ``p`` takes batches
  ``p, p + W, ...`` of the one stream, Accelerate's own rule and already exact: each global
  step is ``W`` consecutive batches, every record once per pass. A process's batch moves
  the stream ``W`` batches on.
- per rank (``num_replicas=W``, ``rank=p``, ``p`` Accelerate's process index): each of its
  batches ``W`` times in a row, so that the sharder, keeping one in every ``W``, picks this
  rank's own batches back: process ``p`` sees what the loader gives alone. A batch moves
  the stream one batch on. Its batch sampler has no ``batch_size``, so the sharder yields
  every group and adds nothing at the end of a validation pass (``even_batches`` pads
  nothing).

Any other ``num_replicas``/``rank`` is refused, naming the fix. Either way, a global step
covers the same samples (``[s W B, (s + 1) W B)`` of the stream from the start or the
loaded sample), so a state saved under one form and world size loads into the other.

The state is the batches handed to the training loop: ``DataLoaderShard.__iter__`` keeps
one batch in hand ahead and torch prefetches more, so the position our sampler has drawn
to is ahead. The wrapper's frame is kept, and its ``batch_index`` read when the state is
saved: suspended at its ``yield``, ``batch_index + 1`` batches were handed out (its
locals outlive the iteration). ``loader.state_dict()`` (the loader ``get_data_loader``
returned, registered with ``accelerator.register_for_checkpointing``) then saves the
start plus that many batches times the stride above, with any ``num_workers``; a new
``iter()`` of an endless stream starts there too. On one process ``prepare`` does not
shard, and the same count applies with stride 1.

Refused, as they cannot be exact: ``dispatch_batches=True`` (process 0 iterates the
loader alone, ahead, and splits each group of ``W`` batches between the processes: not the
per-rank order, and no count of the batches handed out), and
``use_stateful_dataloader=True`` on several processes (its ``StatefulDataLoader`` saves a
count of the sharder's batches and replays them on load: ``O(n)``, on another world size
the wrong count, and on top of our own state twice). ``split_batches=True`` is refused by
Accelerate itself: it needs a ``batch_size`` on the batch sampler, which ours has not.
``accelerator.skip_first_batches`` on the prepared loader wraps the sharder in its
``SkipBatchSampler``; its count is taken over and the stream starts that many batches
times the stride on (NOTE [ accelerate skip ]).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any, TypeVar

__all__ = ["PreparedIteration", "accelerate_prepared", "each_for_every_process"]

T = TypeVar("T")

#: Frames between our batch sampler's ``__iter__`` and Accelerate's loader, at most.
_DEPTH = 32

#: How to save and resume a prepared loader (docs/recipes/accelerate.md).
_RESUME = (
    "the loader is stateful itself: call accelerator.register_for_checkpointing(loader) "
    "with the loader get_data_loader returned, and save_state/load_state resume it exactly"
)


class PreparedIteration:
    """One iteration of our batch sampler by Accelerate's prepared loader.

    Args:
        start: The batch sampler's position where the iteration starts.
        stride: The positions each batch handed to a process moves the stream on.
        frame: The frame of ``DataLoaderShard.__iter__`` that hands the batches out, or
            None if the sharder is iterated by something else.
    """

    __slots__ = ("frame", "start", "stride")

    def __init__(self, start: int, stride: int, frame: FrameType | None) -> None:
        self.start = start
        self.stride = stride
        self.frame = frame

    def handed(self) -> int | None:
        """Batches handed to the training loop so far, or None if not known."""
        if self.frame is None:
            return None
        index = self.frame.f_locals.get("batch_index")
        # Suspended at its yield, batch_index + 1 batches are out; before its first
        # batch, none.
        return index + 1 if type(index) is int else 0

    def position(self) -> int | None:
        """The position after the batches handed out, or None if not known."""
        handed = self.handed()
        return None if handed is None else self.start + self.stride * handed


class Prepared:
    """What Accelerate's prepared loader around our batch sampler looks like.

    Attributes:
        num_processes: The processes the sharder splits between (1 when it does not).
        process_index: This process's index.
        skip: Batches per process that a ``SkipBatchSampler`` over the sharder would
            replay, taken over (0 if none).
        frame: The ``DataLoaderShard.__iter__`` frame, or None.
    """

    __slots__ = ("frame", "num_processes", "process_index", "skip")

    def __init__(
        self, num_processes: int, process_index: int, skip: int, frame: FrameType | None
    ) -> None:
        self.num_processes = num_processes
        self.process_index = process_index
        self.skip = skip
        self.frame = frame


def _code(module: Any, owner: str, name: str) -> Any:
    return getattr(getattr(getattr(module, owner, None), name, None), "__code__", None)


def accelerate_prepared(
    batch_sampler: object, caller: FrameType, seekable: bool
) -> Prepared | None:
    """Accelerate's prepared loader iterating ``batch_sampler`` from ``caller``, if it is.

    ``caller`` is the frame that called the batch sampler's ``__iter__``; a ``seekable``
    one takes over the count of a ``SkipBatchSampler`` around the sharder. Returns None when
    no prepared loader iterates it (then nothing changes), and raises for the settings
    that cannot be exact (NOTE [ accelerate prepare ]).

    Raises:
        ValueError: ``dispatch_batches=True``, or ``use_stateful_dataloader=True`` on
            several processes.
    """
    module = sys.modules.get("accelerate.data_loader")
    if module is None:
        return None
    sharders = {_code(module, "BatchSamplerShard", "_iter_with_no_split")} - {None}
    shard_iter = _code(module, "DataLoaderShard", "__iter__")
    dispatcher = ("__iter__", "_fetch_batches")
    dispatch = {_code(module, "DataLoaderDispatcher", name) for name in dispatcher} - {None}
    skip_iter = _code(module, "SkipBatchSampler", "__iter__")
    wrapper: Any = None
    skip = 0
    if caller.f_code in sharders:
        wrapper = caller.f_locals.get("self")
        if getattr(wrapper, "batch_sampler", None) is not batch_sampler:
            return None
        outer = caller.f_back
        skipper: Any = outer.f_locals.get("self") if outer is not None else None
        if (
            seekable
            and outer is not None
            and outer.f_code is skip_iter
            and getattr(skipper, "batch_sampler", None) is wrapper
            and type(getattr(skipper, "skip_batches", None)) is int
        ):
            skip = max(0, skipper.skip_batches)
            skipper.skip_batches = 0
    frame: FrameType | None = caller
    for _ in range(_DEPTH):
        if frame is None:
            break
        if frame.f_code in dispatch:
            raise ValueError(
                "accelerator.prepare() should not dispatch the batches of a detsamplers "
                "loader, but got dispatch_batches=True: process 0 reads ahead for every "
                "process and splits its batches, so neither this loader's per-process order "
                "nor the batches handed out (its state) hold; build the Accelerator with "
                "DataLoaderConfiguration(dispatch_batches=False) (the default for a "
                "map-style dataset)"
            )
        if frame.f_code is shard_iter:
            break
        frame = frame.f_back
    loader = frame.f_locals.get("self") if frame is not None else None
    if frame is None or not _iterates(loader, wrapper if wrapper is not None else batch_sampler):
        frame = None
    if wrapper is None:
        if frame is None or getattr(loader, "use_stateful_dataloader", False):
            return None  # torchdata's StatefulDataLoader saves our state itself
        return Prepared(1, 0, 0, frame)
    num_processes = getattr(wrapper, "num_processes", 1)
    if num_processes > 1 and getattr(loader, "use_stateful_dataloader", False):
        raise ValueError(
            "accelerator.prepare() on several processes should not back a detsamplers "
            "loader with torchdata's StatefulDataLoader, but got "
            "DataLoaderConfiguration(use_stateful_dataloader=True), whose state replays "
            "the sharded batches on load (slow, wrong on another number of processes); "
            f"build the Accelerator without it: {_RESUME}"
        )
    return Prepared(num_processes, getattr(wrapper, "process_index", 0), skip, frame)


def _iterates(loader: Any, batch_sampler: object) -> bool:
    """Whether Accelerate's ``loader`` iterates ``batch_sampler`` (or a skip around it)."""
    base = getattr(loader, "__dict__", {}).get("base_dataloader")
    outer = getattr(base, "batch_sampler", None)
    return outer is batch_sampler or getattr(outer, "batch_sampler", None) is batch_sampler


def check_form(num_replicas: int, rank: int, prepared: Prepared) -> int:
    """The stride of a prepared loader's batches (NOTE [ accelerate prepare ]).

    Raises:
        ValueError: the loader is split between another number of processes, or for
            another process, than Accelerate's.
    """
    world, index = prepared.num_processes, prepared.process_index
    if world == 1 or num_replicas == 1:
        return world
    if num_replicas != world or rank != index:
        raise ValueError(
            "accelerator.prepare() gives this loader to process "
            f"{index} of num_processes={world}, but it was built for rank={rank} of "
            f"num_replicas={num_replicas}; build it with get_data_loader("
            "num_replicas=accelerator.num_processes, rank=accelerator.process_index), or "
            "unsharded (num_replicas=1), before prepare()"
        )
    return 1


def each_for_every_process(batches: Iterator[T], world: int) -> Iterator[T]:
    """Every batch ``world`` times in a row: a sharder keeping one in ``world`` keeps each.

    Examples:
        >>> list(each_for_every_process(iter([[0, 1], [2, 3]]), 2))
        [[0, 1], [0, 1], [2, 3], [2, 3]]
    """
    for batch in batches:
        for _ in range(world):
            yield batch
