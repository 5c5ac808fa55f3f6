"""Keyed permutations of ``[0, n)``, evaluated pointwise over numpy blocks.

NOTE [ keyed permutation ]
A shuffle that must seek in O(1) cannot materialise its permutation: at n = 1e9 that is
8 GB per epoch per rank. ``FeistelPermutation`` instead evaluates ``perm(i)`` for any ``i``
directly, with a Feistel network over a mixed-radix domain (the construction of
format-preserving encryption, as in NIST's FF1). A value ``x`` is split into
``low = x mod 2**k`` and ``high = x // 2**k``, with ``2**k >= sqrt(n)`` and
``b = ceil(n / 2**k)`` values for ``high``. Rounds alternate between the halves:

- ``low ^= top_k_bits(hash(high, key_r))``, a bijection of the power-of-two half;
- ``high = (high + hash(low, key_r) // ceil(2**32 / b)) mod b``, a bijection of the
  other half (the addend lies in ``[0, b)``).

Each round is invertible whatever the hash, so the network is a bijection of
``[0, b 2**k)``. That domain exceeds ``n`` by less than ``2**k``, a fraction below
``2 / sqrt(n)``; the few values that land in ``[n, b 2**k)`` are sent through the network
again until they fall inside (cycle walking), which restricts the bijection to ``[0, n)``.
A power-of-two domain would overshoot by up to 2x and spend most of its time walking.

The hash is a keyed murmur3-style multiply-xorshift on 32-bit words, and the reductions
use only shifts, masks and division by a constant (which numpy vectorises), so one
evaluation is about forty vector operations on 32-bit lanes, in O(block) memory, for any
``n <= 2**62``. The round keys hash (seed key, epoch, round), NOTE [ seed mixing ].

The permutation is keyed pseudo-random, not uniform over all n! orders; its positional
chi-square and adjacent-pair statistics, next to numpy's exact permutation, are measured
by benchmarks/shuffle_quality.py and recorded in docs/shuffle-quality.md.
``ExactPermutation`` is the opt-in uniform alternative for small n: a numpy Generator keyed
the same way, one cached array per epoch.

NOTE [ batched permutations ]
The network's parameters (the halves' widths ``k`` and ``b``, the divisor, the round keys)
are plain numbers, so numpy takes them as arrays as well, one per value. ``_rounds`` is the
one copy of the network's rounds and takes either: ``FeistelPermutation`` evaluates one
domain with 0-d parameters, and :meth:`FeistelPermutation.orders` evaluates many domains
at once (each value under its own domain's parameters, one pass per round count), for a
caller that needs the whole order of many small domains, as a pack's batch needs the bin
orders of up to one window per sequence (NOTE [ packed sequences ]): one permutation object
and forty-odd numpy calls per domain would be mostly call overhead on a few hundred values.
Both cycle-walk the values that leave their domain, so the orders are the same bit for bit
(tests/tokens/test_tokens_bin_orders.py compares them on random counts and epochs).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ._seeds import derive, mix64

__all__ = ["ExactPermutation", "FeistelPermutation", "Permutation", "make_permutation"]

I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]
#: Round keys: one 0-d array per round, or one array per round (a key per element).
Keys = Sequence[U32]

# Constants as 0-d arrays, not numpy scalars: a ufunc call on a small array with a 0-d
# operand costs half as much (a block's network is about forty calls per component).
_M1 = np.array(0x85EBCA6B, dtype=np.uint32)
_M2 = np.array(0xC2B2AE35, dtype=np.uint32)
_LOW32 = np.uint64(0xFFFFFFFF)
_S15 = np.array(15, dtype=np.uint32)

#: Rounds of the Feistel network (each updates one half). Luby-Rackoff needs four rounds
#: of random functions; four matched numpy's permutation on positional and lag-1
#: chi-square for large domains, where three showed lag-1 structure. Below 2**16 values
#: the halves are a few bits wide, each round expresses little, and eight are used
#: (docs/shuffle-quality.md has the figures).
ROUNDS = 4
SMALL_DOMAIN_ROUNDS = 8
SMALL_DOMAIN = 2**16
#: Each half has at least 2**MIN_SIDE_BITS values: cycle walking from a domain of 64 or
#: more keeps tiny n (2, 3, 7, ...) from inheriting the few permutations a tiny network can
#: express.
MIN_SIDE_BITS = 3
#: The largest n: both halves, and their sum before reduction, fit in 32 bits.
MAX_N = 2**62
#: Cycle-walk up to this many elements of a block one by one in Python integers.
SCALAR_WALK = 16


@lru_cache(maxsize=64)
def _round_seeds(key: int) -> npt.NDArray[np.uint64]:
    """The round seeds of ``key``, as many as the most rounds a network uses."""
    rounds = max(ROUNDS, SMALL_DOMAIN_ROUNDS)
    return np.array([derive(key, "feistel-round", r) for r in range(rounds)], dtype=np.uint64)


def _keys_table(seeds: npt.NDArray[np.uint64], epochs: npt.NDArray[np.uint64]) -> U32:
    """Round keys, shape (rounds, len(epochs)): a hash of (round seed, epoch)."""
    mixed = mix64(epochs)
    return (mix64(seeds[:, None] ^ mixed[None, :]) & _LOW32).astype(np.uint32)


def _hash(half: U32, key: U32, h: U32, scratch: U32) -> U32:
    """A keyed 32-bit hash of ``half`` into ``h`` (murmur3-style multiply-xorshift)."""
    np.bitwise_xor(half, key, out=h)
    np.multiply(h, _M1, out=h)
    np.bitwise_xor(h, np.right_shift(h, _S15, out=scratch), out=h)
    return np.multiply(h, _M2, out=h)


def _network(x: I64, k: I64 | int, b: U32, divisor: U32, keys: Keys) -> I64:
    """The Feistel network of NOTE [ keyed permutation ] on ``x``, one pass.

    The parameters are 0-d (one domain) or one per value of ``x`` (NOTE [ batched
    permutations ]): ``k`` the low half's bits, ``b`` the high half's values, ``divisor``
    ``ceil(2**32 / b)``, ``keys`` one per round.
    """
    low = (x & ((np.int64(1) << k) - 1)).astype(np.uint32)
    high = (x >> k).astype(np.uint32)
    h, scratch = np.empty_like(low), np.empty_like(low)
    top = np.asarray(32 - k, dtype=np.uint32)
    for i, key in enumerate(keys):
        if i % 2 == 0:
            # low ^= the top k bits of hash(high): a bijection of the power-of-two half.
            _hash(high, key, h, scratch)
            np.bitwise_xor(low, np.right_shift(h, top, out=h), out=low)
        else:
            # high = (high + hash(low) // ceil(2**32 / b)) mod b, the addend in [0, b);
            # high - b wraps around (uint32) when high < b.
            _hash(low, key, h, scratch)
            np.add(high, np.floor_divide(h, divisor, out=h), out=high)
            np.minimum(high, np.subtract(high, b, out=scratch), out=high)
    out: I64 = (high.astype(np.int64) << k) | low
    return out


def _halves(n: int) -> tuple[int, int]:
    """``(k, b)`` of a domain of ``n`` values: ``2**k >= sqrt(n)``, ``b = ceil(n / 2**k)``."""
    k = max(MIN_SIDE_BITS, math.isqrt(n - 1).bit_length())
    return k, max(2**MIN_SIDE_BITS, -(-n // 2**k))


class Permutation(Protocol):
    """A family of permutations of ``[0, n)``, one per epoch."""

    def __call__(self, index: I64, epoch: I64) -> I64:
        """Return ``perm_epoch(index)`` elementwise."""
        ...


class FeistelPermutation:
    """A keyed permutation of ``[0, n)`` for each epoch, in O(1) memory.

    Args:
        n: The size of the domain, ``1 <= n < 2**63``.
        key: A 64-bit key, usually ``derive(seed, ...)``.

    Determinism:
        ``perm(i, e)`` depends only on ``(n, key, i, e)``; there is no hidden state.

    Examples:
        >>> import numpy as np
        >>> perm = FeistelPermutation(10, key=42)
        >>> out = perm(np.arange(10), np.zeros(10, dtype=np.int64))
        >>> sorted(out.tolist()) == list(range(10))
        True
    """

    def __init__(self, n: int, key: int) -> None:
        if not 1 <= n <= MAX_N:
            raise ValueError(f"n should be in [1, 2**62], but got n={n}")
        self.n = n
        # x = high * 2**k + low: low is a power-of-two half, high counts to b = ceil(n / 2**k).
        self._k, self._b = _halves(n)
        self._b_array = np.array(self._b, dtype=np.uint32)
        self._divisor = np.array(-(-(2**32) // self._b), dtype=np.uint32)
        rounds = SMALL_DOMAIN_ROUNDS if self._b << self._k < SMALL_DOMAIN else ROUNDS
        self._round_seeds = _round_seeds(key)[:rounds]
        self._cached_epoch = -1
        self._cached_keys: Keys = []

    def _keys_for(self, epochs: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint32]:
        """Round keys, shape (rounds, len(epochs)): a hash of (round seed, epoch)."""
        return _keys_table(self._round_seeds, epochs)

    def _round_keys(self, epoch: I64) -> Keys:
        first, low, high = int(epoch[0]), int(epoch.min()), int(epoch.max())
        if low == high:
            if self._cached_epoch != first:
                keys = self._keys_for(np.array([first], dtype=np.uint64))
                self._cached_keys = [np.array(k, dtype=np.uint32) for k in keys[:, 0].tolist()]
                self._cached_epoch = first
            return self._cached_keys
        if high - low < len(epoch):
            # A block spanning few epochs: hash each epoch once, then spread the keys over
            # the elements; by runs when the epochs arrive in order (stream order), which
            # is several times cheaper than a gather.
            table = self._keys_for(np.arange(low, high + 1, dtype=np.uint64))
            if bool((epoch[1:] >= epoch[:-1]).all()):
                runs = np.diff(np.searchsorted(epoch, np.arange(low, high + 2)))
                return [np.repeat(row, runs) for row in table]
            slot = epoch - low
            return [np.take(row, slot) for row in table]
        return list(self._keys_for(epoch.astype(np.uint64)))

    def _network(self, x: I64, keys: Keys) -> I64:
        return _network(x, self._k, self._b_array, self._divisor, keys)

    def _walk_one(self, x: int, keys: list[int]) -> int:
        """:meth:`_network` on one value, repeated until it falls inside ``[0, n)``."""
        k, b, divisor = self._k, self._b, int(self._divisor)
        mask, top = (1 << k) - 1, 32 - k
        m1, m2 = int(_M1), int(_M2)
        while x >= self.n:
            low, high = x & mask, x >> k
            for i, key in enumerate(keys):
                h = (((low if i % 2 else high) ^ key) * m1) & 0xFFFFFFFF
                h = ((h ^ (h >> 15)) * m2) & 0xFFFFFFFF
                if i % 2 == 0:
                    low ^= h >> top
                else:
                    high += h // divisor
                    if high >= b:
                        high -= b
            x = (high << k) | low
        return x

    def at_epoch(self, index: I64, epoch: int) -> I64:
        """``self(index, epoch array)`` for elements that all share one ``epoch``."""
        if self.n == 1 or len(index) == 0:
            return np.zeros_like(index)
        if epoch == self._cached_epoch:  # a mixture calls once per component and block
            return self._walk(index, self._cached_keys)
        return self._walk(index, self._round_keys(np.array([epoch], dtype=np.int64)))

    def __call__(self, index: I64, epoch: I64) -> I64:
        """Return ``perm_epoch(index)`` for each element (``index`` in ``[0, n)``)."""
        if self.n == 1 or len(index) == 0:
            return np.zeros_like(index)
        return self._walk(index, self._round_keys(epoch))

    def rows(self, epochs: I64) -> I64:
        """The whole permutation at each of ``epochs``: row ``r`` is ``perm_{epochs[r]}``.

        One vectorised evaluation for all rows (each epoch's round keys hashed once and
        spread over its ``n`` elements), the same values as :meth:`at_epoch` row by row.

        Examples:
            >>> import numpy as np
            >>> perm = FeistelPermutation(5, key=3)
            >>> table = perm.rows(np.array([0, 7]))
            >>> table.shape, table[1].tolist() == perm.at_epoch(np.arange(5), 7).tolist()
            ((2, 5), True)
        """
        count = len(epochs)
        if self.n == 1 or count == 0:
            return np.zeros((count, self.n), dtype=np.int64)
        table = self._keys_for(np.asarray(epochs).astype(np.uint64))
        flat = self._walk(
            np.tile(np.arange(self.n, dtype=np.int64), count),
            [np.repeat(row, self.n) for row in table],
        )
        return flat.reshape(count, self.n)

    @staticmethod
    def orders(key: int, counts: I64, epochs: I64) -> I64:
        """The whole order of many domains at once, concatenated (NOTE [ batched permutations ]).

        Part ``i`` (``counts[i]`` values) is ``FeistelPermutation(counts[i], key)`` at
        ``arange(counts[i])`` and epoch ``epochs[i]``, computed in one pass of the network
        per round count, not one object and one pass per domain.

        Args:
            key: The permutations' key.
            counts: Each domain's size, at least 1.
            epochs: Each domain's epoch.

        Examples:
            >>> import numpy as np
            >>> out = FeistelPermutation.orders(5, np.array([3, 4]), np.array([7, 2]))
            >>> out[3:].tolist() == FeistelPermutation(4, 5).at_epoch(np.arange(4), 2).tolist()
            True
        """
        counts, epochs = np.asarray(counts, np.int64), np.asarray(epochs, np.int64)
        total = int(counts.sum())
        owner = np.repeat(np.arange(len(counts)), counts)
        out = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        halves = [_halves(n) for n in counts.tolist()]
        ks = np.array([k for k, _ in halves], dtype=np.int64)
        bs = np.array([b for _, b in halves], dtype=np.uint32)
        divisors = np.array([-(-(2**32) // b) for _, b in halves], dtype=np.uint32)
        rounds = np.where((bs.astype(np.int64) << ks) < SMALL_DOMAIN, SMALL_DOMAIN_ROUNDS, ROUNDS)
        seeds = _round_seeds(key)[: int(rounds.max(initial=0))]
        table = _keys_table(seeds, epochs.astype(np.uint64))  # (rounds, domains)
        todo = np.flatnonzero(counts[owner] > 1)  # a domain of one value is the identity
        while len(todo):
            at = owner[todo]
            x = out[todo]
            for count in dict.fromkeys(rounds[at].tolist()):  # one network per round count
                pick = np.flatnonzero(rounds[at] == count)
                of = at[pick]
                keys = [table[r, of] for r in range(count)]
                x[pick] = _network(x[pick], ks[of], bs[of], divisors[of], keys)
            out[todo] = x
            todo = todo[x >= counts[at]]  # cycle walking: again until inside the domain
        return out

    def _walk(self, index: I64, keys: Keys) -> I64:
        """The network, cycle-walking the elements that leave ``[0, n)``."""
        out = self._network(index, keys)
        outside = np.flatnonzero(out >= self.n)
        if 0 < len(outside) <= SCALAR_WALK:
            # A few elements (a fraction below 2 / sqrt(n) leave): walk them in Python
            # integers, cheaper than another forty vector operations on a tiny array.
            for i in outside.tolist():
                out[i] = self._walk_one(
                    int(out[i]), [int(k if k.ndim == 0 else k[i]) for k in keys]
                )
            return out
        while len(outside):
            sub_keys = [k[outside] if k.ndim else k for k in keys]
            walked = self._network(out[outside], sub_keys)
            out[outside] = walked
            outside = outside[walked >= self.n]
        return out


class ExactPermutation:
    """A uniformly random permutation of ``[0, n)`` per epoch, cached (O(n) memory).

    Each epoch's permutation comes from ``numpy.random.Generator(PCG64(key))`` with a key
    hashed from (seed key, epoch). The two most recent epochs are kept, so a block that
    straddles an epoch boundary does not rebuild either side.

    Examples:
        >>> import numpy as np
        >>> perm = ExactPermutation(5, key=7)
        >>> sorted(perm(np.arange(5), np.zeros(5, dtype=np.int64)).tolist())
        [0, 1, 2, 3, 4]
    """

    def __init__(self, n: int, key: int) -> None:
        self.n = n
        self._key = key
        self._cache: OrderedDict[int, I64] = OrderedDict()

    def _epoch(self, epoch: int) -> I64:
        perm = self._cache.get(epoch)
        if perm is None:
            rng = np.random.Generator(np.random.PCG64(derive(self._key, "exact-epoch", epoch)))
            perm = rng.permutation(self.n).astype(np.int64)
            self._cache[epoch] = perm
            while len(self._cache) > 2:
                self._cache.popitem(last=False)
        return perm

    def __call__(self, index: I64, epoch: I64) -> I64:
        """Return ``perm_epoch(index)`` for each element (``index`` in ``[0, n)``)."""
        if len(index) == 0:
            return np.zeros_like(index)
        first = int(epoch[0])
        if bool((epoch == first).all()):
            return self._epoch(first)[index]
        out = np.empty_like(index)
        ranked = np.sort(epoch)  # the distinct epochs (np.unique's first call imports numpy.ma)
        for e in ranked[np.append(True, ranked[1:] != ranked[:-1])].tolist():
            mask = epoch == e
            out[mask] = self._epoch(int(e))[index[mask]]
        return out


def make_permutation(kind: str, n: int, key: int) -> Permutation:
    """Build the permutation family named ``kind`` (``"feistel"`` or ``"exact"``)."""
    if kind == "exact":
        return ExactPermutation(n, key)
    return FeistelPermutation(n, key)
