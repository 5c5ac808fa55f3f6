"""Sample positions: where a batch chain's batches lie in the global sample stream.

NOTE [ sample positions ]
Under the order shuffle → repeat → shard → batch → skip, the record stream below the
shard (the *sample stream* ``s_0, s_1, ...``: the shuffled, repeated records) is the same
for every world size and batch size. Rank ``r`` of ``W`` with ``B`` records a batch reads
batch ``b`` as the samples ``(b B + j) W + r`` for ``j < B``, so global batch ``b`` (the
union of every rank's batch ``b``) is the consecutive samples ``[b G, (b + 1) G)`` with
``G = B W``. A chain that resumes at sample ``S`` (its *origin*) shifts that grid:

    rank r, batch b, record j  ->  sample  S + (b B + j) W + r

and its global batch ``b`` is the samples ``[S + b G, S + (b + 1) G)``. ``S`` need not be
a multiple of ``G``: the first resumed global batch starts exactly where the last trained
one ended, for any new ``B`` and ``W``. This is still a pure index map from the skip's
positions to the sample stream's positions, computed for a numpy block at a time, so a
seek costs O(1) whatever ``S`` is. When ``S`` is a multiple of ``G`` the grid is the
plain one moved by ``S / G`` batches, and the chain takes its ordinary path.

The origin is a position, not configuration: it is not in the fingerprint. A chain's
state records ``samples = S + position * G``, the samples of every rank consumed before
its next global batch. A state may be loaded into a chain with another batch size, world
size or rank if the links that define the sample stream (source, shuffle, repeat, or a
mixture in their place) are identical; the chain then continues at sample ``samples``.
Anything else that differs is refused as before. Under a mixture the sample stream is
the mixture's stream, so its position (rank 0's, NOTE [ mixture law ]) is ``samples``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._batch import BatchSource, split_batches
from ._errors import ReproducibilityError
from ._source import Node, check_reach
from ._state import check_header, describe, link_differences

__all__ = [
    "ELASTIC_STAGES",
    "SampleGrid",
    "check_elastic_state",
    "check_saved_samples",
    "sample_grid",
    "saved_grid",
    "stream_links",
]

I64 = npt.NDArray[np.int64]

#: The stages a sample-position resume may rebuild with other parameters.
ELASTIC_STAGES = ("shard", "batch", "skip")


@dataclass(frozen=True)
class SampleGrid:
    """How the batches of one rank tile the sample stream (NOTE [ sample positions ])."""

    batch_size: int
    world_size: int
    rank: int
    samples: Node

    @property
    def global_batch(self) -> int:
        """Samples in one global batch, ``B * W``."""
        return self.batch_size * self.world_size

    def first_samples(self, positions: I64, origin: int) -> I64:
        """The sample of each batch's first record on this rank: ``S + b G + r``."""
        out: I64 = origin + positions * self.global_batch + self.rank
        return out

    def batches(self, positions: I64, origin: int) -> list[list[int]]:
        """This rank's batches at ``positions`` of a grid that starts at sample ``origin``."""
        size, world = self.batch_size, self.world_size
        check_reach(positions, self.global_batch, origin + self.global_batch, "SkipBatchSampler")
        within = np.arange(size, dtype=np.int64) * world
        starts = self.first_samples(positions, origin)
        flat = self.samples.records((starts[:, None] + within).ravel()).tolist()
        return split_batches(flat, size)


def sample_grid(node: Node) -> SampleGrid | None:
    """The grid of a batch chain ``node`` (below its skip), or None if it has none.

    A chain has a grid when it is torch's ``BatchSampler`` over an addressable, infinite
    record stream, sharded or not: [shuffle →] repeat [→ shard] → batch.
    """
    if not (isinstance(node, BatchSource) and node.indexable and node.infinite):
        return None
    inner = node.inner_node()
    world, rank = 1, 0
    if inner.verb == "shard":
        world, rank = int(inner.world_size), int(inner.rank)  # type: ignore[attr-defined]
        inner = inner.inner_node()  # type: ignore[assignment]
    if inner is None or inner.kind != "record" or not (inner.indexable and inner.infinite):
        return None
    return SampleGrid(node.records_per_item, world, rank, inner)


def saved_grid(chain: list[dict[str, Any]]) -> tuple[int, int]:
    """The global batch and rank of a saved chain configuration with a sample grid.

    Examples:
        >>> saved_grid([{"source": "range"}, {"stage": "shard", "world_size": 2, "rank": 1},
        ...             {"stage": "batch", "batch_size": 3}, {"stage": "skip"}])
        (6, 1)
    """
    world: Any = 1
    rank: Any = 0
    size: Any = None
    for link in chain:
        if link.get("stage") == "shard":
            world, rank = link.get("world_size"), link.get("rank")
        elif link.get("stage") == "batch":
            size = link.get("batch_size")
    values = (world, rank, size)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ValueError(
            "state['chain'] should hold a batch link with its batch_size (and a shard link "
            f"with world_size and rank), but got {chain!r}; pass the state the chain saved"
        )
    assert isinstance(world, int) and isinstance(rank, int) and isinstance(size, int)
    return size * world, rank


def stream_links(chain: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The links of ``chain`` (source outwards) that define the sample stream."""
    return [link for link in chain if link.get("stage") not in ELASTIC_STAGES]


def check_saved_samples(samples: Any) -> int:
    """``state['samples']`` as an int, or a clear error.

    Examples:
        >>> check_saved_samples(12)
        12
        >>> check_saved_samples(True)
        Traceback (most recent call last):
        ...
        TypeError: state['samples'] should be an integer from state_dict(), but got True of type bool
    """  # noqa: E501
    if isinstance(samples, bool) or not isinstance(samples, int):
        raise TypeError(
            f"state['samples'] should be an integer from state_dict(), but got {samples!r} "
            f"of type {type(samples).__name__}"
        )
    if not 0 <= samples <= 2**62:
        raise ValueError(
            f"state['samples'] should be a non-negative integer of at most 2**62, but got {samples}"
        )
    return samples


def check_elastic_state(
    state: Any, chain: list[dict[str, Any]], owner: str, extra: tuple[str, ...]
) -> int:
    """Validate a state saved by a chain with another grid and return its ``samples``.

    Raises:
        TypeError: ``state`` is not a mapping of the right shape.
        ValueError: its version is unknown or its ``samples`` is not a count.
        ReproducibilityError: the links that define the sample stream differ, or the
            saved chain has no sample grid (the message names what differs).
    """
    check_header(state, ("version", "position", "fingerprint", "chain", *extra), owner)
    assert isinstance(state, Mapping)
    saved = state["chain"]
    if not isinstance(saved, list) or not all(isinstance(link, Mapping) for link in saved):
        raise TypeError(
            f"state['chain'] should be a list of dicts from {owner}.state_dict(), but got {saved!r}"
        )
    saved = [dict(link) for link in saved]
    samples = state.get("samples")
    if samples is None:
        differences = link_differences(saved, chain)
        raise ReproducibilityError(
            f"cannot load this state into {owner}: it was saved from a different chain "
            f"({'; '.join(differences)}) that has no sample positions, so it can only "
            "resume an identical chain. Rebuild the chain exactly as it was when the state "
            "was saved."
        )
    samples = check_saved_samples(samples)
    old, new = stream_links(saved), stream_links(chain)
    if old != new:
        raise ReproducibilityError(
            f"cannot load this state into {owner}: the sample stream differs "
            f"({'; '.join(link_differences(old, new))}); a resume may change the batch size, "
            "world size and rank, but not the source, shuffle or repeat. Rebuild "
            f"{describe(old)} exactly as it was when the state was saved."
        )
    return samples
