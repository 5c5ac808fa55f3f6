"""A plan's cost of the byte ranges a node fetches (NOTE [ planned fetches ])."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.loader._wds._plan_fetches import ranged_cost

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
