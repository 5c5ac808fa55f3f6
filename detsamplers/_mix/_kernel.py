"""The mixture's glue to the compiled kernel: which mixtures it takes, and their parameters.

It implements the Python side of NOTE [ compiled mixture kernel ] (detsamplers/_native.py):
a mixture whose components are all Feistel shuffles of ``range(n)`` hands each component's
permutation to the kernel as one row of words, and blocks long enough go to it whole.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .._permute import FeistelPermutation
from .._shuffle import _Shuffle
from .._source import IndexSource, Node
from .._stage import Stage

__all__ = [
    "KERNEL_MAX_COMPONENTS",
    "KERNEL_MAX_WINDOW",
    "KERNEL_MIN_POSITIONS",
    "KERNEL_PARAMS",
    "_feistel_permutations",
    "_kernel_params",
]

I64 = npt.NDArray[np.int64]

#: Blocks of at least this many positions go to the compiled kernel, which needs every
#: arrangement built (2 to 10 ms once per segment): shorter blocks, as after a seek, build
#: only the arrangements they touch, in numpy (NOTE [ compiled mixture kernel ]).
KERNEL_MIN_POSITIONS = 2048
#: Words per component in the kernel's parameters: n, k, b, divisor, rounds, offset, then
#: up to eight round seeds.
KERNEL_PARAMS = 14
#: The largest window the kernel takes: its codes hold an offset's rank (below 2 P) in 16 bits.
KERNEL_MAX_WINDOW = 2**15
#: The kernel shuffles mixtures of up to this many components (it files each chunk's
#: positions by component); larger ones are located in it and shuffled in numpy.
KERNEL_MAX_COMPONENTS = 64


def _feistel_permutations(nodes: list[Node]) -> list[FeistelPermutation] | None:
    """Each component's permutation if every one is a Feistel shuffle of ``range(n)``."""
    perms: list[FeistelPermutation] = []
    for node in nodes:
        if not isinstance(node, _Shuffle) or type(node).records is not Stage.records:
            return None
        if type(node)._map is not _Shuffle._map:
            return None
        inner = node.inner_node()
        if not isinstance(inner, IndexSource) or not inner._identity or node.pass_length < 1:
            return None
        perm = node._permutation()
        if not isinstance(perm, FeistelPermutation):
            return None
        perms.append(perm)
    return perms


def _kernel_params(perms: list[FeistelPermutation], offsets: I64) -> npt.NDArray[np.uint64]:
    """Each component's permutation as one row of ``KERNEL_PARAMS`` words for the kernel."""
    rows = np.zeros((len(perms), KERNEL_PARAMS), dtype=np.uint64)
    for row, perm, offset in zip(rows, perms, offsets.tolist(), strict=True):
        seeds = perm._round_seeds
        row[:6] = [perm.n, perm._k, perm._b, int(perm._divisor), len(seeds), offset]
        row[6 : 6 + len(seeds)] = seeds
    return rows
