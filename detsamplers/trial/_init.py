"""``init``: the context manager that starts a trial's process (torchrun or single)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch.distributed as dist

from ..loader._dataloader import DEFAULT_SEED
from ._context import TrialContext
from ._distributed import DistributedContext, setup
from ._rng import seed_all

__all__ = ["init"]


@contextmanager
def init(
    hparams: dict[str, Any] | None = None,
    seed: int | None = None,
    distributed: DistributedContext | None = None,
    aggregation_frequency: int = 1,
    tensorboard_dir: str = "tensorboard",
    enable_tensorboard_logging: bool = False,
    exp_conf: dict[str, Any] | None = None,
) -> Iterator[TrialContext]:
    """Start a trial's process and yield its :class:`TrialContext`.

    Under torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``MASTER_ADDR`` set) it
    initialises the default process group, gloo on CPU and nccl on GPU, and destroys it on
    exit; an already initialised group is used as is and left alone. Otherwise the trial
    is a single process.

    Args:
        hparams: The hyperparameters; training needs ``global_batch_size``.
        seed: The trial seed; ``None`` means 0, the loader's default, so that two runs
            of the same script agree. It is saved in checkpoints and a resume with
            another seed is refused.
        distributed: This process's place among the ranks, to override the detection.
        aggregation_frequency: Global batches whose gradients make one optimizer step,
            as Determined's ``init(aggregation_frequency=...)``
            (NOTE [ gradient aggregation ]).
        tensorboard_dir: Where ``get_tensorboard_writer()`` and ``set_profiler`` write.
        enable_tensorboard_logging: Rank 0 also writes the training and validation
            metrics to TensorBoard (needs the ``tensorboard`` package). Off by default:
            Determined's default is on, but it uploads to its master; here the events
            would be files you did not ask for.
        exp_conf: An experiment configuration, read back by
            ``context.get_experiment_config()`` and ``get_data_config()``.

    Determinism:
        Seeds torch, numpy and ``random`` from ``(seed, "init")`` on every rank, so the
        trial builds identical models everywhere (NOTE [ trial RNG ]).

    Examples:
        >>> with init(hparams={"global_batch_size": 4}, seed=7) as context:
        ...     context.get_trial_seed(), context.distributed.get_size()
        (7, 1)
    """
    created = False
    if distributed is None:
        distributed, created = setup()
    seed = DEFAULT_SEED if seed is None else seed
    context = TrialContext(
        hparams or {},
        seed,
        distributed,
        aggregation_frequency=aggregation_frequency,
        tensorboard_dir=tensorboard_dir,
        enable_tensorboard_logging=enable_tensorboard_logging,
        exp_conf=exp_conf,
    )
    seed_all(context.seed, "init")
    try:
        yield context
    finally:
        if created and dist.is_initialized():
            dist.destroy_process_group()
