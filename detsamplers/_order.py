"""The chain-order rules checked when a stage is built.

NOTE [ chain order ]
The order is shuffle -> repeat -> shard -> batch -> skip (Determined's "Customizing a
Reproducible Dataset"). Some misorderings hang or silently corrupt the data, and a stage
refuses them when it is constructed:

- a shuffle over an infinite stream reads forever (Determined hangs here); one hidden in
  a user's wrapper is caught when a pass outgrows the wrapper's ``len()`` (``_shuffle``);
- a repeat over an infinite stream (repeat over repeat) is meaningless;
- anything wrapping a skip applies the skip again on every pass (under a repeat), or
  shifts every rank's shard (under a shard);
- a shard over a shard gives each rank a shard of its shard and loses records.

A :class:`~detsamplers.MixSampler` takes the repeat's place (it is endless and repeats
each component itself): [shuffle each component] -> mix -> shard -> batch -> skip. It checks
its own components (no shard, batch, skip or mixture inside one), and nothing may shuffle
or repeat it.

Other orders are valid but not elastic or not resumable in O(1), such as a shard before
the shuffle or before the repeat: the stream still works, and
``detsamplers.loader.check_reproducible`` is the place that flags them.
"""

from __future__ import annotations

from ._source import Node, chain_of

__all__ = ["ORDER", "check_wrap"]

ORDER = "shuffle → repeat → shard → batch → skip"


def check_wrap(owner: str, verb: str, inner: Node, inner_name: str) -> None:
    """Raise ``ValueError`` if a ``verb`` stage named ``owner`` may not wrap ``inner``."""
    verbs = [link.verb for link in chain_of(inner)]
    if "skip" in verbs:
        raise ValueError(
            f"{owner} cannot wrap {inner_name}, whose chain contains a skip: a skip must be "
            "the outermost stage, or it is applied again on every pass. The order is "
            f"{ORDER}; apply the skip last, e.g. SkipBatchSampler(BatchSampler(...), skip)."
        )
    if verb in ("shuffle", "repeat") and "mix" in verbs:
        raise ValueError(
            f"{owner} cannot wrap {inner_name}, which contains a MixSampler: a mixture is "
            "already endless and repeats each component itself. The order is shuffle → mix "
            "→ shard → batch → skip; shuffle each component inside the mixture, e.g. "
            "MixSampler.from_datasets(datasets, weights, seed)."
        )
    if verb == "shuffle" and inner.infinite:
        raise ValueError(
            f"{owner} cannot wrap {inner_name}, which is infinite (it contains a repeat): a "
            f"shuffle reads a whole pass and would never finish. The order is {ORDER}; "
            "shuffle first, e.g. RepeatSampler(ReproducibleShuffleSampler(sampler, seed))."
        )
    if verb == "repeat" and inner.infinite:
        raise ValueError(
            f"{owner} cannot wrap {inner_name}, which is already infinite (it contains a "
            f"repeat). The order is {ORDER}; repeat exactly once, right after the shuffle."
        )
    grown = [link for link in chain_of(inner) if getattr(link, "grows", False)]
    if grown and not inner.infinite and not (verb == "repeat" and inner is grown[0]):
        raise ValueError(
            f"{owner} cannot wrap {inner_name}, whose dataset grew mid-run (a "
            "GrowingShuffleSampler with growth=): its passes differ in length, so only a "
            f"repeat may wrap it. The order is {ORDER}; repeat right after it, e.g. "
            "RepeatSampler(GrowingShuffleSampler(...)), or get_data_loader(repeat=True)."
        )
    if verb == "shard" and "shard" in verbs:
        raise ValueError(
            f"{owner} cannot wrap {inner_name}, which is already sharded: each rank would "
            f"take a shard of its shard and records would be lost. The order is {ORDER}; "
            "shard exactly once, after the repeat."
        )
