"""Unshuffled chains give the outputs and len() of ``determined.pytorch.samplers`` itself.

Every chain is built twice, once from detsamplers and once from the installed Determined
(determined==0.38.1, the ``compare`` extra), and every stage's ``len()`` and the chain's
output are compared. Finite chains are compared over two passes; endless ones over a
prefix. detsamplers' chains are also built over a sampler it cannot address
(``ForeignSampler``), which exercises the iterate-and-filter fallback.

The last tests port the sampler cases of Determined's own
``harness/tests/experiment/pytorch/test_pytorch_data.py`` and pin how the two DataLoaders
shard differently (docs/porting.md).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice, pairwise
from typing import Any

import pytest
import torch.utils.data as tud
from hypothesis import given
from hypothesis import strategies as st

import detsamplers as ds
import detsamplers.loader
from tests.helpers import ForeignSampler, take

det_samplers = pytest.importorskip("determined.pytorch.samplers")
det_pytorch = pytest.importorskip("determined.pytorch")

Op = tuple[Any, ...]

SOURCES: dict[str, Callable[[int], Any]] = {
    "sequential": lambda n: tud.SequentialSampler(range(n)),
    "range": lambda n: range(n),
    "foreign": lambda n: ForeignSampler(range(n)),
}


def build(lib: Any, source: Any, ops: list[Op]) -> list[Any]:
    """The stages of the chain ``ops`` applies to ``source``, innermost first."""
    stages = [source]
    batched = False
    for op in ops:
        inner = stages[-1]
        if op[0] == "batch":
            stage = tud.BatchSampler(inner, op[1], op[2])
            batched = True
        elif op[0] == "repeat":
            stage = lib.RepeatBatchSampler(inner) if batched else lib.RepeatSampler(inner)
        elif op[0] == "shard":
            kind = lib.DistributedBatchSampler if batched else lib.DistributedSampler
            stage = kind(inner, op[1], op[2])
        else:
            stage = lib.SkipBatchSampler(inner, op[1]) if batched else lib.SkipSampler(inner, op[1])
        stages.append(stage)
    return stages


@st.composite
def chains(draw: st.DrawFn) -> tuple[int, list[Op]]:
    """A length and a chain in the seeds' order: repeat → shard → batch → skip, or
    batch → repeat → shard → skip (each stage optional)."""
    n = draw(st.integers(0, 60))
    world = draw(st.integers(1, 8))
    shard: Op = ("shard", world, draw(st.integers(0, world - 1)))
    batch: Op = ("batch", draw(st.integers(1, 7)), draw(st.booleans()))
    repeat: Op = ("repeat",)
    skip: Op = ("skip", draw(st.integers(0, 70)))
    use = draw(st.lists(st.booleans(), min_size=4, max_size=4))
    order = [repeat, shard, batch, skip] if draw(st.booleans()) else [batch, repeat, shard, skip]
    return n, [op for op, on in zip(order, use, strict=True) if on]


def outputs(stages: list[Any], prefix: int) -> list[Any]:
    """Two passes of a finite chain, or the first ``prefix`` items of an endless one."""
    chain = stages[-1]
    if any(type(stage).__name__.startswith("Repeat") for stage in stages):
        return take(chain, prefix)
    return [list(chain), list(chain)]


def endless_and_empty(det_stages: list[Any]) -> bool:
    """Whether a repeat wraps an empty pass (Determined spins there; detsamplers raises)."""
    for inner, stage in pairwise(det_stages):
        if type(stage).__name__.startswith("Repeat"):
            return not any(True for _ in islice(iter(inner), 1))
    return False


# A skip past a finite end keeps Determined's output and warns (tests/test_samplers_bad_input.py).
@pytest.mark.filterwarnings("ignore:Skip(Batch)?Sampler skips")
@pytest.mark.parametrize("source", list(SOURCES), ids=list(SOURCES))
@given(chain=chains())
def test_every_stage_has_determineds_len_and_the_chain_its_output(
    source: str, chain: tuple[int, list[Op]]
) -> None:
    n, ops = chain
    ours = build(ds, SOURCES[source](n), ops)
    theirs = build(det_samplers, tud.SequentialSampler(range(n)), ops)
    for op, mine, det in zip(["source", *ops], ours, theirs, strict=True):
        assert len(mine) == len(det), f"len() differs at {op} in {ops} over {n} records"
    if endless_and_empty(theirs):
        with pytest.raises(ValueError, match="cannot repeat an empty"):
            take(ours[-1], 1)
        return
    assert outputs(ours, 40) == outputs(theirs, 40)


@pytest.mark.parametrize("source", list(SOURCES), ids=list(SOURCES))
@given(n=st.integers(0, 60), world=st.integers(1, 8), size=st.integers(1, 7), drop=st.booleans())
def test_every_rank_has_determineds_len_and_shards_cover_each_item_once(
    source: str, n: int, world: int, size: int, drop: bool
) -> None:
    records, batches = [], []
    for rank in range(world):
        ours = ds.DistributedSampler(SOURCES[source](n), world, rank)
        det = det_samplers.DistributedSampler(tud.SequentialSampler(range(n)), world, rank)
        assert (len(ours), list(ours)) == (len(det), list(det))
        assert len(ours) == len(list(ours)) == n // world + (n % world > rank)
        records += list(ours)
        base = tud.BatchSampler(SOURCES[source](n), size, drop)
        ours_b = ds.DistributedBatchSampler(base, world, rank)
        det_b = det_samplers.DistributedBatchSampler(
            tud.BatchSampler(range(n), size, drop), world, rank
        )
        assert (len(ours_b), list(ours_b)) == (len(det_b), list(det_b))
        assert len(ours_b) == len(list(ours_b))
        batches += list(ours_b)
    assert sorted(records) == list(range(n))
    assert sorted(batches) == list(tud.BatchSampler(range(n), size, drop))


# Determined 0.38.1's own sampler tests (test_pytorch_data.py), run against detsamplers.
# Upstream's newer SkipBatchSampler reports len() - skip unless same_length=True; 0.38.1,
# the version installed here, reports the inner length, and so does detsamplers.


def test_determineds_skip_batch_sampler_case() -> None:
    skip = 2
    batches = tud.BatchSampler(tud.SequentialSampler(range(15)), batch_size=2, drop_last=False)
    skipped = ds.SkipBatchSampler(batches, skip)
    assert len(skipped) == len(det_samplers.SkipBatchSampler(batches, skip)) == 8
    iterator = iter(batches)
    for _ in range(skip):
        next(iterator)
    assert list(iterator) == list(skipped)


def test_determineds_repeat_batch_sampler_case() -> None:
    batches = tud.BatchSampler(tud.SequentialSampler(range(10)), 3, False)
    repeated = ds.RepeatBatchSampler(batches)
    assert len(repeated) == 4
    one_pass = list(batches)
    iterator = iter(repeated)
    for _ in range(3):
        assert one_pass == [next(iterator) for _ in range(len(one_pass))]


def test_determineds_distributed_batch_sampler_case() -> None:
    batches = tud.BatchSampler(tud.SequentialSampler(range(19)), batch_size=2, drop_last=False)
    expected = [
        [[0, 1], [8, 9], [16, 17]],
        [[2, 3], [10, 11], [18]],
        [[4, 5], [12, 13]],
        [[6, 7], [14, 15]],
    ]
    for rank in range(4):
        sharded = ds.DistributedBatchSampler(batches, 4, rank)
        samples = list(sharded)
        assert len(sharded) == len(samples)
        assert samples == expected[rank]


def test_determineds_adapt_batch_sampler_case_on_the_loader() -> None:
    records = [float(i) for i in range(4)]
    offset = 2
    loader = ds.loader.DataLoader(records).get_data_loader(repeat=True, skip=offset)
    plain = [b.tolist() for b in tud.DataLoader(records, batch_size=1)]
    assert [b.tolist() for b in take(loader, 14)] == (plain * 4)[offset : offset + 14]


def test_the_loaders_shard_records_then_batch_where_determineds_shards_batches() -> None:
    ours = ds.loader.DataLoader(list(range(10)), batch_size=2)
    theirs = det_pytorch.DataLoader(list(range(10)), batch_size=2)
    got = {}
    for name, loader in [("ours", ours), ("det", theirs)]:
        for rank in range(2):
            per_rank = loader.get_data_loader(repeat=False, num_replicas=2, rank=rank)
            got[name, rank] = (len(per_rank), [b.tolist() for b in per_rank])
    assert got["det", 0] == (3, [[0, 1], [4, 5], [8, 9]])
    assert got["det", 1] == (2, [[2, 3], [6, 7]])
    assert got["ours", 0] == (3, [[0, 2], [4, 6], [8]])
    assert got["ours", 1] == (3, [[1, 3], [5, 7], [9]])
