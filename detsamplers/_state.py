"""Sampler state: a format version, a position and a fingerprint, never a replay.

The state of a chain is ``{"version", "position", "fingerprint", "chain"}``:
``position`` is the stream position reached by the latest iterator (an absolute position,
so a skip is already inside it), ``chain`` lists each link's configuration from the source
outwards, and ``fingerprint`` is a short hash of ``chain``. Loading a state from another
chain raises :class:`~detsamplers.ReproducibilityError` naming each field that differs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ._errors import ReproducibilityError

__all__ = [
    "STATE_VERSION",
    "check_header",
    "check_shape",
    "check_state",
    "describe",
    "fingerprint",
    "link_differences",
]

STATE_VERSION = 1
_KEYS = ("version", "position", "fingerprint", "chain")
#: Keys a state may carry for people to read, never checked: a mixture's progress.
_INFORMATION = ("mixture",)


def fingerprint(chain: list[dict[str, Any]]) -> str:
    """A 16-hex-digit hash of a chain configuration.

    Examples:
        >>> fingerprint([{"source": "range", "length": 3}])
        'e6798b9bee94c12a'
    """
    text = json.dumps(chain, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def describe(chain: list[dict[str, Any]]) -> str:
    """The stages of ``chain`` in order, e.g. ``range > shuffle > repeat``."""
    return " > ".join(str(link.get("stage", link.get("source"))) for link in chain)


def check_header(
    state: Any, keys: tuple[str, ...], owner: str, version: int = STATE_VERSION
) -> int:
    """Check a saved state's type, keys and format version, and return its position.

    Raises:
        TypeError: ``state`` is not a mapping.
        ValueError: a key is missing, the version is unknown or the position negative.

    Examples:
        >>> check_header({"version": 1, "position": 4}, ("version", "position"), "Chain")
        4
        >>> check_header({"position": 4}, ("version", "position"), "Chain")
        Traceback (most recent call last):
        ...
        ValueError: state should have the keys version, position from Chain.state_dict(), but it lacks version
    """  # noqa: E501
    if not isinstance(state, Mapping):
        raise TypeError(
            f"state should be a dict from {owner}.state_dict(), "
            f"but got state of type {type(state).__name__}"
        )
    missing = [key for key in keys if key not in state]
    if missing:
        raise ValueError(
            f"state should have the keys {', '.join(keys)} from {owner}.state_dict(), "
            f"but it lacks {', '.join(missing)}"
        )
    if state["version"] != version:
        raise ValueError(
            f"state['version'] should be {version}, but got {state['version']!r}; "
            "it was saved by an incompatible version of detsamplers"
        )
    position = state["position"]
    if isinstance(position, bool) or not isinstance(position, int) or position < 0:
        raise ValueError(
            f"state['position'] should be a non-negative integer, but got {position!r}"
        )
    if position > 2**62:
        raise ValueError(f"state['position'] should be at most 2**62, but got {position}")
    return position


def check_shape(state: Any, owner: str, extra: tuple[str, ...] = ()) -> int:
    """Check what a chain state holds, without a chain to compare it with; its position.

    The checks :func:`check_state` makes first (``inspect`` makes them alone).

    Raises:
        TypeError: ``state`` is not a mapping, or its chain not a list of dicts.
        ValueError: its version is unknown, its position negative, or it has unknown keys.

    Examples:
        >>> check_shape({"version": 1, "position": -3, "fingerprint": "", "chain": []}, "C")
        Traceback (most recent call last):
        ...
        ValueError: state['position'] should be a non-negative integer, but got -3
    """
    position = check_header(state, _KEYS, owner)
    unknown = sorted(str(key) for key in state if key not in _KEYS + _INFORMATION + extra)
    if unknown:
        raise ValueError(
            f"state has keys {', '.join(unknown)} that {owner}.state_dict() never writes; "
            "it was saved by another object or edited: pass the state this object saved"
        )
    saved = state["chain"]
    if not isinstance(saved, list) or not all(isinstance(link, Mapping) for link in saved):
        raise TypeError(
            f"state['chain'] should be a list of dicts from {owner}.state_dict(), but got {saved!r}"
        )
    return position


def check_state(
    state: Any, chain: list[dict[str, Any]], owner: str, extra: tuple[str, ...] = ()
) -> int:
    """Validate ``state`` against ``chain`` and return its position.

    Args:
        state: The saved state.
        chain: The loading chain's configuration.
        owner: The loading class's name, for messages.
        extra: Keys an outer owner adds to the state (any other unknown key is refused).

    Raises:
        TypeError: ``state`` is not a mapping of the right shape.
        ValueError: its version is unknown, its position negative, or it has unknown keys.
        ReproducibilityError: it was saved from a different chain.
    """
    position = check_shape(state, owner, extra)
    saved = [dict(link) for link in state["chain"]]
    if state["fingerprint"] == fingerprint(chain) and saved == chain:
        return position
    differences = link_differences(saved, chain)
    raise ReproducibilityError(
        f"cannot load this state into {owner}: it was saved from a different chain "
        f"({'; '.join(differences)}); resuming from it would train on other data. "
        "Rebuild the chain exactly as it was when the state was saved."
    )


def link_differences(saved: list[dict[str, Any]], current: list[dict[str, Any]]) -> list[str]:
    """Each difference between two chain configurations, as a phrase."""
    shape_saved = [link.get("stage", "source") for link in saved]
    shape_now = [link.get("stage", "source") for link in current]
    if shape_saved != shape_now:
        return [
            f"the stages differ: the state has {describe(saved)}, this chain has "
            f"{describe(current)}"
        ]
    out = []
    for old, new in zip(saved, current, strict=True):
        name = str(new.get("stage", new.get("source")))
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                out.append(
                    f"{name} {key} is {old.get(key)!r} in the state but {new.get(key)!r} here"
                )
    return out or ["the fingerprint differs"]
