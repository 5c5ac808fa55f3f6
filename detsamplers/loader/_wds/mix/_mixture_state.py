"""The resume state of a mixture of shard sets, and the checks made when it is loaded.

NOTE [ mixture state ]
A :class:`WebDatasetMix` state is the single source's (NOTE [ counts summary ]) with one
entry per shard set where the source has one: ``config["shards"]`` holds a hash of each
set's shard file names in order, and ``counts`` one counts summary per set (version 3), so
that it is O(1) in the shard count (about 170 bytes of JSON per set at any shard count)
and a shard whose sample count changed is still named, by its set's summary. ``mixture``
shows each set's samples consumed and epochs completed, for people to read; loading
ignores it. Versions 1 and 2 carried one count per shard, a list per set (version 2 is
what the mixture wrote while the source had moved to summaries); they still load, compared
count by count. On load the settings are compared key by key (``CHECKED``, a key absent
from an older state meaning off), then the shard sets: sets appended after the saved ones
are no difference if they enter with a curriculum segment starting at or after the saved
position (NOTE [ adding a component ]), and anything else that differs is named with its
fix. The fingerprint covers the configuration without its curriculum, which may change
from the saved position on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...._errors import ReproducibilityError
from ...._state import check_header, fingerprint
from .._source_state import check_counts_summary, summarize_counts
from ..shard._shard_info import ShardInfo

__all__ = [
    "MIX_STATE_VERSION",
    "check_mix_shape",
    "check_mix_state",
    "differences",
    "shard_name",
    "stable",
    "summarize_sets",
]

#: The format version of ``WebDatasetMix.state_dict()`` (1, 2: a count per shard per set).
MIX_STATE_VERSION = 3
_OLD_VERSIONS = (1, 2)
STATE_KEYS = ("version", "position", "fingerprint", "config", "counts")
#: Keys a state carries for people to read, never checked: where each shard set is.
INFORMATION = ("mixture",)
#: Configuration compared on load, in this order (the curriculum separately).
CHECKED = (
    "seed",
    "weights",
    "window",
    "shuffle_shards",
    "shuffle_window",
    "shuffle_block_shards",
    "parts",
    "part_shards",
)
#: A checked key's value when a state or configuration leaves it out (it is off).
ABSENT = {"shuffle_block_shards": 0, "parts": 0, "part_shards": "epoch"}


def summarize_sets(counts: Sequence[Sequence[int]]) -> list[dict[str, Any]]:
    """One counts summary per shard set (NOTE [ mixture state ]).

    Examples:
        >>> [s["shards"] for s in summarize_sets([[3, 4], [5]])]
        [2, 1]
    """
    return [summarize_counts(c) for c in counts]


def check_mix_shape(state_dict: Any) -> tuple[int, list[int]]:
    """Check what a mixture state holds, without a mixture to compare it with.

    The checks :func:`check_mix_state` makes first (``inspect`` makes them alone).

    Returns:
        The position and each shard set's number of shards.

    Raises:
        TypeError: ``state_dict`` is not a mapping, or its counts or config have the
            wrong type.
        ValueError: a key is missing or unknown, the version is unknown, or the position
            is negative.
    """
    version = state_dict.get("version") if isinstance(state_dict, Mapping) else None
    old = version in _OLD_VERSIONS
    wanted = int(version) if old else MIX_STATE_VERSION  # type: ignore[arg-type]
    position = check_header(state_dict, STATE_KEYS, "WebDatasetMix", wanted)
    unknown = sorted(str(key) for key in state_dict if key not in STATE_KEYS + INFORMATION)
    if unknown:
        raise ValueError(
            f"state has keys {', '.join(unknown)} that WebDatasetMix.state_dict() never "
            "writes; it was saved by another object or edited: pass the state it saved"
        )
    saved, saved_counts = state_dict["config"], state_dict["counts"]
    if not isinstance(saved, Mapping):
        raise TypeError(
            "state['config'] should be the dict of settings from "
            f"WebDatasetMix.state_dict(), but got {saved!r}"
        )
    kind = list if old else Mapping
    if not (isinstance(saved_counts, list) and all(isinstance(c, kind) for c in saved_counts)):
        raise TypeError(
            "state['counts'] should be a list with one entry per shard set from "
            "WebDatasetMix.state_dict() (a counts summary; a list of samples per shard in "
            f"versions 1 and 2), but got version {version!r} with counts {saved_counts!r}"
        )
    return position, [len(c) if old else _shards(c) for c in saved_counts]


def check_mix_state(
    state_dict: Mapping[str, Any],
    *,
    config: Mapping[str, Any],
    fingerprint_here: str,
    paths: Sequence[Sequence[str]],
    counts: list[list[int]],
    summaries: Sequence[Mapping[str, Any]],
) -> int:
    """The position of a saved mixture state, once it is checked against the mixture here.

    Args:
        state_dict: What ``WebDatasetMix.state_dict()`` returned (any version).
        config: The mixture's configuration here.
        fingerprint_here: Its fingerprint (:func:`stable` of ``config``).
        paths: Each shard set's shard paths, to name a changed shard.
        counts: Each shard set's shards' sample counts here.
        summaries: :func:`summarize_sets` of ``counts``.

    Raises:
        TypeError: ``state_dict`` is not a mapping, or its counts or config have the
            wrong type.
        ValueError: a key is missing or unknown, or the version is unknown.
        ReproducibilityError: the state names another configuration, shard set or count.
    """
    position, sizes = check_mix_shape(state_dict)
    saved, saved_counts = state_dict["config"], state_dict["counts"]
    old = state_dict["version"] in _OLD_VERSIONS
    changed = differences(dict(saved), sizes, config, counts, position)
    for k, (old_k, new) in enumerate(zip(saved_counts, counts, strict=False)):
        if sizes[k] != len(new):
            continue  # differences() named the set
        if old:
            changed += [
                f"shard {path!r} had {a} samples when the state was saved but has {b} now"
                for path, a, b in zip(paths[k], old_k, new, strict=True)
                if a != b
            ]
        else:
            try:
                check_counts_summary(old_k, paths[k], new, summaries[k], "WebDatasetMix")
            except ReproducibilityError as error:
                changed.append(str(error).split(": ", 1)[1].split("; the stream")[0])
    # With shard sets appended, the saved fingerprint is checked against the saved
    # configuration: the comparison above named every other difference.
    expected = fingerprint_here if len(saved_counts) == len(counts) else stable(saved)
    if not changed and state_dict["fingerprint"] != expected:
        changed = ["the state's fingerprint does not match its configuration"]
    if changed:
        raise ReproducibilityError(
            f"cannot load this state into WebDatasetMix: {'; '.join(changed)}; resuming "
            "from it would train on other data. Rebuild the mixture as it was."
        )
    return position


def _shards(summary: Mapping[str, Any]) -> int:
    shards = summary.get("shards")
    if isinstance(shards, bool) or not isinstance(shards, int):
        raise TypeError(
            "state['counts'] should hold a counts summary per shard set from "
            f"WebDatasetMix.state_dict(), but got {dict(summary)!r}"
        )
    return shards


def stable(config: Mapping[str, Any]) -> str:
    """The fingerprint of a configuration, its curriculum left out.

    Segments still to come may change at a resume, and shard sets may be added with them.
    """
    return fingerprint(
        [{"source": "webdataset-mix", **{k: v for k, v in config.items() if k != "curriculum"}}]
    )


def differences(
    saved: dict[str, Any],
    old_sizes: list[int],
    config: Mapping[str, Any],
    here: list[list[int]],
    position: int,
) -> list[str]:
    """What differs between a saved mixture's configuration and this one, each named.

    Shard sets appended after the saved ones are no difference if they enter with a
    curriculum segment that starts at or after ``position`` (NOTE [ adding a component ]).

    Raises:
        ReproducibilityError: shard sets were removed, inserted before or among the saved
            ones while others were appended, or appended ones enter before ``position``.
    """
    old_k, new_k = len(old_sizes), len(here)
    names = saved.get("shards")
    old_names = list(names) if isinstance(names, list) else []
    new_names = list(config["shards"])
    if new_k < old_k:
        raise ReproducibilityError(
            f"cannot load this state into WebDatasetMix: it was saved with {old_k} shard sets, "
            f"but urls name {new_k}; a shard set cannot be removed at a resume, since the "
            "mixture law would change for the positions already trained. Keep every saved "
            "shard set in the saved order and give the one to drop weight 0 in a curriculum "
            f"segment from position {position} on: curriculum=[({position}, [{old_k} weights])]"
        )
    added = new_k - old_k
    if added and old_names[:old_k] != new_names[:old_k]:
        k = next(k for k in range(old_k) if k >= len(old_names) or old_names[k] != new_names[k])
        raise ReproducibilityError(
            f"cannot load this state into WebDatasetMix: urls[{k}] is not the saved run's "
            f"urls[{k}] (other shard files or another order) while urls name {added} more "
            f"shard set{'s' if added > 1 else ''}; a shard set added at a resume goes last, "
            f"after the saved run's {old_k}, so that every saved set keeps its place. Keep the "
            "saved shard sets in their order and append the new ones"
        )
    out: list[str] = []
    for key in CHECKED:
        old, new = saved.get(key, ABSENT.get(key)), config.get(key, ABSENT.get(key))
        if old == new:
            continue
        if key == "weights" and isinstance(old, list) and len(old) == len(new):
            out += [
                f"weights[{k}] is {a!r} in the state but {b!r} here"
                for k, (a, b) in enumerate(zip(old, new, strict=True))
                if a != b
            ]
        elif key == "weights" and added and len(new) > old_k:
            raise ReproducibilityError(
                f"cannot load this state into WebDatasetMix: urls[{old_k}:] enter this mixture "
                f"at position 0 (weights is {old!r} in the state but {new!r} here), before "
                f"position {position}, which the saved run had reached; keep the saved weights "
                f"and add them with a curriculum segment of {new_k} weights from position "
                f"{position} on: curriculum=[({position}, [{new_k} weights])]"
            )
        else:
            out.append(f"{key} is {old!r} in the state but {new!r} here")
    if (
        not added
        and old_names != new_names
        and sorted(map(str, old_names)) == sorted(map(str, new_names))
    ):
        out.append(
            "the shard sets are in another order than in the state; keep the saved order "
            "(a shard set added at a resume goes last)"
        )
    else:
        for k, names_k in enumerate(new_names[:old_k]):
            if (old_names[k] if k < len(old_names) else None) != names_k:
                out.append(
                    f"urls[{k}] names other shard files or another order than in the state "
                    f"({old_sizes[k]} shards then, {len(here[k])} now)"
                )
    old_plan, new_plan = saved.get("curriculum"), config["curriculum"]
    if old_plan != new_plan:

        def past(plan: Any) -> list[Any]:
            if not isinstance(plan, list):
                return [plan]
            return [e for e in plan if isinstance(e, list) and e and e[0] < position]

        if past(old_plan) != past(new_plan):
            entering = next(
                (
                    e
                    for e in past(new_plan)
                    if added and len(e) > 1 and isinstance(e[1], list) and len(e[1]) > old_k
                ),
                None,
            )
            if entering is not None:
                raise ReproducibilityError(
                    f"cannot load this state into WebDatasetMix: urls[{old_k}:] enter the "
                    f"mixture at position {entering[0]} (a curriculum segment of "
                    f"{len(entering[1])} weights), before position {position}, which the "
                    f"saved run had already reached with {old_k} shard sets; start that "
                    f"segment at position {position} or later"
                )
            out.append(
                f"the curriculum changed before position {position}, which the saved run "
                f"had already reached (curriculum is {old_plan!r} in the state but "
                f"{new_plan!r} here); segments may only be added or changed from position "
                f"{position} on"
            )
    return out


def shard_name(shard: ShardInfo) -> str:
    """A shard's file name: its folder or host may change between runs."""
    return shard.path.rsplit("/", 1)[-1]
