"""Seed mixing by hashing.

NOTE [ seed mixing ]
Every random choice in detsamplers is keyed by a hash of (seed, labels...), never by
arithmetic such as ``seed + epoch``: with addition, seed 0 at epoch 1 would equal seed 1 at
epoch 0, and two trials launched with neighbouring seeds would share most of their
shuffles. ``derive`` hashes a canonical encoding of its arguments with BLAKE2b, so
distinct argument tuples give unrelated 64-bit keys. ``mix64`` is the SplitMix64
finaliser, a bijection on 64-bit words with full avalanche, vectorised over numpy arrays;
it spreads a per-position counter (an epoch, a batch number) into a key cheaply inside a
block.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

__all__ = ["derive", "mix64", "stream_key", "stream_keys"]

_U64 = np.uint64
_M1 = _U64(0xBF58476D1CE4E5B9)
_M2 = _U64(0x94D049BB133111EB)
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_MASK64 = (1 << 64) - 1


def derive(seed: int, *labels: int | str) -> int:
    """Hash ``seed`` and ``labels`` into an unsigned 64-bit key.

    Args:
        seed: Any integer.
        labels: Integers or strings naming the purpose of the key (a stage, an epoch).

    Returns:
        A key in ``[0, 2**64)``.

    Determinism:
        A pure function of its arguments, stable across processes, platforms and Python
        versions (it does not use ``hash()``).

    Examples:
        >>> derive(0, "shuffle") == derive(0, "shuffle")
        True
        >>> derive(0, "epoch", 1) == derive(1, "epoch", 0)
        False
    """
    text = "\x1f".join([str(int(seed)), *(f"{type(x).__name__}:{x}" for x in labels)])
    digest = hashlib.blake2b(text.encode(), digest_size=8, person=b"detsamplers").digest()
    return int.from_bytes(digest, "little")


def mix64(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Apply the SplitMix64 finaliser elementwise (a bijection on 64-bit words).

    Examples:
        >>> import numpy as np
        >>> mix64(np.array([0, 1], dtype=np.uint64)).tolist()
        [16294208416658607535, 10451216379200822465]
    """
    z = values + _GOLDEN
    z = (z ^ (z >> _U64(30))) * _M1
    z = (z ^ (z >> _U64(27))) * _M2
    return z ^ (z >> _U64(31))


def stream_keys(base: int, indices: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """Outputs ``indices`` of the SplitMix64 stream seeded with ``base``.

    ``mix64(base + i * golden)`` for each counter ``i``, modulo ``2**64``: a key per
    position (a batch's RNG seed, say) for a whole block at once. Key ``base`` by
    :func:`derive`; distinct counters below ``2**64`` give distinct keys, since the golden
    ratio constant is odd and :func:`mix64` is a bijection.

    Args:
        base: A key from :func:`derive`, in ``[0, 2**64)``.
        indices: Non-negative counters (batch positions).

    Examples:
        >>> import numpy as np
        >>> keys = stream_keys(derive(0, "batch"), np.arange(3))
        >>> len(set(keys.tolist())), keys.dtype
        (3, dtype('uint64'))
    """
    # mix64 of (counter * golden + base), in place on one array and one scratch (a rank's
    # block hashes a window per position in the mixture: temporaries would double the cost).
    z = indices.astype(np.uint64)
    z *= _GOLDEN
    z += _U64((base + 0x9E3779B97F4A7C15) & _MASK64)
    scratch = np.right_shift(z, _U64(30))
    z ^= scratch
    z *= _M1
    z ^= np.right_shift(z, _U64(27), out=scratch)
    z *= _M2
    z ^= np.right_shift(z, _U64(31), out=scratch)
    return z


def stream_key(base: int, index: int) -> int:
    """:func:`stream_keys` for one counter, in plain integers (no numpy call).

    Examples:
        >>> import numpy as np
        >>> base = derive(0, "batch")
        >>> stream_key(base, 5) == int(stream_keys(base, np.array([5]))[0])
        True
        >>> stream_key(base, 2**40) == int(stream_keys(base, np.array([2**40]))[0])
        True
    """
    z = (base + (index + 1) * 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)
