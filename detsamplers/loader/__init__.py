"""detsamplers.loader: a DataLoader whose order and random draws resume exactly.

``DataLoader`` takes torch's arguments plus ``seed``; ``get_data_loader`` returns a
torch DataLoader over the core chain (shuffle → repeat → shard → batch → skip) that seeds
torch, numpy and ``random`` per batch from ``(seed, global batch position)``, and whose
batch sampler saves a state with a divergence digest. ``check_reproducible`` explains
what in a loader or sampler would break a reproducible resume.

Examples:
    >>> from detsamplers.loader import DataLoader, check_reproducible
    >>> loader = DataLoader(range(8), batch_size=2, shuffle=True, seed=3)
    >>> check_reproducible(loader)
    >>> train = loader.get_data_loader(repeat=True, skip=2)
    >>> state = train.batch_sampler.state_dict()
    >>> state["position"]
    2
"""

from typing import TYPE_CHECKING, Any

from ._dataloader import DataLoader
from ._reproducible import check_reproducible
from ._wds import (
    Network,
    RunPlan,
    SyntheticShards,
    WebDataLoader,
    WebDatasetMix,
    WebDatasetSource,
    plan_mixture,
    plan_run,
)

if TYPE_CHECKING:
    from ._wds.index._shard_writer import ShardWriter

__all__ = [
    "DataLoader",
    "Network",
    "RunPlan",
    "ShardWriter",
    "SyntheticShards",
    "WebDataLoader",
    "WebDatasetMix",
    "WebDatasetSource",
    "check_reproducible",
    "plan_mixture",
    "plan_run",
]


def __getattr__(name: str) -> Any:
    # ShardWriter subclasses webdataset's, and webdataset is an optional extra: it is
    # imported on first use, so that the rest of detsamplers.loader works without it.
    if name == "ShardWriter":
        from ._wds.remote._urls import require_webdataset

        require_webdataset()  # says how to install it
        from ._wds.index._shard_writer import ShardWriter

        return ShardWriter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
