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
