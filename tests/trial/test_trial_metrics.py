"""Metric reduction, with the ranks simulated in one process, against Determined's reducers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from demo_trial import DemoTrial
from determined import pytorch as det_pytorch
from hypothesis import given
from hypothesis import strategies as st
from trial_helpers import metrics, run

from detsamplers.trial import MetricReducer, Reducer
from detsamplers.trial._context import TrialContext
from detsamplers.trial._distributed import DistributedContext
from detsamplers.trial._reducer import SimpleReducer, Window, WrappedReducer, merge, reducers_for


class Count(MetricReducer):
    def reset(self) -> None:
        self.count = 0

    def update(self, n: int) -> None:
        self.count += n

    def per_slot_reduce(self) -> int:
        return self.count

    def cross_slot_reduce(self, per_slot_metrics: Sequence[Any]) -> list[int]:
        return list(per_slot_metrics)


RANKS = st.lists(
    st.lists(st.tuples(st.floats(-1e3, 1e3), st.integers(1, 9)), min_size=1, max_size=5),
    min_size=1,
    max_size=4,
)


def windows(ranks: list[list[tuple[float, int]]]) -> list[dict[str, Any]]:
    out = []
    for batches in ranks:
        window = Window()
        for value, size in batches:
            window.add({"loss": value}, size)
        out.append(window.partial())
    return out


@given(RANKS)
def test_the_reduced_mean_is_the_mean_over_records_for_any_split_across_ranks(
    ranks: list[list[tuple[float, int]]],
) -> None:
    flat = [(v, n) for batches in ranks for v, n in batches]
    expected = sum(v * n for v, n in flat) / sum(n for _, n in flat)
    assert merge(windows(ranks))["loss"] == pytest.approx(expected, rel=1e-9, abs=1e-9)


@given(RANKS, st.sampled_from(["SUM", "MAX", "MIN"]))
def test_sum_max_and_min_reduce_as_determined_reduces_them_over_ranks(
    ranks: list[list[tuple[float, int]]], name: str
) -> None:
    ours = merge(windows(ranks), {"loss": Reducer[name]})["loss"]
    theirs_reducer = det_pytorch.Reducer[name]
    per_rank = [
        det_pytorch._simple_reduce_metrics(theirs_reducer, np.array([v for v, _ in batches]))
        for batches in ranks
    ]
    theirs = det_pytorch._simple_reduce_metrics(
        theirs_reducer, np.array(per_rank), [len(b) for b in ranks]
    )
    assert ours == pytest.approx(float(theirs), rel=1e-9, abs=1e-9)


@given(st.lists(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=5), min_size=1, max_size=4))
def test_avg_matches_determined_when_every_batch_has_the_same_length(
    ranks: list[list[float]],
) -> None:
    ours = merge(windows([[(v, 4) for v in batches] for batches in ranks]))["loss"]
    per_rank = [np.average(np.array(batches)) for batches in ranks]
    theirs = det_pytorch._simple_reduce_metrics(
        det_pytorch.Reducer.AVG, np.array(per_rank), [len(b) for b in ranks]
    )
    assert ours == pytest.approx(float(theirs), rel=1e-9, abs=1e-9)


def test_the_reducer_enum_has_determineds_names_and_values() -> None:
    assert {r.name: r.value for r in Reducer} == {r.name: r.value for r in det_pytorch.Reducer}


@given(st.lists(st.lists(st.integers(0, 99), max_size=6), min_size=1, max_size=4))
def test_a_reducer_function_sees_every_ranks_values_in_determineds_interleaved_order(
    ranks: list[list[int]],
) -> None:
    ours, theirs = [], []
    for values in ranks:
        mine, det = SimpleReducer(list), det_pytorch._SimpleReducer(list)
        for value in values:
            mine.update(value)
            det.update(value)
        ours.append(mine.per_slot_reduce())
        theirs.append(det.per_slot_reduce())
    assert SimpleReducer(list).cross_slot_reduce(ours) == det.cross_slot_reduce(theirs)


def test_wrap_reducer_returns_an_object_with_update_and_honours_name() -> None:
    context = TrialContext({"global_batch_size": 4}, 0, DistributedContext())
    largest = context.wrap_reducer(max, name="largest")
    both = context.wrap_reducer(lambda v: {"low": min(v), "high": max(v)})
    for value in (3, 9, 1):
        largest.update(value)
        both.update(value)
    reduced = {}
    for entry in context.reducers:
        reduced.update(entry.cross_slot_reduce([entry.per_slot_reduce()]))
    assert reduced == {"largest": 9, "low": 1, "high": 9}


def test_a_named_reducer_returning_a_dict_and_an_unnamed_one_returning_a_value_are_refused() -> (
    None
):
    named = WrappedReducer(SimpleReducer(lambda v: {"a": 1}), "x", True, True)
    with pytest.raises(ValueError, match="name='x', so it should return one metric"):
        named.cross_slot_reduce([[]])
    unnamed = WrappedReducer(SimpleReducer(len), None, True, True)
    with pytest.raises(ValueError, match="name=None, so it should return a dict"):
        unnamed.cross_slot_reduce([[]])


def test_an_evaluation_reducer_dict_must_name_every_metric() -> None:
    assert reducers_for(Reducer.MAX, ["a", "b"]) == {"a": Reducer.MAX, "b": Reducer.MAX}
    with pytest.raises(ValueError, match=r"names \['a'\] and evaluate_batch returned \['a', 'b'\]"):
        reducers_for({"a": Reducer.SUM}, ["a", "b"])
    with pytest.raises(TypeError, match=r"should return a detsamplers\.trial\.Reducer"):
        reducers_for("avg", ["a"])


def test_a_metric_that_is_not_a_scalar_is_refused_with_the_fix() -> None:
    window = Window()
    with pytest.raises(ValueError, match=r"shape \(2,\); reduce it in the trial or with wrap"):
        window.add({"loss": torch.zeros(2)}, 1)
    with pytest.raises(TypeError, match="metric 'name' should be a number"):
        window.add({"name": "x"}, 1)


def test_the_trainer_reduces_with_the_wrapped_reducers_and_writes_json_lines(
    tmp_path: Path,
) -> None:
    class Counted(DemoTrial):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            self.records = context.wrap_reducer(Count(), "records", for_validation=False)
            self.largest = context.wrap_reducer(max, name="largest", for_training=False)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            self.records.update(len(batch[2]))
            return super().train_batch(batch, epoch_idx, batch_idx)

        def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            self.largest.update(int(batch[2].max()))
            return super().evaluate_batch(batch, batch_idx)

    run(str(tmp_path), 5, trial_class=Counted)
    rows = metrics(str(tmp_path))
    training = [row for row in rows if row["type"] == "training"]
    validation = [row for row in rows if row["type"] == "validation"]
    # A window ends at every period: checkpoint 3, validation 4, reporting 5 (= the end).
    assert [row["batches_trained"] for row in training] == [3, 4, 5]
    assert [row["metrics"]["records"] for row in training] == [[24], [8], [8]]
    assert set(training[0]["metrics"]) == {"records", "loss", "accuracy"}
    assert [row["batches_trained"] for row in validation] == [4, 5]
    assert validation[0]["metrics"]["largest"] == 63
    assert set(validation[0]["metrics"]) == {"largest", "validation_loss", "validation_accuracy"}


def test_evaluation_reducer_picks_each_validation_metrics_reduction(tmp_path: Path) -> None:
    class Summed(DemoTrial):
        def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            return {"records": len(batch[2]), "first": int(batch[2][0])}

        def evaluation_reducer(self) -> dict[str, Reducer]:
            return {"records": Reducer.SUM, "first": Reducer.MIN}

    run(str(tmp_path), 2, trial_class=Summed)
    validation = [row for row in metrics(str(tmp_path)) if row["type"] == "validation"]
    assert validation[-1]["metrics"] == {"records": 64.0, "first": 0.0}
