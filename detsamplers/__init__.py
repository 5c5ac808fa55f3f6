"""detsamplers: reproducible, resumable PyTorch samplers for any number of ranks.

Every stage is a pure function of a stream position: shuffle (pass ``e`` is a keyed
permutation of ``(seed, e)``), repeat (``divmod(position, N)``), shard (rank ``r`` owns
positions ``r, r + W, ...``), batch (consecutive positions) and skip (a start offset).
Skipping to any point costs O(1), and each rank works only on its own share. A mixture
(``MixSampler``) interleaves several datasets with weights under the same rules.

Examples:
    >>> from itertools import islice
    >>> from torch.utils.data import BatchSampler, SequentialSampler
    >>> import detsamplers as ds
    >>> records = SequentialSampler(range(10))
    >>> shuffled = ds.ReproducibleShuffleSampler(records, seed=0)
    >>> shard = ds.DistributedSampler(ds.RepeatSampler(shuffled), num_workers=2, rank=0)
    >>> chain = ds.SkipBatchSampler(BatchSampler(shard, batch_size=2, drop_last=False), skip=3)
    >>> len(next(iter(chain)))
    2
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from ._chain import make_batch_sampler, make_mixed_batch_sampler
    from ._errors import ReproducibilityError
    from ._grow import GrowingShuffleSampler
    from ._mix import MixSampler
    from ._native import kernel_status
    from ._repeat import RepeatBatchSampler, RepeatSampler
    from ._shard import DistributedBatchSampler, DistributedSampler
    from ._shuffle import ReproducibleShuffleBatchSampler, ReproducibleShuffleSampler
    from ._skip import SkipBatchSampler, SkipSampler

__version__ = "0.1.0"

__all__ = [
    "DistributedBatchSampler",
    "DistributedSampler",
    "GrowingShuffleSampler",
    "MixSampler",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibilityError",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "SkipBatchSampler",
    "SkipSampler",
    "__version__",
    "kernel_status",
    "make_batch_sampler",
    "make_mixed_batch_sampler",
]

# NOTE [ lazy public names ]
# ``python -m detsamplers`` imports this package before its ``__main__`` runs, and the
# stages import torch (about 3 s of CPU): each public name is imported on first use instead
# (PEP 562), so that ``--help`` and a mistyped argument answer at once. ``import detsamplers``
# itself imports no torch; ``from detsamplers import X`` and ``detsamplers.X`` import X's
# module then, as they would have at import time.
_HOMES = {
    "DistributedBatchSampler": "._shard",
    "DistributedSampler": "._shard",
    "GrowingShuffleSampler": "._grow",
    "MixSampler": "._mix",
    "RepeatBatchSampler": "._repeat",
    "RepeatSampler": "._repeat",
    "ReproducibilityError": "._errors",
    "ReproducibleShuffleBatchSampler": "._shuffle",
    "ReproducibleShuffleSampler": "._shuffle",
    "SkipBatchSampler": "._skip",
    "SkipSampler": "._skip",
    "kernel_status": "._native",
    "make_batch_sampler": "._chain",
    "make_mixed_batch_sampler": "._chain",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home, __name__), name)
    globals()[name] = value  # found once: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
