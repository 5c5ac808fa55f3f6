"""``DistributedContext``: rank, world size and the few collectives the trainer needs.

Under torchrun the environment carries ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
``MASTER_ADDR``; :func:`setup` then initialises torch's default process group (gloo on
CPU, nccl when CUDA is available) and reports that it did, so that ``init`` destroys it
on exit. Without them it is a plain single process and every collective is local.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import PrefixStore  # type: ignore[attr-defined]  # public, untyped export
from torch.distributed.rendezvous import rendezvous

from .._errors import check_int

__all__ = ["DistributedContext", "setup"]

_TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")


class DistributedContext:
    """This process's place among the ranks of a trial.

    Args:
        rank: This process's rank, in ``[0, size)``.
        size: The world size, ``>= 1``.
        local_rank: This process's rank on its node (picks the GPU).

    Examples:
        >>> single = DistributedContext()
        >>> single.get_rank(), single.get_size(), single.get_local_rank()
        (0, 1, 0)
        >>> single.all_gather([1, 2])
        [[1, 2]]
    """

    def __init__(self, rank: int = 0, size: int = 1, local_rank: int = 0) -> None:
        self.size = check_int("size", size, minimum=1)
        self.rank = check_int("rank", rank, minimum=0, below=self.size, below_name="size")
        self.local_rank = check_int("local_rank", local_rank, minimum=0)

    @classmethod
    def from_torch_distributed(cls) -> DistributedContext:
        """The context of an already initialised default process group."""
        if not dist.is_initialized():
            raise RuntimeError(
                "from_torch_distributed needs an initialised process group, but "
                "torch.distributed.is_initialized() is False; call "
                "torch.distributed.init_process_group() first, or use init() under torchrun"
            )
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        return cls(dist.get_rank(), dist.get_world_size(), local_rank)

    def get_rank(self) -> int:
        """This process's rank."""
        return self.rank

    def get_size(self) -> int:
        """The number of ranks."""
        return self.size

    def get_local_rank(self) -> int:
        """This process's rank on its node."""
        return self.local_rank

    @property
    def is_chief(self) -> bool:
        """Whether this is rank 0, the rank that writes shared files and prints."""
        return self.rank == 0

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order (``all_gather_object``)."""
        if self.size == 1:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        """Wait until every rank gets here."""
        if self.size > 1:
            dist.barrier()

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is true on any rank."""
        if self.size == 1:
            return flag
        value = torch.tensor([1 if flag else 0])
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item())


def _launched_by_torchrun() -> bool:
    return all(name in os.environ for name in _TORCHRUN_VARIABLES)


def setup() -> tuple[DistributedContext, bool]:
    """The context of this process, and whether this call created the process group.

    Uses an initialised default group if there is one, else initialises it from
    torchrun's environment (gloo on CPU, nccl on GPU), else a single process.
    """
    if dist.is_available() and dist.is_initialized():
        return DistributedContext.from_torch_distributed(), False
    if not _launched_by_torchrun():
        return DistributedContext(), False
    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    if size == 1:
        return DistributedContext(rank, size, local_rank), False
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    # NOTE [ restart attempts ]: torchrun keeps its store across the restarts of a worker
    # group, and the default group's keys carry no attempt number, so a restarted rank can
    # read a dead rank's gloo address and fail to connect; a prefix per attempt keeps them
    # apart.
    store, _, _ = next(rendezvous("env://"))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = PrefixStore(f"detsamplers/attempt-{attempt}", store)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=size)
    return DistributedContext(rank, size, local_rank), True
