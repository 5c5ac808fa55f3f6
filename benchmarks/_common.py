"""Pieces the benchmark scripts share: the chain under test, a trivial dataset, formatting
and the machine line."""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable

import torch.utils.data as tud

import detsamplers as ds

#: Indices per batch in every benchmark.
BATCH = 32


def ds_chain(n: int, world: int, skip: int = 0) -> Iterable[list[int]]:
    """detsamplers' training chain over ``range(n)``, rank 0 of ``world``, skipped ``skip``."""
    return ds.make_batch_sampler(
        range(n),
        "training",
        shuffle_seed=0,
        num_workers=world,
        rank=0,
        batch_size=BATCH,
        skip=skip,
    )


class Trivial(tud.Dataset[int]):
    """A map-style dataset whose record ``i`` is ``i``: the loader's own cost, nothing else."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        return index


def fmt_time(seconds: float) -> str:
    """Three significant digits in us, ms or s."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def fmt_ratio(ratio: float) -> str:
    """A ratio; below 0.1 as ``1/k``."""
    if ratio >= 100:
        return f"{ratio:,.0f}"
    if ratio >= 0.1:
        return f"{ratio:.3g}"
    if ratio > 0:
        return f"1/{1 / ratio:,.0f}"
    return "0"


def load_average() -> str:
    """The 1-minute load average, or ``?``."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def usable_cpus() -> str:
    """CPUs this process may run on, or ``?``."""
    try:
        return str(len(os.sched_getaffinity(0)))
    except AttributeError:
        return "?"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for text in f:
                if text.startswith("model name"):
                    return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
