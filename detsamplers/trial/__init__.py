"""detsamplers.trial: a lean trial loop whose pause and resume are exact, on any world size.

Shaped like Determined's PyTorchTrial and Trainer, but local and torchrun-native: a run
resumes from a checkpoint folder, not from a cluster master. Launch a training script
with ``torchrun --nproc_per_node=2 train.py`` (or as a single process)::

    from detsamplers.trial import Batch, Trainer, find_latest_checkpoint, init

    with init(hparams={"global_batch_size": 32}, seed=1) as context:
        trial = MyTrial(context)
        Trainer(trial, context).fit(
            max_length=Batch(1000),
            checkpoint_period=Batch(100),
            latest_checkpoint=find_latest_checkpoint("checkpoints"),
        )

Examples:
    >>> from detsamplers.trial import Epoch, init
    >>> with init(hparams={"global_batch_size": 8}) as context:
    ...     context.get_per_slot_batch_size(), context.get_initial_batch()
    (8, 0)
"""

from collections.abc import Sequence as _Sequence

import torch as _torch

from ..loader import DataLoader
from ._callbacks import Callback
from ._checkpoint import find_latest_checkpoint, load_trial_from_checkpoint_path
from ._cluster import LOG_FORMAT, ClusterInfo, TrialInfo, get_cluster_info
from ._context import TrialContext
from ._distributed import DistributedContext
from ._init import init
from ._lr_scheduler import LRScheduler
from ._reducer import MetricReducer, Reducer
from ._trainer import Trainer
from ._trial import Trial
from ._units import Batch, Epoch

# Determined's names, so that a trial runs with only its imports changed (docs/porting.md):
# ``import detsamplers.trial as det`` and ``from detsamplers import trial as pytorch``.
PyTorchTrial = Trial
PyTorchTrialContext = TrialContext
#: What a DataLoader hands a trial: a tensor, a sequence or a dict of tensors (Determined's).
TorchData = dict[str, _torch.Tensor] | _Sequence[_torch.Tensor] | _torch.Tensor

__all__ = [  # noqa: RUF022 (sorted as tests/trial/test_trial_api.py asserts: str order)
    "Batch",
    "Callback",
    "ClusterInfo",
    "DataLoader",
    "DistributedContext",
    "Epoch",
    "LOG_FORMAT",
    "LRScheduler",
    "MetricReducer",
    "PyTorchTrial",
    "PyTorchTrialContext",
    "Reducer",
    "TorchData",
    "Trainer",
    "Trial",
    "TrialContext",
    "TrialInfo",
    "find_latest_checkpoint",
    "get_cluster_info",
    "init",
    "load_trial_from_checkpoint_path",
]
