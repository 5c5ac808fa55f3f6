"""Grow: a shuffle whose dataset gains records mid-run, each unseen record once per epoch.

NOTE [ growth law ]
A shuffle's pass ``e`` is the keyed permutation ``perm_N(., e)`` of its ``N`` records. If
the dataset grows to ``N'`` at stream position ``p``, offset ``o`` of pass ``e``, the
records already read in that pass are exactly ``perm_N(0..o-1, e)``: the permutation is
a bijection, so "was record r seen this pass?" is ``inverse(r) < o``, and the unseen old
records are ``perm_N(o), ..., perm_N(N-1)``, addressable by rank without any search.
The rest of the pass reads a virtual array ``V`` of ``U = (N - o) + (N' - N)`` records,
``V[v] = perm_N(o + v, e)`` for ``v < N - o`` and ``N + (v - (N - o))`` after, through
a second keyed permutation: offset ``o + t`` of the pass is ``V[perm_U(t, e)]``, the
permutation keyed by (seed, growth position) (NOTE [ seed mixing ]). So the pass covers
every old record not yet read and every new record exactly once, none twice, and is
``o + U = N'`` long. A second growth in the same pass applies the same rule to the
current phase's permutation (one more level per growth of that pass); a growth at an
offset of 0 (on a pass boundary) needs no phase at all.

Passes after the growing one are ordinary shuffles of ``N'`` records:
``perm_N'(., e)``, the same as a shuffle built over ``N'`` records from the start at that
pass number. Pass boundaries are no longer ``e N``: the stream is a list of *eras*, each
a run of passes of one length from a base position (a prefix sum over the history, one
era per growth at most), found by bisection in O(log G) for ``G`` growths. Any position
costs O(1 + growths within its pass), no replay, and the map stays a pure function of
(seed, history, position): a resume seeks, ranks compute only their share, and the global
batches do not depend on the world size.

The history is part of the chain's configuration (``lengths`` in the shuffle link,
``[[0, N0], [p1, N1], ...]``), so its fingerprint changes with it. A state saved before a
growth loads into a chain that records the growth at or after the saved position: the
positions before it read the same records (:func:`adopt_growth`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ._errors import ReproducibilityError, check_int
from ._permute import MAX_N, FeistelPermutation, Permutation, make_permutation
from ._seeds import derive
from ._shuffle import PermutationKind, _Shuffle
from ._source import IndexSource, Node, chain_of
from ._state import fingerprint

__all__ = ["GrowingShuffleSampler", "adopt_growth", "truncated_chain"]

I64 = npt.NDArray[np.int64]


class _Lazy:
    """A permutation built on its first call: a long history builds only what is read."""

    __slots__ = ("_args", "_perm")

    def __init__(self, kind: str, n: int, key: int | tuple[int, str, str, int]) -> None:
        self._args = (kind, n, key)
        self._perm: Permutation | None = None

    def _built(self) -> Permutation:
        if self._perm is None:
            kind, n, key = self._args
            self._perm = make_permutation(kind, n, key if isinstance(key, int) else derive(*key))
        return self._perm

    def __call__(self, index: I64, epoch: I64) -> I64:
        return self._built()(index, epoch)

    def at_epoch(self, index: I64, epoch: int) -> I64:
        """``self(index, epoch array)`` for elements that all share one ``epoch``."""
        perm = self._built()
        if isinstance(perm, FeistelPermutation):
            return perm.at_epoch(index, epoch)
        return perm(index, np.full(len(index), epoch, dtype=np.int64))


class _Phase(NamedTuple):
    """From ``offset`` of a growing pass on, offset ``offset + t`` reads ``V[perm(t)]``.

    ``V`` holds ``carried`` unseen records of the previous phase (its local positions
    ``step, step + 1, ...``) then the new records ``old, old + 1, ...``; ``unseen`` is
    ``len(V)``. Phase 0 is the pass's ordinary permutation (``carried = unseen``).
    """

    offset: int
    step: int
    carried: int
    old: int
    unseen: int
    perm: _Lazy


class _Era(NamedTuple):
    """Passes ``epoch, epoch + 1, ...`` of ``length`` each, from position ``base`` on.

    ``phases`` (if any) describe the era's first pass, which grew mid-way.
    """

    base: int
    epoch: int
    length: int
    perm: _Lazy
    phases: tuple[_Phase, ...]


def _check_growth(growth: Any, initial: int) -> list[tuple[int, int]]:
    """Validate ``(position, new_length)`` pairs: positions and lengths increasing."""
    if isinstance(growth, (str, bytes)) or not isinstance(growth, Sequence):
        raise TypeError(
            "growth should be a list of (position, new_length) pairs, but got "
            f"growth={growth!r} of type {type(growth).__name__}"
        )
    out: list[tuple[int, int]] = []
    position, length = 0, initial
    for i, entry in enumerate(growth):
        if not (isinstance(entry, (tuple, list)) and len(entry) == 2):
            raise TypeError(
                f"growth[{i}] should be a (position, new_length) pair, but got {entry!r}"
            )
        at = check_int(f"growth[{i}] position", entry[0], minimum=1)
        size = check_int(f"growth[{i}] new_length", entry[1], minimum=1)
        if at <= position:
            raise ValueError(
                f"growth[{i}] position should be greater than {position} (positions "
                f"increase), but got {at}"
            )
        if size <= length:
            raise ValueError(
                f"growth[{i}] new_length should be greater than {length}, the length before "
                f"it (a dataset may only grow), but got {size}; to remove records, start a "
                "new run"
            )
        if size > MAX_N:
            raise ValueError(f"growth[{i}] new_length should be at most 2**62, but got {size}")
        out.append((at, size))
        position, length = at, size
    return out


class GrowingShuffleSampler(_Shuffle[int]):
    """A shuffle over a dataset that grew mid-run (NOTE [ growth law ]).

    ``growth=[(p, n), ...]`` records that at stream position ``p`` (a sample position: the
    records every rank had consumed, ``state["samples"]`` of a batch chain) the dataset
    grew to ``n`` records, new records appended after the old ones. The rest of the pass
    that ``p`` falls in reads every old record it had not read yet and every new record,
    each exactly once, in a keyed order; later passes are ordinary shuffles of ``n``
    records. Without growth it is exactly :class:`ReproducibleShuffleSampler`: same order,
    same state, so a run started with that can continue with this one.

    Wrap it in a :class:`RepeatSampler` (passes differ in length, so nothing else may wrap
    it directly) or use it as a :class:`MixSampler` component, whose growth positions are
    that component's own positions (``MixSampler.progress(p)["consumed"][k]``).

    Args:
        sampler: The dataset's records now: ``SequentialSampler(dataset)``, a ``range`` or
            an index array, of the last growth's length.
        seed: Any integer.
        initial_length: Records before the first growth; required with ``growth``.
        growth: ``(position, new_length)`` pairs, positions and lengths increasing.
        permutation: ``"feistel"`` (default) or ``"exact"``, as for the plain shuffle.

    Raises:
        TypeError: an argument has the wrong type (a ``bool`` or float position, a
            growth that is not a list of pairs).
        ValueError: a length that shrinks or stays, positions that do not increase,
            ``initial_length`` missing or not matching, a ``sampler`` of another length
            than the last growth's, or one that is not an addressable source.

    Determinism:
        Position ``q`` maps to a record by a pure function of (seed, permutation,
        initial_length, growth, q): not of the world size or of where the run resumed.

    Examples:
        >>> from itertools import islice
        >>> from detsamplers import GrowingShuffleSampler, RepeatSampler
        >>> grown = RepeatSampler(GrowingShuffleSampler(range(6), seed=0, initial_length=4,
        ...                                             growth=[(2, 6)]))
        >>> stream = list(islice(grown, 18))
        >>> stream[:2], sorted(stream[2:6])
        ([0, 1], [2, 3, 4, 5])
        >>> sorted(stream[6:12]) == sorted(stream[12:18]) == list(range(6))
        True
    """

    grows = False

    def __init__(
        self,
        sampler: Iterable[int],
        seed: int,
        *,
        initial_length: int | None = None,
        growth: Sequence[tuple[int, int]] = (),
        permutation: PermutationKind = "feistel",
    ) -> None:
        super().__init__(sampler, seed, permutation, "sampler")
        if not isinstance(self._inner, IndexSource):
            raise ValueError(
                "GrowingShuffleSampler should wrap the dataset's records (SequentialSampler"
                f"(dataset), a range or an index array), but got {type(sampler).__name__}: "
                "growth appends records to a source, so nothing may sit between them"
            )
        length = self._inner.pass_length
        if length == 0:
            raise ValueError(
                "sampler should have at least one record, but it is empty: a shuffle that "
                "grows reads its records pass after pass; check the dataset's path or filter"
            )
        if initial_length is None:
            if isinstance(growth, (list, tuple)) and growth:
                raise TypeError(
                    "missing initial_length: pass the number of records before the first "
                    "growth, e.g. GrowingShuffleSampler(sampler, seed, initial_length=N0, "
                    "growth=[(position, new_length)])"
                )
            initial_length = length
        initial = check_int("initial_length", initial_length, minimum=1)
        history = _check_growth(growth, initial)
        final = history[-1][1] if history else initial
        if final != length:
            what = "the last growth's new_length" if history else "initial_length"
            raise ValueError(
                f"sampler should have {what} ({final}) records, but it has {length}; pass "
                "the dataset as it is now and record each growth in growth="
            )
        self._history = [(0, initial), *history]
        self.grows = bool(history)
        self._eras = self._build_eras()
        self._bases = [era.base for era in self._eras]
        self._epochs = [era.epoch for era in self._eras]

    @property
    def sampler(self) -> Iterable[int]:
        """The wrapped sampler."""
        return self._inner_obj  # type: ignore[no-any-return]

    @property
    def initial_length(self) -> int:
        """Records before the first growth."""
        return self._history[0][1]

    @property
    def growth(self) -> list[tuple[int, int]]:
        """The ``(position, new_length)`` pairs, in order."""
        return list(self._history[1:])

    def _ordinary(self, length: int) -> _Lazy:
        # The key of the plain shuffle: later passes equal a shuffle built at that length.
        return _Lazy(self._kind, length, self._key)

    def _build_eras(self) -> list[_Era]:
        initial = self._history[0][1]
        eras = [_Era(0, 0, initial, self._ordinary(initial), ())]
        length = initial
        for at, size in self._history[1:]:
            era = eras[-1]
            passes, offset = divmod(at - era.base, era.length)
            epoch, start = era.epoch + passes, era.base + passes * era.length
            if offset == 0:  # on a pass boundary: the next pass is simply longer
                eras.append(_Era(at, epoch, size, self._ordinary(size), ()))
                length = size
                continue
            if passes == 0:  # the era's first pass grows (again): it starts the new era
                eras.pop()
            phases = era.phases if passes == 0 and era.phases else ()
            if not phases:
                phases = (_Phase(0, 0, era.length, era.length, era.length, era.perm),)
            last = phases[-1]
            step = offset - last.offset
            carried = last.unseen - step
            unseen = carried + size - length
            key = (self._seed, "grow", self._kind, at)
            phase = _Phase(offset, step, carried, length, unseen, _Lazy(self._kind, unseen, key))
            eras.append(_Era(start, epoch, size, self._ordinary(size), (*phases, phase)))
            length = size
        return eras

    # -- passes --------------------------------------------------------------------

    def _era_of_epoch(self, epoch: int) -> _Era:
        return self._eras[bisect_right(self._epochs, epoch) - 1]

    def _pass_range(self, epoch: int) -> tuple[int, int]:
        era = self._era_of_epoch(epoch)
        start = era.base + (epoch - era.epoch) * era.length
        return start, start + era.length

    def _epoch_of(self, position: int) -> int:
        era = self._eras[bisect_right(self._bases, position) - 1]
        return era.epoch + (position - era.base) // era.length

    # -- the map -------------------------------------------------------------------

    def _phase_records(self, phases: tuple[_Phase, ...], j: int, local: I64, epoch: int) -> I64:
        """Records at local positions ``local`` of phase ``j`` of a growing pass.

        Every position first takes its value in phase ``j`` as if new; those carried over
        from phase ``j - 1`` are then looked up there, at local position ``step + drawn``,
        and so on down to phase 0, the pass's ordinary permutation.
        """
        out: I64 = np.empty(0, dtype=np.int64)
        where: I64 | None = None  # the positions still being looked up (None: all)
        while True:
            phase = phases[j]
            drawn = phase.perm.at_epoch(local, epoch)
            value = drawn if j == 0 else drawn + (phase.old - phase.carried)
            if where is None:
                out = value
            else:
                out[where] = value
            if j == 0:
                return out
            carried = np.flatnonzero(drawn < phase.carried)
            if len(carried) == 0:
                return out
            where = carried if where is None else where[carried]
            local = drawn[carried] + phase.step
            j -= 1

    def _era_records(self, era: _Era, positions: I64) -> I64:
        relative = positions - era.base
        passes = relative // era.length
        offset = relative - passes * era.length
        if not era.phases:
            return era.perm(offset, passes + era.epoch)
        starts = [phase.offset for phase in era.phases]
        if int(passes.max()) == 0:  # all in the growing pass; often all in one phase
            low, high = (bisect_right(starts, int(x)) - 1 for x in (offset.min(), offset.max()))
            if low == high:
                return self._phase_records(era.phases, low, offset - starts[low], era.epoch)
        out = np.empty_like(positions)
        later = passes > 0
        if bool(later.any()):
            out[later] = era.perm(offset[later], passes[later] + era.epoch)
        first = np.flatnonzero(~later)
        if len(first):
            which = np.searchsorted(starts, offset[first], side="right") - 1
            for j in np.unique(which).tolist():
                at = first[which == j]
                local = offset[at] - starts[j]
                out[at] = self._phase_records(era.phases, j, local, era.epoch)
        return out

    def _map(self, positions: I64) -> I64:
        if not self.grows:
            return super()._map(positions)
        if len(positions) == 0:
            return positions.copy()
        # Records in [0, N): the source reads them as they are (NOTE [ position algebra ]).
        low, high = int(positions.min()), int(positions.max())
        first = bisect_right(self._bases, low) - 1
        if bisect_right(self._bases, high) - 1 == first:
            return self._era_records(self._eras[first], positions)
        which = np.searchsorted(self._bases, positions, side="right") - 1
        out = np.empty_like(positions)
        for i in np.unique(which).tolist():
            mask = which == i
            out[mask] = self._era_records(self._eras[i], positions[mask])
        return out

    def adopt_state(self, top: Node, state: Any) -> Any:
        """A growth recorded at or after the saved position (NOTE [ state hooks ])."""
        return adopt_growth(top, state)

    def config(self) -> dict[str, Any]:
        out = super().config()
        if self.grows:
            out["lengths"] = [[at, size] for at, size in self._history]
        return out


def _reached(node: Node, target: Node, position: int) -> int | None:
    """The first position of ``target``'s stream not consumed at ``node``'s ``position``.

    Walks down skip (its position is absolute), batch and shard stages (rank 0's
    position, which every rank of a step shares) and repeats; None if another stage is
    in the way.
    """
    from ._batch import BatchSource
    from ._shard import _Shard

    for link in chain_of(node):
        if link is target:
            return position
        if isinstance(link, BatchSource):
            position *= link.records_per_item
        elif isinstance(link, _Shard):
            position *= link.world_size
        elif link.verb not in ("skip", "repeat"):
            return None
    return None


def _history(source: Mapping[str, Any], shuffle: Mapping[str, Any]) -> Any:
    """A chain's growth history: the shuffle's ``lengths``, or its source's one length."""
    return shuffle.get("lengths", [[0, source.get("length")]])


def adopt_growth(node: Node, state: Any) -> Any:
    """``state`` with ``node``'s chain, if that chain only adds growth from the saved position.

    A run saved at stream position ``S`` (before any growth, or after some) may resume on
    a larger dataset with the growth recorded at ``S`` or later: the positions before
    ``S`` read the same records (NOTE [ growth law ]). Any other difference returns
    ``state`` unchanged, so that loading it names the difference.

    Raises:
        ReproducibilityError: the saved history is not where this chain's begins (a
            growth changed or dropped).
        ValueError: a growth this chain adds lies before ``S``, in the saved run's past.
    """
    if not isinstance(state, Mapping):
        return state
    saved, position = state.get("chain"), state.get("position")
    if not isinstance(saved, list) or isinstance(position, bool) or not isinstance(position, int):
        return state
    links = chain_of(node)
    target = links[-2] if len(links) >= 2 else None
    if not isinstance(target, GrowingShuffleSampler):
        return state
    current = [dict(link) for link in reversed([link.config() for link in links])]
    if len(saved) != len(current) or saved == current:
        return state
    if not all(isinstance(link, Mapping) for link in saved[:2]):
        return state
    old_source, old_shuffle = dict(saved[0]), dict(saved[1])
    old = _history(old_source, old_shuffle)
    new = _history(current[0], current[1])
    rest = {"length", "lengths"}

    def without(link: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in link.items() if k not in rest}

    if without(old_source) != without(current[0]) or without(old_shuffle) != without(current[1]):
        return state
    if old == new:
        return state
    samples = state.get("samples")
    reached = (
        samples
        if isinstance(samples, int) and not isinstance(samples, bool)
        else _reached(node, target, position)
    )
    if reached is None:
        return state
    if not (isinstance(old, list) and new[: len(old)] == old):
        raise ReproducibilityError(
            "cannot load this state: the dataset's growth history differs (shuffle lengths "
            f"is {old!r} in the state but {new!r} here); a resume may only add growth at or "
            f"after position {reached}, which the saved run had reached. Keep the saved "
            "history and append to it."
        )
    for at, size in new[len(old) :]:
        if at < reached:
            raise ValueError(
                f"growth position {at} (to {size} records) should be at least {reached}, the "
                "position the saved run had reached: the records before it were read "
                f"without the growth; record it as ({reached}, {size}) or later"
            )
    adopted = [dict(current[0]), dict(current[1]), *saved[2:]]
    return {**state, "chain": adopted, "fingerprint": fingerprint(adopted)}


def truncated_chain(component: Node, keep: int) -> list[dict[str, Any]] | None:
    """A component's chain configuration as if only its first ``keep`` growths existed."""
    links = chain_of(component)
    grow = next((link for link in links if isinstance(link, GrowingShuffleSampler)), None)
    if grow is None:
        return None
    history = grow._history[: keep + 1]
    out = []
    for link in reversed(links):
        config = dict(link.config())
        if isinstance(link, IndexSource):
            config["length"] = history[-1][1]
        elif link is grow:
            config.pop("lengths", None)
            if len(history) > 1:
                config["lengths"] = [[at, size] for at, size in history]
        out.append(config)
    return out
