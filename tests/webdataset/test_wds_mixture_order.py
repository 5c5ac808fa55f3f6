"""The global sample order of a mixture of shard sets (loader/_wds/mix/_mixture_order.py).

Law (NOTE [ shard stream mixture ]): the shards of set ``k`` are numbered after those of
the sets before it, and the positions the mixture gives set ``k``, taken in order, walk set
``k``'s own shard stream from its start: the ``i``-th of them is position ``i`` of that
stream. ``locate`` is a pure function of each position (any query order, any batch of
positions, a fork), for a few sets and for more than eight (a separate path).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from detsamplers import MixSampler
from detsamplers.loader._wds.mix._mixture_order import MixOrder
from detsamplers.loader._wds.order._shard_order import ShardOrder

sets_st = st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=4), min_size=1, max_size=11)


def mix_order(
    sets: list[list[int]], weights: list[int], seed: int, shuffle: bool, window: int
) -> MixOrder:
    mixture = MixSampler([range(sum(counts)) for counts in sets], weights, seed=seed)
    orders = [ShardOrder(counts, seed + k, shuffle, window) for k, counts in enumerate(sets)]
    return MixOrder(mixture, orders)


@st.composite
def mixtures(draw: st.DrawFn) -> tuple[list[list[int]], list[int], int, bool, int]:
    sets = draw(sets_st)
    weights = draw(st.lists(st.integers(1, 4), min_size=len(sets), max_size=len(sets)))
    return (
        sets,
        weights,
        draw(st.integers(0, 2**32)),
        draw(st.booleans()),
        draw(st.sampled_from([0, 1, 3])),
    )


@given(mixture=mixtures(), length=st.integers(1, 250))
def test_each_sets_positions_in_order_walk_that_sets_own_shard_stream_from_its_start(
    mixture: tuple[list[list[int]], list[int], int, bool, int], length: int
) -> None:
    sets, weights, seed, shuffle, window = mixture
    order = mix_order(sets, weights, seed, shuffle, window)
    shards, samples = order.locate(np.arange(length, dtype=np.int64))
    bounds = np.cumsum([0] + [len(counts) for counts in sets])
    owner = np.searchsorted(bounds, shards, side="right") - 1
    assert np.all((shards >= 0) & (shards < bounds[-1]))
    for k, counts in enumerate(sets):
        mine = np.flatnonzero(owner == k)
        own = ShardOrder(counts, seed + k, shuffle, window)
        want_shard, want_sample = own.locate(np.arange(len(mine), dtype=np.int64))
        assert (shards[mine] - bounds[k]).tolist() == want_shard.tolist()
        assert samples[mine].tolist() == want_sample.tolist()
        assert np.all(samples[mine] < np.asarray(counts)[shards[mine] - bounds[k]])


@given(
    mixture=mixtures(),
    positions=st.lists(st.integers(0, 10**12), min_size=1, max_size=40),
)
def test_locate_is_a_function_of_each_position_alone_in_any_query_and_in_a_fork(
    mixture: tuple[list[list[int]], list[int], int, bool, int], positions: list[int]
) -> None:
    order = mix_order(*mixture)
    query = np.asarray(positions, dtype=np.int64)
    shards, samples = order.locate(query)
    singles = [order.locate(query[i : i + 1]) for i in range(len(query))]
    assert shards.tolist() == [int(s[0]) for s, _ in singles]
    assert samples.tolist() == [int(s[0]) for _, s in singles]
    reversed_shards, reversed_samples = order.locate(query[::-1].copy())
    assert reversed_shards[::-1].tolist() == shards.tolist()
    assert reversed_samples[::-1].tolist() == samples.tolist()
    fork = order.fork()
    assert fork is not order and fork.mixture is not order.mixture
    fork_shards, fork_samples = fork.locate(query)
    assert (fork_shards.tolist(), fork_samples.tolist()) == (shards.tolist(), samples.tolist())
    again = mix_order(*mixture).locate(query)
    assert (again[0].tolist(), again[1].tolist()) == (shards.tolist(), samples.tolist())


def test_two_sets_of_equal_weight_share_a_window_of_positions_equally() -> None:
    order = mix_order([[2, 2], [3]], [1, 1], seed=5, shuffle=True, window=3)
    shards, _ = order.locate(np.arange(1000, dtype=np.int64))
    first_set = int(np.count_nonzero(shards < 2))
    assert first_set == 500
