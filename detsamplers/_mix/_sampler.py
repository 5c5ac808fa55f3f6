"""MixSampler: an endless stream that interleaves several chains with weights.

It implements NOTE [ mixture law ] (detsamplers/_mix/_law.py) over the segments of
_segment.py: position ``p`` is located in its segment, then each component's records are
read at their component positions (through the compiled kernel where it applies,
NOTE [ compiled mixture kernel ]). A resume's allowed changes are in _adopt.py
(NOTE [ adding a component ], NOTE [ state hooks ]).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _native
from .._errors import check_int
from .._seeds import derive
from .._shuffle import ReproducibleShuffleSampler
from .._source import Node, chain_of
from .._stage import Stage, _Cursor
from .._state import fingerprint
from ._adopt import adopt_curriculum, adopt_mixture_growth, mix_position
from ._components import _check_component, _component_length
from ._kernel import KERNEL_MAX_COMPONENTS, _feistel_permutations, _kernel_params
from ._law import MAX_COMPONENTS, MAX_WINDOW, _auto_window, _check_plan, _counts
from ._segment import _Segment

__all__ = ["MixSampler"]

#: The records a mixture numbers at most: its global records are one int64 range.
_MAX_RECORDS = 2**63 - 1

I64 = npt.NDArray[np.int64]


class MixSampler(Stage[int]):
    """Interleave several samplers with weights, as one endless stream (NOTE [ mixture law ]).

    Component ``k`` yields indices into its own dataset; the mixture yields them offset by
    the lengths of the components before it, so they index
    ``torch.utils.data.ConcatDataset(datasets)`` and an item from component ``k`` comes
    from dataset ``k``. A mixture is endless and takes the place of the repeat:
    [shuffle each component] → mix → shard → batch → skip.

    Args:
        samplers: One sampler per dataset: ``SequentialSampler(dataset)``,
            ``range(len(dataset))`` or a :class:`ReproducibleShuffleSampler` over one, each
            with its own seed. A :class:`RepeatSampler` around one is accepted too.
        weights: One non-negative weight per sampler, with a positive sum; they are
            normalised. With a curriculum it may name only the first samplers: the others
            enter with the segment that first names them (NOTE [ adding a component ]).
        seed: Keys the interleaving (any integer).
        window: Positions per window, in ``[1, 65536]``; by default the weights' common
            denominator if it is at most 4096, else 1024.
        curriculum: Later segments ``(start, weights)``, ``start`` increasing and positive:
            from mixture position ``start`` on, ``weights`` apply. No component loses or
            repeats a record at a switch. A segment names at least as many samplers as the
            one before it, and the last names them all; one that names more adds the
            samplers after those, each from its own position 0.

    Raises:
        TypeError: an argument has the wrong type (a ``bool`` weight, a string of weights).
        ValueError: no samplers; weights of the wrong length, negative, NaN or summing to
            zero; a weight too small for the window; an empty sampler with a positive
            weight; a sampler that is sharded, batched, skipped, already mixed or cannot
            seek; curriculum starts that do not increase; a segment that names fewer
            samplers than the one before it, or a last segment that does not name all.

    Determinism:
        Position ``p`` maps to (component, component position) by a pure function of
        ``(seed, weights, window, curriculum, p)``; each component's records depend only
        on its own chain. Nothing depends on the world size, ``num_workers`` or history.

    Examples:
        >>> from itertools import islice
        >>> from detsamplers import MixSampler
        >>> mix = MixSampler([range(4), range(2)], weights=[0.75, 0.25], seed=0)
        >>> mix.window, mix.counts
        (4, [3, 1])
        >>> first = list(islice(mix, 8))
        >>> sorted(i for i in first if i < 4), sorted(i for i in first if i >= 4)
        ([0, 0, 1, 1, 2, 3], [4, 5])
        >>> mix.progress(8)
        {'position': 8, 'consumed': [6, 2], 'epochs': [1, 1]}
    """

    verb = "mix"
    kind = "record"
    indexable = True
    infinite = True
    by_position_only = True

    def __init__(
        self,
        samplers: Sequence[Any],
        weights: Sequence[float],
        seed: int,
        *,
        window: int | None = None,
        curriculum: Sequence[tuple[int, Sequence[float]]] = (),
    ) -> None:
        if not isinstance(samplers, (list, tuple)):
            raise TypeError(
                "samplers should be a list of samplers, one per dataset, but got "
                f"{type(samplers).__name__}"
            )
        if not samplers:
            raise ValueError("samplers should hold at least one sampler, but got samplers=[]")
        seed = check_int("seed", seed)
        if window is not None:
            window = check_int("window", window, minimum=1)
            if window > MAX_WINDOW:
                raise ValueError(
                    f"window should be an integer in [1, {MAX_WINDOW}], but got window={window}"
                )
        if isinstance(curriculum, (str, bytes)) or not isinstance(curriculum, Sequence):
            raise TypeError(
                "curriculum should be a list of (start, weights) pairs, but got "
                f"{type(curriculum).__name__}"
            )
        k = len(samplers)
        if k > MAX_COMPONENTS:
            raise ValueError(f"samplers should hold at most {MAX_COMPONENTS} samplers, but got {k}")
        plan = _check_plan(weights, curriculum, k)
        nodes = [_check_component(i, s) for i, s in enumerate(samplers)]
        lengths = [_component_length(node) for node in nodes]
        if sum(lengths) > _MAX_RECORDS:
            raise ValueError(
                f"samplers should hold at most 2**63 - 1 records together (a mixture's records "
                f"are numbered as one int64 range), but got lengths {lengths} summing to "
                f"{sum(lengths)}; mix fewer or smaller components"
            )
        for i, (_, shares) in enumerate(plan):
            name = "weights" if i == 0 else f"curriculum[{i - 1}] weights"
            for c, (share, length) in enumerate(zip(shares, lengths[: len(shares)], strict=True)):
                if share > 0 and length == 0:
                    raise ValueError(
                        f"samplers[{c}] is empty but {name}[{c}] is positive: the mixture would "
                        "draw records it does not have; remove it or give it weight 0"
                    )
        segments: list[_Segment] = []
        for i, (start, shares) in enumerate(plan):
            name = "weights" if i == 0 else f"curriculum[{i - 1}] weights"
            size = window if window is not None else _auto_window(shares)
            # A component added by this segment starts at its own position 0; the segment
            # before it has no column for it (NOTE [ adding a component ]).
            bases = np.zeros(len(shares), dtype=np.int64)
            if segments:
                reached = segments[-1].consumed(start - segments[-1].start)
                bases[: len(reached)] = reached
            counts = _counts(name, shares, size)
            segments.append(_Segment(seed, i, start, shares, size, counts, bases))

        self._inner_obj = list(samplers)
        self._nodes = nodes
        self._lengths = lengths
        self._offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        self._perms = _feistel_permutations(nodes)
        self._kernel_params: npt.NDArray[np.uint64] | None = None
        self._seed = seed
        self._segments = segments
        self._starts = [s.start for s in segments]
        self._resume: int | None = None
        self.clock = None
        self._cursor = _Cursor(0)
        self._config: tuple[list[dict[str, Any]], str] | None = None

    # -- properties --------------------------------------------------------------------

    @property
    def samplers(self) -> list[Any]:
        """The component samplers, in order."""
        return list(self._inner_obj)

    @property
    def seed(self) -> int:
        """The seed of the interleaving."""
        return self._seed

    @property
    def lengths(self) -> list[int]:
        """Records per pass of each component (its dataset's length)."""
        return list(self._lengths)

    @property
    def window(self) -> int:
        """Positions per window of the first segment."""
        return self._segments[0].window

    @property
    def counts(self) -> list[int]:
        """Each component's positions per window, first segment (the samplers it names)."""
        return [int(c) for c in self._segments[0].counts]

    @property
    def shares(self) -> list[float]:
        """The realised share of each component named by the first segment, ``counts / window``."""
        first = self._segments[0]
        return [int(c) / first.window for c in first.counts]

    # -- the node protocol -------------------------------------------------------------

    def inner_node(self) -> None:  # type: ignore[override]
        # A mixture is where its chain's walk stops: its components are not one inner node.
        return None

    @property
    def pass_length(self) -> int:
        return int(sum(self._lengths))

    @property
    def records_per_item(self) -> int:
        return 1

    def locate(self, positions: I64) -> tuple[I64, I64]:
        """Component and component position of each mixture position (NOTE [ mixture law ]).

        Examples:
            >>> import numpy as np
            >>> mix = MixSampler([range(3), range(3)], weights=[1, 1], seed=0)
            >>> component, position = mix.locate(np.arange(4))
            >>> sorted(zip(component.tolist(), position.tolist()))
            [(0, 0), (0, 1), (1, 0), (1, 1)]
        """
        found = self._progression(positions)
        if found is not None:  # a rank's block, or a run
            segment, stride = found
            first = int(positions[0]) - segment.start
            return segment.locate_stride(first, stride, len(positions))
        if len(self._segments) == 1:
            return self._segments[0].locate(positions)
        which = np.searchsorted(np.asarray(self._starts), positions, side="right") - 1
        component = np.empty(len(positions), dtype=np.int64)
        position = np.empty(len(positions), dtype=np.int64)
        for s in np.unique(which).tolist():
            mask = which == s
            segment = self._segments[s]
            component[mask], position[mask] = segment.locate(positions[mask] - segment.start)
        return component, position

    def _progression(self, positions: I64) -> tuple[_Segment, int] | None:
        """The segment and stride of positions ``first + i * stride`` inside one segment."""
        n = len(positions)
        if n < 3:
            return None
        first, last = int(positions[0]), int(positions[-1])
        stride = int(positions[1]) - first
        if first < 0 or stride < 1 or last - first != stride * (n - 1):
            return None
        s = bisect_right(self._starts, first) - 1
        if s + 1 < len(self._starts) and last >= self._starts[s + 1]:
            return None
        if not bool((np.diff(positions) == stride).all()):
            return None
        return self._segments[s], stride

    def records(self, positions: I64) -> I64:
        n = len(positions)
        if n == 0:
            return positions.copy()
        progression = self._progression(positions)
        if progression is not None:
            compiled = self._kernel_records(positions, *progression)
            if compiled is not None:
                return compiled
        first = int(positions[0])
        s = bisect_right(self._starts, first) - 1
        segment = self._segments[s]
        end = self._starts[s + 1] if s + 1 < len(self._starts) else None
        if (
            int(positions[-1]) - first == n - 1
            and (end is None or first + n <= end)
            and (n < 2 or bool((np.diff(positions) == 1).all()))
        ):
            # A run of consecutive positions in one segment (a rank of one, or a seek):
            # each component's positions in it are consecutive too (NOTE [ mixture law ]),
            # from its count at the run's start.
            local = first - segment.start
            component = segment.run_components(local, n)
            return self._gather(component, segment.consumed(local))
        if progression is not None:
            # A rank's block (positions r, r + W, ...): components in ascending order.
            segment, stride = progression
            found = segment.locate_stride(first - segment.start, stride, n)
            return self._gather(*found, ascending=True)
        return self._gather(*self.locate(positions))

    def _kernel_records(self, positions: I64, segment: _Segment, stride: int) -> I64 | None:
        """:meth:`records` of the positions ``first + i * stride`` in ``segment``, compiled.

        None when the kernel does not apply: no kernel, a component that is not a Feistel
        shuffle of ``range(n)``, more than ``KERNEL_MAX_COMPONENTS`` components, or a short
        block (:meth:`_Segment.kernel_ready`).
        """
        kernel = _native.kernel
        if kernel is None or self._perms is None or len(self._perms) > KERNEL_MAX_COMPONENTS:
            return None
        n = len(positions)
        if not segment.kernel_ready(n):
            return None
        if self._kernel_params is None:
            self._kernel_params = _kernel_params(self._perms, self._offsets)
        out = np.empty(n, dtype=np.int64)
        first = int(positions[0]) - segment.start
        # A segment before an added component names only the first components (NOTE [
        # adding a component ]): its rows of the parameters.
        params = self._kernel_params[: len(segment.counts)]
        kernel.records_stride(*segment.kernel_args(), first, stride, n, params, out)
        return out

    def _gather(
        self,
        component: npt.NDArray[np.integer[Any]],
        position: I64 | list[int],
        *,
        ascending: bool = False,
    ) -> I64:
        """Each position's record: component ``k``'s chain at its position, offset.

        ``position`` is each position's component position, or (a run of consecutive
        positions) each component's first position. ``ascending``: each component's
        positions increase (positions given in stream order).
        """
        out = np.empty(len(component), dtype=np.int64)
        for k, node in enumerate(self._nodes):
            where = np.flatnonzero(component == k) if len(self._nodes) > 1 else None
            size = len(component) if where is None else len(where)
            if size == 0:
                continue
            if isinstance(position, list):
                wanted = np.arange(position[k], position[k] + size, dtype=np.int64)
            else:
                wanted = position if where is None else position.take(where)
            found = self._records(k, node, wanted, ascending or isinstance(position, list))
            if where is None:
                out[:] = found
            else:
                out[where] = found
        return out

    def _records(self, k: int, node: Node, wanted: I64, ascending: bool) -> I64:
        """Component ``k``'s records at its positions ``wanted``, offset into the concatenation.

        A Feistel shuffle of ``range(n)`` goes straight to its permutation at each pass
        the positions reach (the same values, fewer array passes); ascending positions
        are cut at the passes' ends.
        """
        if self._perms is not None:
            n = self._lengths[k]
            low, high = (
                (int(wanted[0]), int(wanted[-1]))
                if ascending
                else (int(wanted.min()), int(wanted.max()))
            )
            epoch, last = low // n, high // n
            if last == epoch:
                found = self._perms[k].at_epoch(wanted - epoch * n, epoch)
                found += self._offsets[k]
                return found
            if ascending and last - epoch < 8:
                ends = np.searchsorted(wanted, np.arange(epoch + 1, last + 1) * n)
                out = np.empty_like(wanted)
                for e, (a, b) in enumerate(pairwise([0, *ends.tolist(), len(wanted)]), epoch):
                    out[a:b] = self._perms[k].at_epoch(wanted[a:b] - e * n, e)
                out += self._offsets[k]
                return out
        mapped: I64 = node.records(wanted) + self._offsets[k]
        return mapped

    def batches(self, positions: I64) -> list[list[int]]:
        raise NotImplementedError("a MixSampler yields records; batch it with a BatchSampler")

    def progress(self, position: int) -> dict[str, Any]:
        """Records each component has given in mixture positions ``[0, position)``.

        ``epochs[k]`` is ``consumed[k] // lengths[k]``: the passes component ``k`` has
        completed (0 for an empty component). O(K) at any position.

        Examples:
            >>> mix = MixSampler([range(10), range(3)], weights=[1, 1], seed=0)
            >>> mix.progress(20)
            {'position': 20, 'consumed': [10, 10], 'epochs': [1, 3]}
        """
        position = check_int("position", position, minimum=0)
        s = bisect_right(self._starts, position) - 1
        segment = self._segments[s]
        consumed = segment.consumed(position - segment.start)
        consumed += [0] * (len(self._lengths) - len(consumed))  # components yet to enter
        epochs = [c // n if n else 0 for c, n in zip(consumed, self._lengths, strict=True)]
        return {"position": position, "consumed": consumed, "epochs": epochs}

    def consumed_many(self, positions: I64) -> I64:
        """``progress(p)["consumed"]`` for each ``p`` of ``positions`` (all >= 0) at once.

        ``(len(positions), K)``: a few numpy calls per segment touched, not one
        :meth:`progress` per position (a mixture with parts asks at one position per lane).

        Examples:
            >>> mix = MixSampler([range(10), range(3)], weights=[1, 1], seed=0)
            >>> mix.consumed_many(np.array([20, 7])).tolist() == [
            ...     mix.progress(20)["consumed"], mix.progress(7)["consumed"]]
            True
        """
        positions = np.asarray(positions, dtype=np.int64)
        out = np.zeros((len(positions), len(self._lengths)), dtype=np.int64)
        which = np.searchsorted(np.asarray(self._starts), positions, side="right") - 1
        for s in np.unique(which).tolist():
            rows = np.flatnonzero(which == s)
            segment = self._segments[s]
            got = segment.consumed_many(positions[rows] - segment.start)
            out[rows, : got.shape[1]] = got
        return out

    def adopt_state(self, top: Node, state: Any) -> Any:
        """A later curriculum, appended samplers or grown components (NOTE [ state hooks ])."""
        return adopt_mixture_growth(top, adopt_curriculum(top, state))

    def state_additions(self, top: Node, position: int) -> dict[str, Any]:
        """Where each component is at ``top``'s ``position`` (``"mixture"``, informational)."""
        found = mix_position(top, position)
        return {} if found is None else {"mixture": found[0].progress(found[1])}

    def config(self) -> dict[str, Any]:
        seeds = []
        components = []
        for node in self._nodes:
            chain = [link.config() for link in reversed(chain_of(node))]
            components.append(fingerprint(chain))
            seeds.append(next((link.get("seed") for link in chain if "seed" in link), None))
        first = self._segments[0]
        return {
            "stage": "mix",
            "seed": self._seed,
            "weights": [round(w, 12) for w in first.shares],
            "window": first.window,
            "curriculum": [s.config() for s in self._segments[1:]],
            "lengths": list(self._lengths),
            "seeds": seeds,
            "components": components,
        }

    def __len__(self) -> int:
        return self.pass_length

    @classmethod
    def from_datasets(
        cls,
        datasets: Sequence[Any],
        weights: Sequence[float],
        seed: int,
        *,
        shuffle: bool = True,
        window: int | None = None,
        curriculum: Sequence[tuple[int, Sequence[float]]] = (),
    ) -> MixSampler:
        """Mix map-style datasets, each shuffled with its own seed hashed from ``seed``.

        Index the result's items into ``torch.utils.data.ConcatDataset(datasets)``.

        Examples:
            >>> from itertools import islice
            >>> mix = MixSampler.from_datasets([range(100), range(10)], [0.9, 0.1], seed=0)
            >>> mix.window, mix.counts, len(mix)
            (10, [9, 1], 110)
            >>> sum(i >= 100 for i in islice(mix, 50))
            5
        """
        samplers: list[Any] = []
        for i, dataset in enumerate(datasets):
            if not hasattr(dataset, "__len__"):
                raise TypeError(
                    f"datasets[{i}] should be a map-style dataset with __len__, but got "
                    f"{type(dataset).__name__}"
                )
            records = range(len(dataset))
            samplers.append(
                ReproducibleShuffleSampler(records, derive(seed, "mix-component", i))
                if shuffle
                else records
            )
        return cls(samplers, weights, seed, window=window, curriculum=curriculum)
