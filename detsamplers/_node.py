"""Chain nodes: the protocol every link of a sampler chain follows.

NOTE [ position algebra ]
A chain is read as a stream of positions 0, 1, 2, ... For a finite node, positions
``[e * P, (e + 1) * P)`` are its pass ``e`` (P items per pass), so epoch ``e`` is just a
larger position and ``divmod(position, P)`` recovers (epoch, offset). Every stage is a
pure map from its own positions to its inner node's positions; the source at the bottom
turns positions into dataset indices (``records``), or a torch ``BatchSampler`` turns
them into lists of indices (``batches``). Nothing is replayed: any position is computed
directly, for a whole numpy block at a time.

A chain whose source cannot be addressed (a foreign sampler that only iterates) is not
*indexable*; its stages then fall back to iterating, filtering and discarding, as
Determined's samplers do, and stay correct but pay O(position) to seek.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

__all__ = ["MAX_POSITION", "Clock", "Kind", "Node", "chain_of", "check_reach"]

I64 = npt.NDArray[np.int64]
Kind = Literal["record", "batch"]


class Clock:
    """The next pass number of a finite chain segment, shared by its stages.

    Every finite stage of one segment reads the same clock, so ``set_epoch`` on the inner
    shuffle also steers the shard that wraps it. A repeat freezes the clock of what it
    wraps: below a repeat the pass number is ``position // N`` and cannot be set.
    """

    __slots__ = ("frozen_by", "next_pass")

    def __init__(self) -> None:
        self.next_pass = 0
        self.frozen_by: str | None = None


class Node:
    """One link of a chain. Stages subclass it together with ``torch.utils.data.Sampler``."""

    #: What the link's items are: dataset indices, or lists of them.
    kind: Kind = "record"
    #: Whether ``records``/``batches`` can address any position directly.
    indexable: bool = False
    #: Whether the stream never ends (a repeat is inside).
    infinite: bool = False
    #: The stage's verb in the canonical order, or ``"source"``.
    verb: str = "source"
    #: Shared pass counter of a finite segment, or None.
    clock: Clock | None = None
    #: Whether the link is read only by position (``records``), never by iterating
    #: (``fallback_pass``/``fallback_stream``): a mixture. No stage may wrap such a link
    #: through one that cannot be addressed (``Stage`` refuses it when built).
    by_position_only: bool = False

    @property
    def pass_length(self) -> int:
        """Items in one pass of a finite node: exact when indexable, else ``len()`` (or 0)."""
        raise NotImplementedError

    @property
    def records_per_item(self) -> int:
        """Dataset indices per item: 1 for records, the batch size for batches."""
        return 1

    def inner_node(self) -> Node | None:
        """The node this one wraps, or None for a source."""
        return None

    def records(self, positions: I64) -> I64:
        """Dataset indices at ``positions`` (record chains only)."""
        raise NotImplementedError

    def batches(self, positions: I64) -> list[list[int]]:
        """Batches at ``positions`` (batch chains only)."""
        raise NotImplementedError

    def fallback_pass(self, epoch: int) -> Iterator[Any]:
        """Iterate pass ``epoch`` of a finite node without random access."""
        raise NotImplementedError

    def fallback_stream(self) -> Iterator[Any]:
        """Iterate an infinite node from position 0 without random access."""
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """This link's part of the chain fingerprint (JSON-able)."""
        raise NotImplementedError

    # -- hooks the template calls on every link (NOTE [ state hooks ]) ------------------

    def adopt_state(self, top: Node, state: Any) -> Any:
        """``state`` rewritten in ``top``'s terms where this link allows it, else ``state``."""
        return state

    def state_additions(self, top: Node, position: int) -> dict[str, Any]:
        """Informational keys this link adds to ``top``'s state at ``position``."""
        return {}


#: Positions are int64; a stage that multiplies them checks that the product still fits.
MAX_POSITION = 2**63 - 1


def check_reach(positions: I64, factor: int, offset: int, owner: str) -> None:
    """Raise ``OverflowError`` if ``positions * factor + offset`` would not fit in int64."""
    if len(positions) and int(positions.max()) > (MAX_POSITION - offset) // factor:
        raise OverflowError(
            f"{owner} cannot address position {int(positions.max())}: times {factor} it "
            "exceeds the int64 positions of the stream (2**63); the skip or the number of "
            "passes is too large for this chain"
        )


def chain_of(node: Node) -> list[Node]:
    """The links of ``node``'s chain, outermost first, down to its source."""
    links = [node]
    inner = node.inner_node()
    while inner is not None:
        links.append(inner)
        inner = inner.inner_node()
    return links
