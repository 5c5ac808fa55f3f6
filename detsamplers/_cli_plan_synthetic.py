"""``plan --weights --shards ...``: a mixture's synthetic shard sets from the command line.

NOTE [ synthetic mixture command ]
With ``--weights``, the single source's synthetic flags (NOTE [ plan command ]) describe
the mixture's shard sets instead of URL patterns (NOTE [ synthetic mixture plan ]): each of
``--shards``, ``--shard-bytes``, ``--samples-per-shard`` and ``--spread`` takes one value for
every set or one value a set (as many as ``--weights``), and set ``k``'s description is the
``k``-th value of each. ``--shards``, ``--shard-bytes`` and ``--samples-per-shard`` are given
together, never with URL patterns.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .loader import SyntheticShards

_FLAGS = ("shards", "shard_bytes", "samples_per_shard", "spread")


def synthetic_sets(args: argparse.Namespace) -> list[SyntheticShards] | None:
    """One :class:`SyntheticShards` a set from the flags (``None``: none given).

    Examples:
        >>> args = argparse.Namespace(weights=[1, 1], urls=[], shards=[4, 2], shard_bytes=[8192],
        ...     samples_per_shard=[2], spread=[0.0])
        >>> [s.shards for s in synthetic_sets(args)]
        [4, 2]
    """
    from .loader import SyntheticShards

    given = [args.shards, args.shard_bytes, args.samples_per_shard]
    if all(value is None for value in given):
        return None
    if any(value is None for value in given):
        raise ValueError(
            "--shards, --shard-bytes and --samples-per-shard should be given together, but "
            "got only some of them"
        )
    if args.urls:
        raise ValueError(
            f"URL patterns should not be given with --shards (a synthetic mixture), but got "
            f"{' '.join(args.urls)}; pass one or the other"
        )
    count = len(args.weights)
    values: list[list[Any]] = []
    for name in _FLAGS:
        got = getattr(args, name)
        if len(got) not in (1, count):
            flag = "--" + name.replace("_", "-")
            raise ValueError(
                f"{flag} should hold one value for every set or one a set ({count}, as "
                f"--weights), but got {len(got)}: {flag} {' '.join(map(str, got))}"
            )
        values.append(got * count if len(got) == 1 else got)
    return [SyntheticShards(*set_values) for set_values in zip(*values, strict=True)]
