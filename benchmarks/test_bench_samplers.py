"""pytest-benchmark timings of detsamplers' hot paths, with torch's first batch for scale.

Run with ``make bench``, i.e. ``pytest benchmarks --benchmark-only``; the plain ``pytest``
of ``make test`` does not collect this directory. Each test takes a few seconds at most.
``benchmarks/samplers_table.py`` prints the side-by-side tables; this file gives
pytest-benchmark's statistics (min, median, max over rounds) for the same operations:

- iterating ``2**16`` indices worth of batches of the training chain (N = 1e6, W = 1, 64);
- the time to the first batch after a skip at N = 1e9 (build + ``next(iter(chain))``);
- torch's ``DistributedSampler`` first batch at N = 1e6 (build + ``set_epoch`` + first).
"""

from __future__ import annotations

from itertools import islice
from typing import Any

import pytest
import torch.utils.data as tud
from _common import BATCH, ds_chain

INDICES = 2**16


@pytest.mark.parametrize("world", [1, 64])
def test_iterate_training_chain(benchmark: Any, world: int) -> None:
    chain = ds_chain(10**6, world)

    def run() -> int:
        # The chain is infinite: each new iterator continues from where the last stopped,
        # which costs the same as starting over (every position is computed directly).
        return sum(len(batch) for batch in islice(chain, INDICES // BATCH))

    assert benchmark(run) == INDICES


@pytest.mark.parametrize("epochs", [0, 100])
def test_first_batch_after_skip(benchmark: Any, epochs: int) -> None:
    n = 10**9
    skip = epochs * n // BATCH

    def run() -> list[int]:
        return next(iter(ds_chain(n, 1, skip)))

    batch = benchmark(run)
    assert len(batch) == BATCH
    assert all(0 <= i < n for i in batch)


def test_torch_distributed_sampler_first_batch(benchmark: Any) -> None:
    n = 10**6
    dataset: Any = range(n)  # torch types it as a Dataset; it only needs len()

    def run() -> list[int]:
        sampler: tud.DistributedSampler[int] = tud.DistributedSampler(
            dataset, num_replicas=1, rank=0, shuffle=True, seed=0
        )
        sampler.set_epoch(0)
        return next(iter(tud.BatchSampler(sampler, BATCH, drop_last=False)))

    assert len(benchmark(run)) == BATCH
