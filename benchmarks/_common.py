"""Pieces the benchmark scripts share: the chain under test and a trivial dataset.

Formatting and the machine probes live in ``harness`` and are re-exported here for the
scripts that import them from this module.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch.utils.data as tud
from harness.fmt import fmt_ratio, fmt_time
from harness.machine import cpu_model, load_average, usable_cpus

import detsamplers as ds

__all__ = [
    "BATCH",
    "Trivial",
    "cpu_model",
    "ds_chain",
    "fmt_ratio",
    "fmt_time",
    "load_average",
    "usable_cpus",
]

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
