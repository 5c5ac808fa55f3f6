"""WebDatasetMix progress with parts: all lanes at once, equal to the per-lane formula."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_wds_mix_parts import SETS, mix, write_set

from detsamplers import MixSampler
from detsamplers.loader._wds.mix._mixture_lanes import LaneOrder
from detsamplers.loader._wds.order._shard_order import ShardOrder

FIXTURE = Path(__file__).parent / "fixtures" / "mix_parts_states.json"


def per_lane(order: LaneOrder, position: int) -> np.ndarray[Any, Any]:
    """``lane_counts`` as it was computed before: one ``MixSampler.progress`` per lane."""
    parts, out = order.parts, np.zeros((order.parts, order.sets), dtype=np.int64)
    for u in range(parts):
        reached = (position - u + parts - 1) // parts
        s = max(s for s in range(len(order.laws)) if reached >= order.first[s][u])
        base = np.zeros(order.sets, dtype=np.int64)
        for earlier in range(s):  # what the lane gave each set in each earlier segment
            length = int(order.first[earlier + 1][u] - order.first[earlier][u])
            base += consumed(order, earlier, u, length)
        out[u] = base + consumed(order, s, u, int(reached - order.first[s][u]))
    return out


def consumed(order: LaneOrder, s: int, u: int, length: int) -> np.ndarray[Any, Any]:
    law, counts = order.laws[s], order.counts[s]
    w, o = divmod(length, law.window)
    got = np.asarray(law.progress((w * order.parts + u) * law.window + o)["consumed"])
    out = np.zeros(order.sets, dtype=np.int64)
    out[: len(got)] = got - (w * (order.parts - 1) + u) * counts
    return out


@st.composite
def lane_orders(draw: st.DrawFn) -> LaneOrder:
    parts = draw(st.integers(1, 40))
    sets = draw(st.integers(1, 3))
    counts = [draw(st.lists(st.integers(1, 9), min_size=1, max_size=4)) for _ in range(sets)]
    weights = [draw(st.floats(0.2, 1.0)) for _ in range(sets)]
    plan: list[tuple[int, list[float]]] = [(0, weights[: draw(st.integers(1, sets))])]
    if draw(st.booleans()):  # a later segment, which may bring in the remaining sets
        plan.append((draw(st.integers(1, 300)), [draw(st.floats(0.2, 1.0)) for _ in range(sets)]))
    window = draw(st.sampled_from([None, 16, 64]))
    seed = draw(st.integers(0, 2**32))
    orders = [ShardOrder(c, seed + i, True, 0, parts=parts) for i, c in enumerate(counts)]
    return LaneOrder(plan, window, seed, parts, orders)


@settings(max_examples=60, deadline=None)
@given(order=lane_orders(), positions=st.lists(st.integers(0, 10**9), min_size=1, max_size=4))
def test_every_lanes_counts_at_once_equal_the_per_lane_formula_at_any_position(
    order: LaneOrder, positions: list[int]
) -> None:
    for position in positions:
        assert order.lane_counts(position).tolist() == per_lane(order, position).tolist()
        assert order.progress(position) == per_lane(order, position).sum(axis=0).tolist()


@settings(max_examples=40, deadline=None)
@given(order=lane_orders(), position=st.integers(0, 600))
def test_the_lane_counts_are_the_positions_each_lane_gave_each_set(
    order: LaneOrder, position: int
) -> None:
    # Brute force from the order itself: which set each position before `position` read.
    sets, _ = order.stream(np.arange(position, dtype=np.int64))
    lanes = np.arange(position) % order.parts
    counted = np.zeros((order.parts, order.sets), dtype=np.int64)
    np.add.at(counted, (lanes, sets), 1)
    assert order.lane_counts(position).tolist() == counted.tolist()


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 50), min_size=1, max_size=4),
    seed=st.integers(0, 2**32),
    window=st.sampled_from([None, 10, 64]),
    later=st.integers(1, 500),
    positions=st.lists(st.integers(0, 10**7), min_size=1, max_size=30),
)
def test_a_mixtures_consumed_at_many_positions_is_its_progress_at_each(
    sizes: list[int], seed: int, window: int | None, later: int, positions: list[int]
) -> None:
    weights = [1.0 + i for i in range(len(sizes))]
    mixture = MixSampler(
        [range(n) for n in sizes],
        weights[:1] if len(sizes) > 1 else weights,
        seed,
        window=window,
        curriculum=[(later, weights)] if len(sizes) > 1 else (),
    )
    got = mixture.consumed_many(np.asarray(positions, dtype=np.int64)).tolist()
    assert got == [mixture.progress(p)["consumed"] for p in positions]


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    root = tmp_path_factory.mktemp("progress")
    return [write_set(root / f"set{c}", c, counts) for c, counts in enumerate(SETS)]


def test_states_saved_before_progress_was_vectorized_load_and_are_saved_bit_for_bit(
    urls: list[list[str]],
) -> None:
    # The fixture: main at 9d88f83 built mix(urls, **options) over test_wds_mix_parts's SETS
    # and saved its state_dict() after load_state_dict({**state, "position": p}) for p in
    # (0, 1, 5, 23, 31, 77, 130, 1001).
    saved = json.loads(FIXTURE.read_text())
    cases = {name: case for name, case in saved.items() if isinstance(case, dict)}
    assert len(cases) == 3
    for case in cases.values():
        for state in case["states"]:
            source = mix(urls, **case["options"])
            source.load_state_dict(state)
            again = source.state_dict()
            assert again["mixture"] == state["mixture"]  # the progress, bit for bit
            assert again == state  # and the whole state, while its format stays
