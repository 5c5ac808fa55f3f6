"""What the sampler tables share: settings, constants, the chains at batch 32, Determined."""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from types import ModuleType

from _common import BATCH, ds_chain
from harness.table import Cell, materialises, not_installed
from harness.timing import extrapolate, over_cap
from harness.timing import time_first_batch as _time_first_batch
from peers import determined_samplers, ours, torch_sampler

#: N for the throughput and first-batch tables (a and c).
N_SMALL = 10**6
#: The issue's targets for a seek at N = 1e9.
TARGET_SECONDS = 5e-3
TARGET_BYTES = 50 * 10**6
#: Above this N, peers that materialise every index (a Python list or a tensor of N
#: indices) are not run: at 1e9 that is 8 GB for torch's tensor alone.
MATERIALISE_LIMIT = 10**8
#: Table b3 resumes in the middle of this epoch (counting from 0).
RESUME_EPOCH = 3

Batches = Iterable[list[int]]


@dataclass(frozen=True)
class Settings:
    """What one mode measures, and its time caps in seconds."""

    mode: str
    #: World sizes W of tables a and c.
    workers: tuple[int, ...]
    #: Indices per throughput sample (table a).
    budget: int
    #: Time cap of one throughput sample (table a).
    rate_cap: float
    #: Longest single timed operation (tables b2 and c); longer ones are estimated, not run.
    op_cap: float
    #: Longest single traced run (table d).
    memory_cap: float
    #: N and positions (in epochs) of table b.
    seek_sizes: tuple[int, ...]
    seek_epochs: tuple[int, ...]
    #: N of table d.
    memory_sizes: tuple[int, ...]
    #: N of table b3 (resume at a fixed relative position).
    resume_sizes: tuple[int, ...]
    repeats: int = 3


QUICK = Settings(
    mode="quick",
    workers=(1, 64),
    budget=2**20,
    rate_cap=2.0,
    op_cap=2.0,
    memory_cap=5.0,
    seek_sizes=(10**9, 10**6),
    seek_epochs=(0, 1, 10, 100),
    memory_sizes=(10**3, 10**4, 10**5, 10**6),
    resume_sizes=(10**3, 10**6, 10**9),
)
FULL = Settings(
    mode="full",
    workers=(1, 8, 64, 1024),
    budget=2**22,
    rate_cap=5.0,
    op_cap=5.0,
    memory_cap=60.0,
    seek_sizes=(10**9, 10**6),
    seek_epochs=(0, 1, 10, 100),
    memory_sizes=(10**3, 10**4, 10**5, 10**6, 10**7),
    resume_sizes=tuple(10**k for k in range(3, 10)),
)


@dataclass(frozen=True)
class DetModule:
    """Determined's samplers module, or None with the reason in ``status``."""

    module: ModuleType | None
    status: str


def load_determined() -> DetModule:
    """Determined's samplers if importable; a missing package is "not installed"."""
    try:
        module = determined_samplers.load()
    except ModuleNotFoundError:
        return DetModule(None, "not installed")
    except Exception as exc:  # a broken install is reported, never fatal
        return DetModule(None, f"not importable ({type(exc).__name__}: {exc})")
    try:
        version = importlib.metadata.version("determined")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown version"
    return DetModule(module, version)


#: ``time_first_batch`` that checks the first batch holds ``BATCH`` indices.
time_first_batch = partial(_time_first_batch, size=BATCH)


def ds_first_batch(n: int, world: int, skip: int) -> list[int]:
    return next(iter(ds_chain(n, world, skip)))


def torch_chain(n: int, world: int, epoch: int = 0) -> Iterable[list[int]]:
    return torch_sampler.chain(n, world, BATCH, epoch)


def torch_epochs(n: int, world: int) -> Iterator[list[int]]:
    return torch_sampler.epochs(n, world, 0, BATCH)


def torch_resume(n: int, world: int, epoch: int, offset: int) -> Iterator[list[int]]:
    return torch_sampler.resume(n, world, epoch, offset, BATCH)


def det_chain(det: ModuleType, n: int, world: int, skip: int = 0) -> Iterable[list[int]]:
    return determined_samplers.chain(det, n, world, BATCH, skip)


ds_shuffle_first = ours.shuffle_first
torch_shuffle_first = torch_sampler.shuffle_first
det_shuffle_first = determined_samplers.shuffle_first


def resume_skip(n: int) -> int:
    """Batches before the middle of epoch ``RESUME_EPOCH`` (W = 1)."""
    return (RESUME_EPOCH * n + n // 2) // BATCH


def determined_skip_cell(
    det: DetModule, n: int, skip: int, points: list[tuple[float, float]], x: float, s: Settings
) -> Cell:
    """Determined's build + first batch after ``skip`` batches, unless it would exceed the cap.

    ``points`` holds the ``(x, seconds)`` already measured along this row of the grid; the
    new one is appended, and the next cell extrapolates from them.
    """
    if det.module is None:
        return not_installed()
    if n > MATERIALISE_LIMIT:
        return materialises(n)
    capped = over_cap(extrapolate(points, x), s.op_cap)
    if capped is not None:
        return capped
    timing = time_first_batch(partial(det_chain, det.module, n, 1, skip), s.repeats, s.op_cap)
    points.append((x, timing.total))
    return timing.cell()


def warm_up(det: DetModule) -> None:
    """First calls pay for lazy imports, numpy/torch dispatch caches and thread pools."""
    next(iter(ds_chain(1000, 2, 5)))
    next(iter(torch_chain(1000, 2)))
    ds_shuffle_first(1000)
    torch_shuffle_first(1000)
    if det.module is not None:
        next(iter(det_chain(det.module, 1000, 2, 5)))
