"""The resume state of a shard source, and the checks made when it is loaded.

NOTE [ counts summary ]
A state must let a resume notice a shard whose sample count changed since it was saved
(the positions after it would then name other samples), and name that shard. Version 1
states carried one count per shard: 6 KB of JSON at 2,000 shards, megabytes at 1e6, in
every checkpoint of every rank. Since version 2, ``state["counts"]`` is a summary of fixed
size whatever the number of shards ``n`` (about 300 bytes of JSON for a whole state):

- ``shards``: ``n``; ``samples``: the total ``S = sum(c_i)``;
- ``digest``: BLAKE2b (16 bytes, hex) of the counts as little-endian int64, so any change
  of any count, or of their order, is noticed;
- ``moments``: ``M_k = sum(i**k * c_i)`` for ``k = 1..5``, modulo the prime
  ``P = 2**31 - 1`` (so numpy computes them exactly in 64 bits: milliseconds at 1e6
  shards).

When the digest differs, the moments name the shards, as a BCH code names the symbols in
error: the changes ``d_t`` at shards ``x_t`` give the syndromes
``D_k = M_k(now) - M_k(saved) = sum(d_t * x_t**k)`` (``D_0``: the change of ``S``). One
changed shard is ``x = D_1 / D_0``, confirmed by ``D_k = x**k * D_0`` for ``k = 2..5``.
Two (a swap of two shards' contents keeps ``S``) are the roots of ``x**2 - s x + p``
(mod ``P``), where ``s`` and ``p`` solve ``D_{k+2} = s D_{k+1} - p D_k`` for ``k = 0, 1``;
both roots must lie in ``[0, n)``, and ``D_4``, ``D_5`` confirm them (a false match has
odds of about ``P**-2``). Changes of a count by more than ``P / 2`` (a billion samples in
one shard) are noticed but may be named with wrong counts. A change these do not
explain (three shards or more) is still refused, naming the totals and digests instead.
``load_state_dict`` reads both versions: a version 1 list is compared count by count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..._errors import ReproducibilityError
from ..._state import check_header

__all__ = [
    "STATE_VERSION",
    "check_counts_summary",
    "check_source_shape",
    "check_state",
    "summarize_counts",
]

#: The format version of ``WebDatasetSource.state_dict()`` (1: a count per shard).
STATE_VERSION = 2
_PRIME = (1 << 31) - 1  # a prime, 3 mod 4: square roots are one power
_MOMENTS = 5
_SUMMARY_KEYS = ("shards", "samples", "digest", "moments")


def summarize_counts(counts: Sequence[int]) -> dict[str, Any]:
    """The fixed-size summary of the shards' sample counts (NOTE [ counts summary ]).

    Examples:
        >>> summary = summarize_counts([3, 20, 7])
        >>> summary["shards"], summary["samples"], summary["moments"]
        (3, 30, [34, 48, 76, 132, 244])
    """
    array = np.asarray(counts, dtype=np.int64)
    if np.any(array < 0):
        raise ValueError(f"sample counts should be non-negative, but got {min(counts)}")
    # Every factor is below P < 2**31, so each product fits in 62 bits and a sum of up to
    # 2**32 terms in uint64: numpy computes the moments exactly, in milliseconds.
    index = np.arange(len(array), dtype=np.uint64) % np.uint64(_PRIME)
    term = array.astype(np.uint64) % np.uint64(_PRIME)
    moments = []
    for _ in range(_MOMENTS):
        term = term * index % np.uint64(_PRIME)
        moments.append(int(term.sum(dtype=np.uint64)) % _PRIME)
    return {
        "shards": len(counts),
        "samples": int(array.sum()),
        "digest": hashlib.blake2b(array.astype("<i8").tobytes(), digest_size=16).hexdigest(),
        "moments": moments,
    }


def _signed(value: int) -> int:
    return value - _PRIME if value > _PRIME // 2 else value


def _changed_shards(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[tuple[int, int]]:
    """``[(shard, its change in count)]`` if one or two changes explain the summaries, else []."""
    n = now["shards"]
    syndromes = [(now["samples"] - saved["samples"]) % _PRIME]
    syndromes += [(a - b) % _PRIME for a, b in zip(now["moments"], saved["moments"], strict=True)]

    def explains(found: list[tuple[int, int]]) -> bool:
        return all(
            sum(d * pow(x, k, _PRIME) for x, d in found) % _PRIME == syndrome
            for k, syndrome in enumerate(syndromes)
        )

    d0, d1, d2, d3 = syndromes[:4]
    if d0:  # one shard?
        shard = d1 * pow(d0, -1, _PRIME) % _PRIME
        one = [(shard, now["samples"] - saved["samples"])]
        if shard < n and explains(one):
            return one
    det = (d0 * d2 - d1 * d1) % _PRIME
    if not det:
        return []
    inverse = pow(det, -1, _PRIME)
    total = (d0 * d3 - d1 * d2) * inverse % _PRIME  # x + y
    product = (d1 * d3 - d2 * d2) * inverse % _PRIME  # x * y (mod P)
    discriminant = (total * total - 4 * product) % _PRIME  # (y - x)**2 (mod P)
    root = pow(discriminant, (_PRIME + 1) // 4, _PRIME)
    if root * root % _PRIME != discriminant or not root:
        return []
    half = pow(2, -1, _PRIME)
    x, y = sorted(((total - root) * half % _PRIME, (total + root) * half % _PRIME))
    if not 0 <= x < y < n:
        return []
    d_y = (d1 - x * d0) * pow(y - x, -1, _PRIME) % _PRIME
    two = [(x, _signed((d0 - d_y) % _PRIME)), (y, _signed(d_y))]
    return two if explains(two) else []


_STATE_KEYS = ("version", "position", "fingerprint", "config", "counts")


def check_source_shape(state_dict: Any) -> int:
    """Check what a source state holds, without a source to compare it with; its position.

    The checks :func:`check_state` makes first (``inspect`` makes them alone).

    Raises:
        TypeError: ``state_dict`` is not a mapping, or its counts or config have the wrong
            type.
        ValueError: a key is missing or unknown, the version is unknown, or the position
            is negative.
    """
    if isinstance(state_dict, Mapping) and "mixture" in state_dict:
        raise ValueError(
            "state was saved by a WebDatasetMix (it has a 'mixture' entry), not by a "
            "WebDatasetSource: load it into the WebDatasetMix that saved it, with the same "
            "shard sets and weights"
        )
    old = isinstance(state_dict, Mapping) and state_dict.get("version") == 1
    version = 1 if old else STATE_VERSION
    position = check_header(state_dict, _STATE_KEYS, "WebDatasetSource", version)
    unknown = sorted(str(key) for key in state_dict if key not in _STATE_KEYS)
    if unknown:
        raise ValueError(
            f"state has keys {', '.join(unknown)} that WebDatasetSource.state_dict() never "
            "writes; it was saved by another object or edited: pass the state it saved"
        )
    saved_counts = state_dict["counts"]
    summary_ok = isinstance(saved_counts, Mapping) and _valid_summary(saved_counts)
    if not (isinstance(saved_counts, list) or summary_ok):
        raise TypeError(
            "state['counts'] should be the list of samples per shard (version 1) or its "
            f"summary from WebDatasetSource.state_dict(), but got {saved_counts!r}"
        )
    if not isinstance(state_dict["config"], Mapping):
        raise TypeError(
            "state['config'] should be the dict of settings from "
            f"WebDatasetSource.state_dict(), but got {state_dict['config']!r}"
        )
    return position


def check_state(
    state_dict: Mapping[str, Any],
    *,
    config: Mapping[str, Any],
    fingerprint: str,
    paths: Sequence[str],
    counts: Sequence[int],
    global_batch: int | None,
    end: int | None,
    summary: Mapping[str, Any] | None = None,
) -> int:
    """The position of a saved state, once it is checked against the source here.

    Args:
        state_dict: What ``WebDatasetSource.state_dict()`` returned.
        config: The source's configuration, compared key by key.
        fingerprint: The source's fingerprint (configuration and shard names).
        paths: The shards' paths, to name one whose count changed.
        counts: The shards' sample counts now.
        summary: :func:`summarize_counts` of ``counts`` (computed if ``None``).
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
    position = check_source_shape(state_dict)
    saved_counts = state_dict["counts"]
    if isinstance(saved_counts, list):
        _check_counts(list(saved_counts), paths, counts)
    else:
        _check_summary(saved_counts, paths, counts, summary or summarize_counts(counts))
    saved = dict(state_dict["config"])
    keys = [*config, *(key for key in saved if key not in config)]  # a key either side has
    changed = [
        f"{key} is {saved.get(key)!r} in the state but {config.get(key)!r} here"
        for key in keys
        if saved.get(key) != config.get(key)
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


def check_counts_summary(
    saved: Any, paths: Sequence[str], counts: Sequence[int], now: Mapping[str, Any], owner: str
) -> None:
    """Check a saved counts summary against the shards here, naming a changed shard.

    Raises:
        TypeError: ``saved`` is not a summary from :func:`summarize_counts`.
        ReproducibilityError: the shard count or a shard's sample count changed.
    """
    if not (isinstance(saved, Mapping) and _valid_summary(saved)):
        raise TypeError(
            f"a counts summary in the state should be what {owner}.state_dict() wrote "
            f"(shards, samples, digest, moments), but got {saved!r}"
        )
    _check_summary(saved, paths, counts, now, owner)


def _valid_summary(summary: Mapping[str, Any]) -> bool:
    if set(summary) != set(_SUMMARY_KEYS) or not isinstance(summary["digest"], str):
        return False
    moments = summary["moments"]
    numbers = [
        summary["shards"],
        summary["samples"],
        *(moments if isinstance(moments, list) else []),
    ]
    valid = all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in numbers)
    return valid and isinstance(moments, list) and len(moments) == _MOMENTS


def _check_summary(
    saved: Mapping[str, Any],
    paths: Sequence[str],
    counts: Sequence[int],
    now: Mapping[str, Any],
    owner: str = "WebDatasetSource",
) -> None:
    if saved["shards"] != now["shards"]:
        raise ReproducibilityError(
            f"cannot load this state into {owner}: it was saved with "
            f"{saved['shards']} shards, but urls name {now['shards']}; pass the same urls"
        )
    if saved["digest"] == now["digest"]:
        return
    found = _changed_shards(saved, now)
    if found and all(counts[shard] - delta >= 0 for shard, delta in found):
        changed = "; ".join(
            f"shard {paths[shard]!r} had {counts[shard] - delta} samples when the state "
            f"was saved but has {counts[shard]} now"
            for shard, delta in found
        )
    else:
        changed = (
            f"the shards' sample counts changed ({saved['samples']} samples in all then, "
            f"{now['samples']} now; counts digest {saved['digest']} then, "
            f"{now['digest']} now)"
        )
    raise ReproducibilityError(
        f"cannot resume {owner}: {changed}; the stream after the checkpoint "
        "would differ. Restore the original shards or start a new run."
    )
