"""A plan's cost of the byte ranges a node fetches (NOTE [ planned fetches ])."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.loader._wds._plan_fetches import node_costs, ranged_cost, rank_spans
from detsamplers.loader._wds._plan_inputs import _equal_samples
from detsamplers.loader._wds._plan_sets import Cluster, parts_sets
from detsamplers.loader._wds.order._shard_order import ShardOrder
from detsamplers.loader._wds.read._node_fetches import node_fetches

spans = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(1, 3000)).map(lambda t: (t[0], t[0] + t[1])),
    min_size=1,
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(writes=st.lists(spans, min_size=1, max_size=4), step=st.integers(1, 4000), data=st.data())
def test_ranges_written_in_any_order_cost_the_bytes_of_their_union(
    writes: list[list[tuple[int, int]]], step: int, data: st.DataObject
) -> None:
    covered = set().union(*(range(a, b) for spans in writes for a, b in spans))
    order = data.draw(st.permutations(writes))
    sent, requests = ranged_cost([tuple(w) for w in order], step)
    assert sent == len(covered)
    count = sum(len(w) for w in writes)  # a range's stretches: at most one per earlier range
    assert -(-sent // step) <= requests <= count * (count + 1) // 2 + sent // step


def test_a_range_copies_what_an_earlier_one_wrote_and_fetches_the_rest_in_steps() -> None:
    # the second range: 0-4 fetched (1 request), 4-10 copied, 10-19 fetched (3 of 4 bytes)
    assert ranged_cost([((4, 10),), ((0, 19),)], step=4) == (19, 2 + 1 + 3)
    assert ranged_cost([((0, 19),), ((4, 10),)], step=4) == (19, 5)  # all copied


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(1, 9), min_size=1, max_size=12),
    nodes=st.integers(1, 3),
    per_node=st.integers(2, 3),
    parts_per_rank=st.integers(1, 3),
    seed=st.integers(0, 9),
    epochs=st.integers(1, 3),
)
def test_with_a_world_size_dividing_the_samples_a_rank_reads_the_shards_it_lists_alone(
    counts: list[int], nodes: int, per_node: int, parts_per_rank: int, seed: int, epochs: int
) -> None:
    # The plan skips finding which ranks read each shard when W divides N: each sample has
    # one rank, so the costs are those found with every rank's shards located.
    world = nodes * per_node
    counts[0] += world - sum(counts) % world  # W divides the samples
    order = ShardOrder(counts, seed, True, 0, 0, world * parts_per_rank, "run")
    sizes = np.array(counts, dtype=np.int64) * 4096
    fetches = [node_fetches(order, world, [rank], 0) for rank in range(world)]
    spans = rank_spans(fetches, lambda shard: _equal_samples(shard, order.counts, sizes))
    ranks = Cluster(world, 1, 2, 0)
    readers: list[set[int]] = [set() for _ in range(world)]
    for epoch in range(epochs):
        for rank, shards in enumerate(parts_sets(order, epoch, ranks, sum(counts))):
            readers[rank].update(shards.tolist())
    assert node_costs(spans, readers, per_node, 1 << 20) == node_costs(
        spans, None, per_node, 1 << 20
    )
