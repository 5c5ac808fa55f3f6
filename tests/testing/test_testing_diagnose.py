"""The mismatch probe names warm-ups and counters kept on the class or in a module global."""

from __future__ import annotations

from typing import Any

import pytest
import testing_pipelines as pipelines
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.loader import DataLoader
from detsamplers.testing import Config, check_resume
from detsamplers.testing._diagnose import likely_causes
from detsamplers.testing._watch import Watch

WORKERS = [Config(num_workers=0), Config(num_workers=2)]


@pytest.fixture(autouse=True)
def fresh_counters() -> Any:
    """Each test starts the class-level and module-level warm-ups from zero, as a process."""
    pipelines.ClassWarmUp.calls = 0
    pipelines.FETCHED = 0
    yield
    pipelines.ClassWarmUp.calls = 0
    pipelines.FETCHED = 0


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (
            pipelines.warm_up,
            r"batch 2 on rank 0 \(the 1st after the resume\) differs .* Likely cause: the "
            r"dataset changes during a warm-up: WarmUp\[\d+\] returned the same on its first 5 "
            r"calls and something else on call 6, under the same RNG state .*; "
            r"WarmUp.__getitem__ changed WarmUp's attribute self.calls \(from 0 to 6\); a "
            "resumed run starts the warm-up over",
        ),
        (
            pipelines.class_warm_up,
            r"two uninterrupted runs .* differ in batch 0 .* Likely cause: "
            r"ClassWarmUp.__getitem__ changes the class attribute ClassWarmUp.calls \(from \d+ "
            r"to \d+\), which outlives the dataset: every loader built in this process shares "
            "it",
        ),
        (
            pipelines.global_warm_up,
            r"Likely cause: GlobalWarmUp.__getitem__ changes the module global "
            r"testing_pipelines.FETCHED \(from \d+ to \d+\), which outlives the dataset",
        ),
        (
            pipelines.warm_collate,
            r"at \['x'\]: .* Likely cause: collate_fn \(WarmCollate\) changes during a warm-up: "
            r"WarmCollate returned the same on its first 2 calls and something else on call 3"
            r".*; WarmCollate changed WarmCollate's attribute self.batches \(from 0 to 3\)",
        ),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_warm_ups_and_counters_on_the_class_or_module_are_named(factory: Any, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check_resume(factory, pauses=[2, 4], batches=6, resume=WORKERS)


def test_a_counter_that_keeps_counting_names_the_class_attribute_it_keeps() -> None:
    class Counting(pipelines.Plain):
        served = 0

        def __getitem__(self, index: int) -> dict[str, Any]:
            Counting.served += 1
            return {"x": float(index + Counting.served)}

    def factory(rank: int, world_size: int, num_workers: int) -> Any:
        return DataLoader(Counting(), batch_size=4, shuffle=True, seed=1, num_workers=num_workers)

    with pytest.raises(
        AssertionError,
        match=r"Likely cause: the dataset keeps state between calls: Counting\[\d+\] returned "
        r"different records on two calls .*; __getitem__ changed the class attribute "
        r".*Counting.served \(from \d+ to \d+\), shared by every loader built in the process",
    ):
        check_resume(factory, pauses=[2], batches=4)


def test_the_probe_puts_class_attributes_and_globals_back() -> None:
    pipelines.ClassWarmUp.calls = 7
    pipelines.FETCHED = 3
    dataset = pipelines.GlobalWarmUp()
    watch = Watch(pipelines.ClassWarmUp(), pipelines.ClassWarmUp.__getitem__)
    globals_watch = Watch(dataset, type(dataset).__getitem__)
    pipelines.ClassWarmUp()[1]
    dataset[1]
    assert [c.where for c in watch.changes()] == ["the class attribute ClassWarmUp.calls"]
    assert [c.describe() for c in globals_watch.changes()] == [
        "the module global testing_pipelines.FETCHED (from 3 to 4)"
    ]
    watch.put_back()
    globals_watch.put_back()
    assert (pipelines.ClassWarmUp.calls, pipelines.FETCHED) == (7, 3)


@settings(max_examples=6)
@given(warm=st.integers(1, 40))
def test_the_repeat_probe_finds_a_warm_up_of_any_length_within_its_budget(warm: int) -> None:
    def build() -> Any:
        loader = DataLoader(pipelines.WarmUp(warm), batch_size=4, shuffle=True, seed=1)
        return loader.get_data_loader(repeat=True)

    causes = likely_causes(build, workers=False, changed_grid=False, calls=48)
    if warm == 1:
        assert causes[0].startswith("the dataset keeps state between calls: WarmUp[")
    else:
        assert causes[0].startswith("the dataset changes during a warm-up: WarmUp[")
        assert f"first {warm} calls and something else on call {warm + 1}," in causes[0]
    # A probe of fewer calls than the warm-up cannot see it: the budget is the straight run's.
    if warm >= 2:
        assert likely_causes(build, workers=False, changed_grid=False, calls=warm) == []


class CountedAugmented(pipelines.Augmented):
    """Global RNG draws in torch's loader, plus a class-level counter the records never show."""

    fetched = 0

    def __getitem__(self, index: int) -> dict[str, Any]:
        CountedAugmented.fetched += 1
        return super().__getitem__(index)


def test_a_shared_counter_the_records_do_not_show_comes_after_the_cause_they_do_show() -> None:
    def build() -> Any:
        return pipelines._torch_loader(CountedAugmented(), 0, 1, 0)

    causes = likely_causes(build, workers=False, changed_grid=False, calls=16)
    assert causes[0].startswith("CountedAugmented.__getitem__ draws from the global RNG")
    assert causes[-1].startswith(
        "CountedAugmented.__getitem__ changes the class attribute CountedAugmented.fetched"
    )
