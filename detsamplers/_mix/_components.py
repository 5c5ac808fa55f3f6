"""The samplers a mixture may mix: whole, addressable, unsharded record chains.

A component is the chain before the mix in NOTE [ chain order ] (detsamplers/_order.py):
shuffle -> mix -> shard -> batch -> skip. Its indices are ``range(len(dataset))``, offset
by the lengths of the components before it as in ``ConcatDataset`` (NOTE [ mixture law ]).
"""

from __future__ import annotations

from typing import Any

import torch.utils.data as tud

from .._source import ForeignSource, IndexSource, Node, as_node, chain_of

__all__ = ["_check_component", "_component_length"]


def _component_length(node: Node) -> int:
    """Records per pass of a component: its finite segment's length."""
    for link in chain_of(node):
        if not link.infinite:
            return link.pass_length
    return 0


def _check_component(index: int, sampler: Any) -> Node:
    node = as_node(sampler)
    name = f"samplers[{index}]"
    links = chain_of(node)
    verbs = [link.verb for link in links]
    if "mix" in verbs:
        raise ValueError(
            f"MixSampler cannot mix {name}, which is already a mixture: nest mixtures by "
            "multiplying out the weights into one MixSampler over all the samplers"
        )
    if "skip" in verbs:
        raise ValueError(
            f"MixSampler cannot mix {name}, whose chain contains a skip: a skip inside a "
            "component would be applied again on every pass. The order is shuffle → mix → "
            "shard → batch → skip; skip last, e.g. SkipBatchSampler(BatchSampler(...), skip)."
        )
    if "shard" in verbs:
        raise ValueError(
            f"MixSampler cannot mix {name}, which is sharded: mixing inside a shard makes "
            "each rank's data depend on the world size. The order is shuffle → mix → shard "
            "→ batch → skip; shard the mixture, e.g. DistributedSampler(MixSampler(...), W, r)."
        )
    if node.kind != "record" or "batch" in verbs:
        raise ValueError(
            f"MixSampler cannot mix {name}, which yields batches: mix records, then batch the "
            "mixture, e.g. BatchSampler(DistributedSampler(MixSampler(...), W, r), B, False)"
        )
    if not node.indexable:
        kind = type(links[-1]._obj if isinstance(links[-1], ForeignSource) else sampler)
        if issubclass(kind, tud.Dataset) and not issubclass(kind, tud.Sampler):
            raise ValueError(
                f"MixSampler cannot mix {name}, a dataset ({kind.__name__}) rather than a "
                "sampler of its indices: pass range(len(dataset)) or "
                "SequentialSampler(dataset), shuffled with ReproducibleShuffleSampler if "
                "wanted, or build the mixture with MixSampler.from_datasets(datasets, "
                "weights, seed)"
            )
        raise ValueError(
            f"MixSampler cannot mix {name} ({kind.__name__}), which cannot seek: the "
            "mixture computes any component position directly, which a sampler that only "
            "iterates cannot give; use range(len(dataset)) or SequentialSampler(dataset), "
            "shuffled with ReproducibleShuffleSampler(..., seed) (a RepeatSampler around "
            "it is accepted)"
        )
    source = links[-1]
    if not (isinstance(source, IndexSource) and source._identity):
        values = source._values if isinstance(source, IndexSource) else None
        if isinstance(values, range):
            found = repr(values)
        elif values is not None:
            found = f"a sequence of {len(values)} values"
        else:
            found = f"those of a {type(source).__name__}"
        raise ValueError(
            f"MixSampler cannot mix {name}, whose indices are {found}, not range(len(dataset)) "
            "or SequentialSampler(dataset): component k's indices are offset by the lengths "
            "of the components before it, as in ConcatDataset(datasets), so a component "
            "covers its whole dataset; to mix part of a dataset, mix range(len(part)) with "
            "part = torch.utils.data.Subset(dataset, indices)"
        )
    if node.clock is not None:
        node.clock.frozen_by = "MixSampler"
    return node
