"""What a resume may change in a mixture: later curriculum segments, added and grown components.

NOTE [ adding a component ]
A segment names the first ``K_s`` components, ``K_s`` never below the previous segment's,
and the last segment names all ``K``: a segment that names more adds components from its
start on. A mixture of ``K`` datasets that gains a ``(K+1)``-th at a resume is the mixture
whose new sampler is appended last and whose curriculum has a segment of ``K + 1`` weights
starting at or after the position the run reached. The segments before it are built with
their ``K`` columns exactly as the old mixture built them (same keys, windows, counts, tables
and bases), so the past is bit-identical: not the same as giving the new component weight 0
there, which would change the law, since the number of arrangements ``T`` depends on the
number of columns (``P = 4096``: ``T = 16`` for 2 components, 8 for 3). The added
component's base in its first segment is 0: it starts at its own position 0, and the old
components start at the counts they reached, as at any switch. Appended last, it leaves the
``ConcatDataset`` offsets of the earlier datasets unchanged, so the indices already trained
keep their meaning; inserting, removing or reordering components is refused at a resume
(:func:`adopt_curriculum`). The segments and the samplers are the configuration (the mix
link's ``lengths``, ``seeds``, ``components`` and ``curriculum``), so a later resume builds
the same mixture, as after any curriculum change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

import numpy as np
import torch.utils.data as tud

from .._batch import BatchSource
from .._errors import ReproducibilityError
from .._grow import GrowingShuffleSampler, truncated_chain
from .._shard import _Shard
from .._source import Node, chain_of
from .._stage import Stage
from .._state import fingerprint

__all__ = ["Mixture", "adopt_curriculum", "adopt_mixture_growth", "mix_position"]


class Mixture(Protocol):
    """What adopting a state reads of a ``MixSampler`` (the link whose verb is ``"mix"``)."""

    _nodes: list[Node]

    def progress(self, position: int) -> dict[str, Any]: ...


def mix_position(node: Node, position: int) -> tuple[Mixture, int] | None:
    """The mixture under ``node`` and the first mixture position at ``node``'s ``position``.

    Walks down shard (taking rank 0's position, so that every rank of a step agrees),
    batch and skip stages; None if the chain has no mixture.
    """
    for link in chain_of(node):
        if link.verb == "mix":
            return cast("Mixture", link), position
        grid = getattr(link, "grid", None)  # a skip at a sample (NOTE [ sample positions ])
        if grid is not None and getattr(grid.samples, "verb", None) == "mix":
            return grid.samples, int(link.samples_at(position))  # type: ignore[attr-defined]
        if isinstance(link, BatchSource):
            position *= link.records_per_item
        elif isinstance(link, _Shard):
            position *= link.world_size
        elif isinstance(link, Stage):
            position = int(link._map(np.array([position], dtype=np.int64))[0])
        elif isinstance(link, tud.Sampler):
            return None
    return None


#: The mix link's fields that describe its components, one entry per sampler.
_COMPONENT_FIELDS = ("lengths", "seeds", "components")


def _check_components(old: dict[str, Any], new: dict[str, Any], reached: int) -> int | None:
    """The saved run's component count if ``new`` appends components to ``old``'s.

    A saved component matches when its seed is the same and its fingerprint too, or its
    length grew (a growth, which :func:`adopt_growth` checks). None when the components
    are the same, or differ in a way the state check names (a changed seed).

    Raises:
        ReproducibilityError: components were removed, reordered, or one was inserted or
            changed before the last saved one while others were appended.
    """
    columns: list[list[Any]] = []
    for link in (old, new):
        for key in _COMPONENT_FIELDS:
            column = link.get(key)
            if not isinstance(column, list):
                return None
            columns.append(column)
    old_lengths, old_seeds, old_parts, lengths, seeds, parts = columns
    old_k, new_k = len(old_lengths), len(lengths)
    if new_k < old_k:
        raise ReproducibilityError(
            f"cannot load this state: the saved run mixed {old_k} samplers but this mixture "
            f"has {new_k} (mix lengths is {old_lengths!r} in the state but {lengths!r} here); "
            "a sampler cannot be removed at a resume, since the ConcatDataset indices of the "
            "samplers after it would shift. Keep every saved sampler in the saved order and "
            f"give the one to drop weight 0 in a curriculum segment from position {reached} on"
        )

    def same(k: int) -> bool:
        if old_seeds[k] != seeds[k]:
            return False
        if old_parts[k] == parts[k]:
            return True
        grown = isinstance(old_lengths[k], int) and isinstance(lengths[k], int)
        return grown and old_lengths[k] < lengths[k]

    differs = next((k for k in range(old_k) if not same(k)), None)
    if differs is None:
        return old_k if new_k > old_k else None
    if new_k == old_k:
        if sorted(map(str, old_parts)) == sorted(map(str, parts)) or (
            old_lengths != lengths and sorted(map(str, old_lengths)) == sorted(map(str, lengths))
        ):
            raise ReproducibilityError(
                "cannot load this state: the mixture's samplers are in another order than "
                f"the saved run's (mix lengths is {old_lengths!r} in the state but "
                f"{lengths!r} here); the ConcatDataset indices would address other records. "
                "Keep the saved order of samplers and datasets"
            )
        return None
    raise ReproducibilityError(
        f"cannot load this state: samplers[{differs}] is not the saved run's samplers"
        f"[{differs}] (its length is {old_lengths[differs]!r} in the state but "
        f"{lengths[differs]!r} here, its seed {old_seeds[differs]!r} but {seeds[differs]!r}) "
        f"while this mixture has {new_k - old_k} more; a sampler added at a resume goes "
        f"last, after the saved run's {old_k} (samplers[{old_k}:] and the datasets at the "
        "end of the ConcatDataset), so that the indices already trained keep their records. "
        "Keep the saved samplers in their order and append the new ones"
    )


def adopt_curriculum(node: Node, state: Any) -> Any:
    """``state`` with ``node``'s mixture, if that differs only from the reached position on.

    A curriculum may be extended or changed at a resume, and a curriculum segment may add
    samplers appended last (NOTE [ adding a component ]): segments that start at or after
    the first mixture position not yet consumed (rank 0's, or the saved ``samples`` over a
    sample grid, NOTE [ mixture law ]) do not touch the records already seen. Saved
    components whose configuration differs (a growth) keep their saved configuration in
    the result, for :func:`adopt_growth` to check. Any other difference returns ``state``
    unchanged, so that loading it names the difference.

    Raises:
        ReproducibilityError: the curriculum differs before that position (a sampler
            entering there among others), or samplers were removed, reordered, or one
            inserted before the saved ones.
    """
    if not isinstance(state, Mapping) or not isinstance(node, Stage):
        return state
    saved, position = state.get("chain"), state.get("position")
    if not isinstance(saved, list) or isinstance(position, bool) or not isinstance(position, int):
        return state
    found = mix_position(node, position)
    samples = state.get("samples")  # the saved run's own sample position, if it has one
    grid = getattr(node, "grid", None) is not None
    elastic = grid and isinstance(samples, int) and not isinstance(samples, bool)
    if found is not None and elastic and isinstance(samples, int):
        found = (found[0], samples)
    current = node.chain_config()
    if found is None or position < 0 or len(saved) != len(current) or saved == current:
        return state
    # Over a sample grid the shard and batch links may differ too (an elastic resume):
    # the sample position does not depend on them, and the state check compares the rest.
    if not isinstance(saved[0], Mapping) or (saved[1:] != current[1:] and not elastic):
        return state
    old, new = dict(saved[0]), dict(current[0])
    old_plan, new_plan = old.pop("curriculum", None), new.pop("curriculum", None)
    if (
        old.get("stage") != "mix"
        or not isinstance(old_plan, list)
        or not isinstance(new_plan, list)
    ):
        return state
    reached = found[1]
    old_k = _check_components(old, new, reached)
    rest_old = {key: v for key, v in old.items() if key not in _COMPONENT_FIELDS}
    rest_new = {key: v for key, v in new.items() if key not in _COMPONENT_FIELDS}
    if rest_old != rest_new:
        weights = new.get("weights")
        if old_k is not None and isinstance(weights, list) and len(weights) > old_k:
            raise ReproducibilityError(
                f"cannot load this state: samplers[{old_k}:] enter this mixture at position 0 "
                f"(mix weights is {old.get('weights')!r} in the state but {weights!r} here), "
                f"before position {reached}, which the saved run had reached; keep the saved "
                f"weights and add them with a curriculum segment of {len(weights)} weights "
                f"from position {reached} on: curriculum=[({reached}, [...])]"
            )
        return state
    if old_k is None and any(old.get(key) != new.get(key) for key in _COMPONENT_FIELDS):
        if old.get("seeds") != new.get("seeds") or not isinstance(new.get("lengths"), list):
            return state  # a changed sampler: the state check names it
        old_k = len(new["lengths"])  # the same samplers, some grown: adopt_growth checks them
    if old_k is None and old_plan == new_plan:
        return state

    def past(plan: list[Any]) -> list[Any]:
        return [entry for entry in plan if isinstance(entry, list) and entry and entry[0] < reached]

    if past(old_plan) != past(new_plan):
        if old_k is not None:
            entering = next(
                (
                    entry
                    for entry in past(new_plan)
                    if len(entry) > 1 and isinstance(entry[1], list) and len(entry[1]) > old_k
                ),
                None,
            )
            if entering is not None:
                raise ReproducibilityError(
                    f"cannot load this state: samplers[{old_k}:] enter the mixture at position "
                    f"{entering[0]} (a curriculum segment of {len(entering[1])} weights), before "
                    f"position {reached}, which the saved run had already reached with "
                    f"{old_k} samplers; start that segment at position {reached} or later"
                )
        raise ReproducibilityError(
            "cannot load this state: the mixture's curriculum changed before position "
            f"{reached}, which the saved run had already reached (mix curriculum is "
            f"{old_plan!r} in the state but {new_plan!r} here); segments may only be added "
            f"or changed from position {reached} on, or the records seen would differ"
        )
    adopted = dict(current[0])
    if old_k is not None:  # the saved samplers keep their saved fields, for adopt_growth
        for key in ("lengths", "components"):
            adopted[key] = [*old[key][:old_k], *new[key][old_k:]]
    chain = [adopted, *saved[1:]]
    if chain == saved:
        return state
    return {**state, "chain": chain, "fingerprint": fingerprint(chain)}


def adopt_mixture_growth(node: Node, state: Any) -> Any:
    """``state`` with ``node``'s mixture, if only components' growths from there on differ.

    The mixture's part of a growth (NOTE [ growth law ]); any other difference returns
    ``state`` unchanged, so that loading it names the difference.

    Raises:
        ValueError: a component's growth lies before the records it had given when the
            saved run stopped.
    """
    if not isinstance(state, Mapping):
        return state
    saved, position = state.get("chain"), state.get("position")
    if not isinstance(saved, list) or isinstance(position, bool) or not isinstance(position, int):
        return state
    return _adopt_mixture_growth(node, state, saved, position)


def _adopt_mixture_growth(node: Node, state: Mapping[str, Any], saved: list[Any], at: int) -> Any:
    """``state`` with ``node``'s mixture, if only components' growths from there on differ.

    Component ``k`` is at its own position ``consumed[k]`` when the saved run stopped
    (the mixture law does not depend on the components' lengths); its saved fingerprint
    must be its current chain's with the growths before that position only.
    """
    found = mix_position(node, at)
    link = chain_of(node)[-1]
    samples = state.get("samples")
    if found is None or link.verb != "mix":
        return state
    mixture = cast("Mixture", link)
    reached = samples if isinstance(samples, int) and getattr(node, "grid", None) else found[1]
    current = [link.config() for link in reversed(chain_of(node))]
    if len(saved) != len(current) or not isinstance(saved[0], Mapping):
        return state
    old, new = dict(saved[0]), dict(current[0])
    varying = ("lengths", "components")
    if {k: v for k, v in old.items() if k not in varying} != {
        k: v for k, v in new.items() if k not in varying
    } or old == new:
        return state
    if not all(isinstance(old.get(key), list) for key in varying):
        return state
    if len(old["lengths"]) != len(new["lengths"]):
        return state
    consumed = mixture.progress(reached)["consumed"]
    for k, component in enumerate(mixture._nodes):
        if old["components"][k] == new["components"][k]:
            continue
        grow = next((x for x in chain_of(component) if isinstance(x, GrowingShuffleSampler)), None)
        if grow is None:
            return state
        matched = None
        for keep in range(len(grow._history)):
            candidate = truncated_chain(component, keep)
            if candidate is not None and fingerprint(candidate) == old["components"][k]:
                matched = keep
        if matched is None or grow._history[matched][1] != old["lengths"][k]:
            return state
        for position, size in grow._history[matched + 1 :]:
            if position < consumed[k]:
                raise ValueError(
                    f"growth position {position} of samplers[{k}] (to {size} records) should be "
                    f"at least {consumed[k]}, the records that component had given when the "
                    f"saved run stopped; record it as ({consumed[k]}, {size}) or later"
                )
    adopted = [new, *saved[1:]]
    return {**state, "chain": adopted, "fingerprint": fingerprint(adopted)}
