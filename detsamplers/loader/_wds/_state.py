"""The resume state of a shard source, and the checks made when it is loaded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..._errors import ReproducibilityError
from ..._state import check_header

__all__ = ["STATE_VERSION", "check_state"]

#: The format version of ``WebDatasetSource.state_dict()``.
STATE_VERSION = 1
_STATE_KEYS = ("version", "position", "fingerprint", "config", "counts")


def check_state(
    state_dict: Mapping[str, Any],
    *,
    config: Mapping[str, Any],
    fingerprint: str,
    paths: Sequence[str],
    counts: Sequence[int],
    global_batch: int | None,
    end: int | None,
) -> int:
    """The position of a saved state, once it is checked against the source here.

    Args:
        state_dict: What ``WebDatasetSource.state_dict()`` returned.
        config: The source's configuration, compared key by key.
        fingerprint: The source's fingerprint (configuration and shard names).
        paths: The shards' paths, to name one whose count changed.
        counts: The shards' sample counts now.
        global_batch: ``batch_size * world_size`` here, which must divide the position
            of a ``repeat=False`` pass; ``None`` for a repeated stream, which resumes at
            any position (NOTE [ shard stream split ]).
        end: The last valid position (``repeat=False``), or ``None``.

    Raises:
        TypeError: ``state_dict`` is not a mapping, or its counts or config have the wrong
            type.
        ValueError: a key is missing or unknown, the version is unknown, or the position is
            not a multiple of ``global_batch`` (when given) or past ``end``.
        ReproducibilityError: a shard's count, the shard list or the configuration changed.
    """
    position = check_header(state_dict, _STATE_KEYS, "WebDatasetSource", STATE_VERSION)
    unknown = sorted(str(key) for key in state_dict if key not in _STATE_KEYS)
    if unknown:
        raise ValueError(
            f"state has keys {', '.join(unknown)} that WebDatasetSource.state_dict() never "
            "writes; it was saved by another object or edited: pass the state it saved"
        )
    if not isinstance(state_dict["counts"], list):
        raise TypeError(
            "state['counts'] should be the list of samples per shard from "
            f"WebDatasetSource.state_dict(), but got {state_dict['counts']!r}"
        )
    if not isinstance(state_dict["config"], Mapping):
        raise TypeError(
            "state['config'] should be the dict of settings from "
            f"WebDatasetSource.state_dict(), but got {state_dict['config']!r}"
        )
    _check_counts(list(state_dict["counts"]), paths, counts)
    saved = dict(state_dict["config"])
    changed = [
        f"{key} is {saved.get(key)!r} in the state but {value!r} here"
        for key, value in config.items()
        if saved.get(key) != value
    ]
    if not changed and state_dict["fingerprint"] != fingerprint:
        changed = ["the shard file names or their order differ"]
    if changed:
        raise ReproducibilityError(
            f"cannot load this state into WebDatasetSource: {'; '.join(changed)}; "
            "resuming from it would train on other data. Rebuild the source as it was."
        )
    if global_batch is not None and position % global_batch:
        raise ValueError(
            f"state_dict['position']={position} should be a multiple of the global batch "
            f"batch_size * world_size = {global_batch} with repeat=False; a validation pass "
            "is resumed only at a whole global batch"
        )
    if end is not None and position > end:
        raise ValueError(
            f"state_dict['position']={position} is past the end of the pass "
            f"({sum(counts)} samples) with repeat=False"
        )
    return position


def _check_counts(saved: list[Any], paths: Sequence[str], counts: Sequence[int]) -> None:
    if len(saved) != len(counts):
        raise ReproducibilityError(
            f"cannot load this state into WebDatasetSource: it was saved with "
            f"{len(saved)} shards, but urls name {len(counts)}; pass the same urls"
        )
    changed = [
        f"shard {path!r} had {old} samples when the state was saved but has {new} now"
        for path, old, new in zip(paths, saved, counts, strict=True)
        if old != new
    ]
    if changed:
        raise ReproducibilityError(
            f"cannot resume WebDatasetSource: {'; '.join(changed)}; the stream after the "
            "checkpoint would differ. Restore the original shards or start a new run."
        )
