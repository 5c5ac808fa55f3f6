"""The shuffle's laws: each pass a permutation, keyed by (seed, epoch), O(1) memory."""

from __future__ import annotations

import random
import tracemalloc

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

import detsamplers as ds
from detsamplers._permute import ExactPermutation, FeistelPermutation
from detsamplers._seeds import stream_key, stream_keys
from tests.helpers import ForeignSampler, take

KINDS = ["feistel", "exact"]


@pytest.mark.parametrize("kind", KINDS)
@given(n=st.integers(1, 300), seed=st.integers(-(2**70), 2**70), epoch=st.integers(0, 10**6))
def test_every_pass_is_a_permutation_of_the_records(
    kind: str, n: int, seed: int, epoch: int
) -> None:
    sampler = ds.ReproducibleShuffleSampler(range(n), seed, permutation=kind)  # type: ignore[arg-type]
    sampler.set_epoch(epoch)
    assert sorted(sampler) == list(range(n))


@given(bits=st.integers(1, 62), seed=st.integers(0, 2**64), data=st.data())
def test_the_keyed_permutation_is_injective_and_in_range_up_to_two_to_the_62(
    bits: int, seed: int, data: st.DataObject
) -> None:
    n = data.draw(st.integers(2 ** (bits - 1), 2**bits))
    index = np.array(
        data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=64, unique=True)),
        dtype=np.int64,
    )
    out = FeistelPermutation(n, seed)(index, np.zeros(len(index), dtype=np.int64))
    assert len(set(out.tolist())) == len(index)
    assert ((out >= 0) & (out < n)).all()


@pytest.mark.parametrize("perm_cls", [FeistelPermutation, ExactPermutation])
def test_a_block_spanning_many_epochs_matches_each_epoch_evaluated_alone(perm_cls: type) -> None:
    n = 7
    perm = perm_cls(n, 123)
    epochs = np.repeat(np.arange(50, dtype=np.int64), n)
    index = np.tile(np.arange(n, dtype=np.int64), 50)
    together = perm(index, epochs)
    for e in range(50):
        alone = perm(np.arange(n, dtype=np.int64), np.full(n, e, dtype=np.int64))
        assert together[e * n : (e + 1) * n].tolist() == alone.tolist()


def test_a_bare_shuffle_reshuffles_on_each_iteration_like_determined() -> None:
    sampler = ds.ReproducibleShuffleSampler(tud.SequentialSampler(range(50)), seed=1)
    passes = [list(sampler) for _ in range(3)]
    assert passes[0] != passes[1] != passes[2]


@pytest.mark.parametrize("kind", KINDS)
def test_set_epoch_gives_the_same_pass_as_position_under_repeat(kind: str) -> None:
    n = 23
    repeated = take(
        ds.RepeatSampler(ds.ReproducibleShuffleSampler(range(n), 5, permutation=kind)), 4 * n
    )  # type: ignore[arg-type]
    bare = ds.ReproducibleShuffleSampler(range(n), 5, permutation=kind)  # type: ignore[arg-type]
    for epoch in (3, 0, 2):
        bare.set_epoch(epoch)
        assert list(bare) == repeated[epoch * n : (epoch + 1) * n]


def test_set_epoch_on_the_inner_shuffle_steers_the_shard_that_wraps_it() -> None:
    shuffle = ds.ReproducibleShuffleSampler(range(20), seed=9)
    shard = ds.DistributedSampler(shuffle, num_workers=2, rank=1)
    shuffle.set_epoch(4)
    first = list(shard)
    shuffle.set_epoch(4)
    assert list(shard) == first
    shuffle.set_epoch(4)
    assert list(shuffle)[1::2] == first


def test_set_epoch_under_a_repeat_is_refused_with_the_fix() -> None:
    shuffle = ds.ReproducibleShuffleSampler(range(5), seed=0)
    ds.RepeatSampler(shuffle)
    with pytest.raises(ValueError, match=r"a RepeatSampler wraps it .* pass skip="):
        shuffle.set_epoch(1)
    endless = ds.RepeatSampler(ds.ReproducibleShuffleSampler(range(3), seed=0))
    endless.set_epoch(1)  # an infinite stream's passes are its positions': nothing moves
    assert take(endless, 6) == take(ds.RepeatSampler(ds.ReproducibleShuffleSampler(range(3), 0)), 6)


def test_seeds_and_epochs_are_mixed_by_hashing_not_addition() -> None:
    def pass_of(seed: int, epoch: int) -> list[int]:
        sampler = ds.ReproducibleShuffleSampler(range(40), seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert pass_of(0, 1) != pass_of(1, 0)
    assert pass_of(0, 0) != pass_of(1, 0)


def test_the_order_ignores_torch_numpy_and_random_global_state() -> None:
    def run() -> list[list[int]]:
        return take(ds.make_batch_sampler(range(100), "training", 3, 2, 1, 8, 5), 20)

    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    first = run()
    torch.manual_seed(123)
    np.random.seed(456)
    random.seed(789)
    assert run() == first


def test_a_billion_record_shuffle_never_builds_an_index_list() -> None:
    tracemalloc.start()
    try:
        sampler = ds.ReproducibleShuffleSampler(tud.SequentialSampler(range(10**9)), seed=0)
        skipped = ds.SkipSampler(ds.RepeatSampler(sampler), skip=37 * 10**9 + 5)
        first = take(skipped, 5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(set(first)) == 5 and all(0 <= x < 10**9 for x in first)
    assert peak < 50 * 2**20


@settings(max_examples=25)
@given(n=st.integers(1, 60), seed=st.integers(0, 2**32))
def test_a_shuffle_over_a_foreign_sampler_permutes_what_it_yields(n: int, seed: int) -> None:
    values = [3 * i + 1 for i in range(n)]
    assert sorted(ds.ReproducibleShuffleSampler(ForeignSampler(values), seed)) == values


def test_the_batch_shuffle_permutes_whole_batches() -> None:
    base = tud.BatchSampler(range(10), 3, drop_last=False)
    shuffled = list(ds.ReproducibleShuffleBatchSampler(base, seed=2))
    assert sorted(shuffled) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert len(ds.ReproducibleShuffleBatchSampler(base, seed=2)) == 4


def test_the_keyed_permutation_refuses_a_domain_beyond_two_to_the_62() -> None:
    too_big = r"n should be in \[1, 2\*\*62\], but got n=4611686018427387905"
    with pytest.raises(ValueError, match=too_big):
        FeistelPermutation(2**62 + 1, 0)


def _positional_chi2(n: int, trials: int, kind: str) -> float:
    counts = np.zeros((n, n))
    for seed in range(trials):
        sampler = ds.ReproducibleShuffleSampler(range(n), seed, permutation=kind)  # type: ignore[arg-type]
        counts[np.arange(n), list(sampler)] += 1
    expected = trials / n
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [2, 3, 7, 12])
def test_each_record_is_equally_likely_at_each_position_across_seeds(kind: str, n: int) -> None:
    # Positional chi-square over 3000 seeds. Each cell count is Binomial(trials, 1/n), so
    # the statistic has mean n (n - 1); compare with the 1e-4 upper quantile of a
    # chi-square with that many degrees of freedom (Wilson-Hilferty approximation).
    dof = n * (n - 1)
    critical = dof * (1 - 2 / (9 * dof) + 3.72 * (2 / (9 * dof)) ** 0.5) ** 3
    assert _positional_chi2(n, 3000, kind) < critical


def test_neighbouring_positions_are_uncorrelated_in_a_large_shuffle() -> None:
    n = 200_000
    for seed in range(3):
        sampler = ds.ReproducibleShuffleSampler(range(n), seed)
        values = np.fromiter(sampler, dtype=np.float64, count=n)
        correlation = np.corrcoef(values[:-1], values[1:])[0, 1]
        assert abs(correlation) < 4 / n**0.5  # four standard errors


@settings(max_examples=200)
@given(
    base=st.integers(0, 2**64 - 1),
    index=st.integers(0, 2**62),
    other=st.integers(0, 2**62),
)
def test_the_scalar_and_vector_stream_keys_agree_and_distinct_counters_differ(
    base: int, index: int, other: int
) -> None:
    vector = stream_keys(base, np.array([index, other], dtype=np.int64)).tolist()
    assert vector == [stream_key(base, index), stream_key(base, other)]
    assert (vector[0] == vector[1]) == (index == other)
    assert 0 <= vector[0] < 2**64


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 3000),
    key=st.integers(0, 2**64 - 1),
    epochs=st.lists(st.integers(0, 2**40), min_size=0, max_size=5),
)
def test_feistel_rows_equal_the_permutation_at_each_epoch_evaluated_alone(
    n: int, key: int, epochs: list[int]
) -> None:
    perm = FeistelPermutation(n, key)
    table = perm.rows(np.array(epochs, dtype=np.int64))
    assert table.shape == (len(epochs), n)
    for row, epoch in zip(table, epochs, strict=True):
        alone = FeistelPermutation(n, key).at_epoch(np.arange(n, dtype=np.int64), epoch)
        assert row.tolist() == alone.tolist() and sorted(row.tolist()) == list(range(n))
