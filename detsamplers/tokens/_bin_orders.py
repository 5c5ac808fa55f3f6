"""The reading order of the bins of many pack windows, in one vectorised pass.

NOTE [ batched bin orders ]
NOTE [ packed sequences ] reads the bins of window ``w`` in the order of a keyed
permutation of their count ``c_w``, evaluated at ``w``: ``FeistelPermutation(c_w,
key).at_epoch(arange(c_w), w)`` (NOTE [ keyed permutation ]). A batch of a shuffled loader
touches up to one window per sequence, each with its own ``c_w``, so evaluating them one by
one costs a Feistel network's forty-odd numpy calls per window, most of it call overhead
on a few hundred values. The network's parameters (the halves' widths ``k`` and ``b``, the
divisor, the number of rounds, the round keys) are plain numbers, so numpy takes them as
arrays as well, one per value: :func:`bin_orders` runs one network over the bins of all
the windows (one per round count), with the same arithmetic on the same word sizes, and
cycle-walks the values that leave their window's domain, as ``FeistelPermutation`` does.
The orders are those of ``FeistelPermutation`` bit for bit
(tests/tokens/test_tokens_bin_orders.py compares them on random counts and windows).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from .._permute import MIN_SIDE_BITS, ROUNDS, SMALL_DOMAIN, SMALL_DOMAIN_ROUNDS
from .._seeds import derive, mix64

__all__ = ["bin_orders"]

I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]
_M1 = np.array(0x85EBCA6B, dtype=np.uint32)
_M2 = np.array(0xC2B2AE35, dtype=np.uint32)
_S15 = np.array(15, dtype=np.uint32)
_LOW32 = np.uint64(0xFFFFFFFF)


def _hash(half: U32, key: U32) -> U32:
    """``FeistelPermutation``'s keyed round hash, elementwise."""
    h = np.multiply(np.bitwise_xor(half, key), _M1)
    np.bitwise_xor(h, np.right_shift(h, _S15), out=h)
    return np.multiply(h, _M2, out=h)


def _network(x: I64, k: I64, b: U32, divisor: U32, keys: list[U32]) -> I64:
    """The Feistel network of each value under its own parameters (one round count)."""
    low = (x & ((np.int64(1) << k) - 1)).astype(np.uint32)
    high = (x >> k).astype(np.uint32)
    top = (32 - k).astype(np.uint32)
    for r, key in enumerate(keys):
        if r % 2 == 0:
            np.bitwise_xor(low, np.right_shift(_hash(high, key), top), out=low)
        else:
            np.add(high, np.floor_divide(_hash(low, key), divisor), out=high)
            np.minimum(high, high - b, out=high)  # high - b wraps when high < b
    out: I64 = (high.astype(np.int64) << k) | low
    return out


@lru_cache(maxsize=16)
def _round_seeds(key: int) -> npt.NDArray[np.uint64]:
    """``FeistelPermutation``'s round seeds of ``key`` (the most rounds it uses)."""
    rounds = max(ROUNDS, SMALL_DOMAIN_ROUNDS)
    return np.array([derive(key, "feistel-round", r) for r in range(rounds)], dtype=np.uint64)


def bin_orders(key: int, counts: I64, windows: I64) -> I64:
    """Each window's bin order, concatenated (NOTE [ batched bin orders ]).

    Item ``j`` of window ``i``'s part is ``FeistelPermutation(counts[i], key)`` at ``j``
    and epoch ``windows[i]``.

    Args:
        key: The permutation's key (``derive(seed, "tokens-pack-bins")``).
        counts: Each window's bins, at least 1.
        windows: Each window's number (the permutation's epoch).

    Examples:
        >>> import numpy as np
        >>> from detsamplers._permute import FeistelPermutation
        >>> orders = bin_orders(5, np.array([3, 4]), np.array([7, 2]))
        >>> orders.tolist()[3:] == FeistelPermutation(4, 5).at_epoch(np.arange(4), 2).tolist()
        True
    """
    counts, windows = np.asarray(counts, np.int64), np.asarray(windows, np.int64)
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(counts)), counts)
    local = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    n_list = counts.tolist()
    ks = [max(MIN_SIDE_BITS, math.isqrt(n - 1).bit_length()) for n in n_list]
    bs = [max(2**MIN_SIDE_BITS, -(-n // 2**k)) for n, k in zip(n_list, ks, strict=True)]
    small = [b << k < SMALL_DOMAIN for k, b in zip(ks, bs, strict=True)]
    rounds = np.array([SMALL_DOMAIN_ROUNDS if s else ROUNDS for s in small], dtype=np.int64)
    seeds = _round_seeds(key)[: int(rounds.max(initial=0))]
    # Round keys, (rounds, windows): the hash of (round seed, epoch) FeistelPermutation uses.
    mixed = mix64(windows.astype(np.uint64))
    table = (mix64(seeds[:, None] ^ mixed[None, :]) & _LOW32).astype(np.uint32)
    params = (
        np.array(ks, dtype=np.int64),
        np.array(bs, dtype=np.uint32),
        np.array([-(-(2**32) // b) for b in bs], dtype=np.uint32),
    )
    out = local.copy()
    todo = np.flatnonzero(counts[owner] > 1)  # a domain of one value is the identity
    while len(todo):
        at = owner[todo]
        x = out[todo]
        for count in dict.fromkeys(rounds[at].tolist()):  # one network per round count
            pick = np.flatnonzero(rounds[at] == count)
            of = at[pick]
            keys = [table[r, of] for r in range(count)]
            x[pick] = _network(x[pick], params[0][of], params[1][of], params[2][of], keys)
        out[todo] = x
        todo = todo[x >= counts[at]]  # cycle walking: again until inside the domain
    return out
