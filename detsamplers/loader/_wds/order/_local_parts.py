"""The rank-local deal of a shard stream: an epoch cut into parts, one position per part in turn.

NOTE [ rank-local parts ]
Positions are dealt to ranks in turn (NOTE [ shard stream split ]), so with the plain order
every rank reads a sample from nearly every shard. With ``parts = C > 1`` the sample
sequence (the shards in a shard order of the run, NOTE [ fixed part cover ]) is cut into
``C`` contiguous *parts* of ``m = N // C`` samples, and offset ``o`` of epoch ``e`` reads
sample ``j = o // C`` of part ``u = (o + e N) mod C``, which is ``p mod C`` for the global
position ``p``. Since the positions of rank ``r`` of ``W`` are ``≡ r + o_0 (mod W)``, a
rank of a world size dividing ``C`` reads only the ``C / W`` parts ``u ≡ r + o_0
(mod W)``, and only their shards, the same ones every epoch.

Which part lies where: part ``u`` is slot ``sigma(u)`` of the sequence, samples
``[sigma(u) m, (sigma(u) + 1) m)``. ``sigma`` writes ``u``'s residues modulo the prime
powers of ``C`` (``C = 2^a 3^b 5^c ...``, by the Chinese remainder theorem) as base-``p``
digits, and reads those digits back most significant first in the order 2, 2, ..., 3, 3,
..., 5, ...: the digits ``u mod W`` fixes come first. So for ``W = 2^i`` (``i <= a``) and
``W = 2^a 3^j`` and so on, a rank's parts are one contiguous run of ``N / W`` samples; for
any other divisor, a few runs (``W = 3`` of ``C = 720``: 16 runs); for a ``W`` that does not
divide ``C``, every rank reads from every part (exact, without the locality). The ``N mod C``
samples left at the end of the sequence are read by the last round of the epoch,
``j = m``: offset ``o >= C m`` reads sample ``o`` of the sequence, at most ``C - 1``
samples that every rank may share.

With a shuffle (``shuffle_block_shards = k`` with parts, NOTE [ part block shuffle ]),
sample ``j`` of a part is first permuted within its block of ``b`` consecutive samples of
the part, so the order never leaves the part.

NOTE [ part block shuffle ]
Each part's ``m`` samples are cut into blocks of ``b = max(2, ceil(k N / S))`` samples (``k``
shards' worth on average; the last block of a part shorter), and ``j`` is permuted within
its block by a permutation of ``[0, b)`` keyed by ``derive(seed, "wds-part-block")`` and
the triple ``(epoch, part, block)`` (an injective integer, hashed, never added to the
seed): for ``b <= 256`` the order of the ``b`` keyed hashes of the block's members (a
uniform permutation, ``b`` hashes per sample), above that a keyed Feistel permutation
(NOTE [ keyed permutation ]) whose round keys hash the triple. A rank
then holds, per part it reads, one block's shards at a time: it reads each shard's bytes
once (whole, into the node's cache, NOTE [ shard cache ]) while a batch draws from
``C / W`` parts, each a random sample of its block.

It is a bijection of ``[0, N)`` for every ``N`` and ``C`` (the full rounds fill the slots,
the last round the tail), a pure function of the offset, and costs ``O(log C)`` memory:
resuming, seeking, the split across ranks and workers and the elastic law are unchanged,
and ``C`` is part of the source's fingerprint. The window and block shuffles (NOTE [ shard
stream order ], steps 3 and 4) then apply to the sequence index, so they keep the parts'
locality, as the shard shuffle does (it lays out each part's shards anew each epoch, NOTE
[ fixed part cover ]).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ...._permute import FeistelPermutation
from ...._seeds import derive, mix64

__all__ = ["PartDeal", "prime_digits"]

I64 = npt.NDArray[np.int64]
#: Blocks up to this many samples are permuted by sorting hashes (exact, no cycle walks).
SORTED_BLOCK = 256


def prime_digits(parts: int) -> list[tuple[int, int]]:
    """``(prime, prime power below the digit)`` for each base-``p`` digit of ``parts``.

    Examples:
        >>> prime_digits(12)
        [(2, 1), (2, 2), (3, 1)]
    """
    digits: list[tuple[int, int]] = []
    rest, prime = parts, 2
    while rest > 1:
        power = 1
        while rest % prime == 0:
            digits.append((prime, power))
            rest //= prime
            power *= prime
        prime += 1
    return digits


class PartDeal:
    """Map an epoch's offsets to its sequence indexes (NOTE [ rank-local parts ]).

    Args:
        parts: ``C``, at least 2.
        total: ``N``, the epoch's length.
        block: ``b``, samples per block of the part block shuffle (0: no shuffle).
        seed: Keys the part block shuffle.

    Determinism:
        ``sequence(o)`` depends only on ``parts``, ``total`` and ``o``.

    Examples:
        >>> import numpy as np
        >>> deal = PartDeal(parts=4, total=9)  # 4 parts of 2 samples, then 1 left over
        >>> deal.sequence(np.arange(9)).tolist()
        [0, 4, 2, 6, 1, 5, 3, 7, 8]
        >>> sorted(deal.sequence(np.arange(0, 8, 2)).tolist())  # rank 0 of 2: parts 0, 2
        [0, 1, 2, 3]
    """

    def __init__(self, parts: int, total: int, block: int = 0, seed: int = 0) -> None:
        if parts < 2:
            raise ValueError(f"parts should be at least 2, but got parts={parts}")
        self.parts = parts
        self.total = total
        self.size = total // parts
        self.digits = prime_digits(parts)
        self.block = min(block, self.size) if block > 1 else 0
        self._full: FeistelPermutation | None = None
        self._tail: FeistelPermutation | None = None
        self._key: np.uint64 | None = None
        if self.block > 1:
            key = derive(seed, "wds-part-block")
            self._key = np.uint64(key)
            self._full = FeistelPermutation(self.block, key)
            tail = self.size % self.block
            if tail > 1:
                self._tail = FeistelPermutation(tail, key)

    def slot(self, parts: I64) -> I64:
        """``sigma(u)``: where part ``u`` lies among the ``C`` slots of the sequence.

        Examples:
            >>> PartDeal(6, 6).slot(np.arange(6)).tolist()
            [0, 4, 2, 3, 1, 5]
        """
        moduli: dict[int, int] = {}
        for prime, power in self.digits:
            moduli[prime] = power * prime
        out = np.zeros_like(parts)
        for prime, power in self.digits:
            digit = (parts % moduli[prime]) // power % prime
            out = out * prime + digit
        return out

    def shuffle(self, rounds: I64, parts: I64, epoch: int) -> I64:
        """Permute each part's sample ``rounds`` within its block (NOTE [ part block shuffle ]).

        Examples:
            >>> deal = PartDeal(2, 20, block=5, seed=0)
            >>> out = deal.shuffle(np.arange(10), np.zeros(10, dtype=np.int64), epoch=0)
            >>> sorted(out[:5].tolist()), sorted(out[5:].tolist())
            ([0, 1, 2, 3, 4], [5, 6, 7, 8, 9])
        """
        if self._full is None or len(rounds) == 0:
            return rounds
        blocks, within = np.divmod(rounds, self.block)
        count = -(-self.size // self.block)
        # An injective code of (epoch, part, block); the permutation hashes it per round.
        codes = (epoch * self.parts + parts) * count + blocks
        out = rounds.copy()
        full = (blocks + 1) * self.block <= self.size
        if full.any():
            moved = self._permute(self._full, self.block, within[full], codes[full])
            out[full] = blocks[full] * self.block + moved
        tail = ~full & (rounds < self.size)
        if self._tail is not None and tail.any():
            size = self.size % self.block
            out[tail] = blocks[tail] * self.block + self._permute(
                self._tail, size, within[tail], codes[tail]
            )
        return out

    def _permute(self, perm: FeistelPermutation | None, size: int, x: I64, codes: I64) -> I64:
        """``x`` through the permutation of ``[0, size)`` keyed by each element's code.

        A small block is permuted by sorting ``size`` keyed hashes per element: a uniform
        permutation per code, without the Feistel network's cycle walks on a small domain.
        """
        if size > SORTED_BLOCK:
            assert perm is not None
            return perm(x, codes)
        assert self._key is not None
        members = np.arange(size, dtype=np.uint64)
        keyed = codes.astype(np.uint64)[:, None] * np.uint64(size) + members[None, :]
        order = np.argsort(mix64(keyed ^ self._key), axis=1, kind="stable")
        out: I64 = order[np.arange(len(x)), x].astype(np.int64)
        return out

    def sequence(self, offsets: I64, epoch: int = 0, shift: int = 0) -> I64:
        """The sequence index each offset in ``[0, total)`` of epoch ``epoch`` reads.

        ``shift``: the parts are rotated by it, offset ``o < C m`` reading part
        ``(o + shift) mod C`` (NOTE [ fixed part cover ]: ``shift = e N mod C``).

        Examples:
            >>> PartDeal(parts=4, total=9).sequence(np.arange(9), shift=1).tolist()
            [4, 2, 6, 0, 5, 3, 7, 1, 8]
        """
        rounds, parts = np.divmod(offsets, self.parts)
        full = rounds < self.size
        if shift:
            parts = (parts + shift) % self.parts
        rounds = self.shuffle(rounds, parts, epoch)
        out: I64 = np.where(full, self.slot(parts) * self.size + rounds, offsets)
        return out
