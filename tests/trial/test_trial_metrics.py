"""Metric reduction, with the ranks simulated in one process and through the trainer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from trial_helpers import metrics, run

from detsamplers.trial import MetricReducer
from detsamplers.trial._demo_trial import DemoTrial
from detsamplers.trial._reducer import ReducerEntry, Window, merge


class Count(MetricReducer):
    def reset(self) -> None:
        self.count = 0

    def update(self, n: int) -> None:
        self.count += n

    def per_slot_reduce(self) -> int:
        return self.count

    def cross_slot_reduce(self, per_slot_metrics: Sequence[Any]) -> list[int]:
        return list(per_slot_metrics)


@given(
    st.lists(
        st.lists(st.tuples(st.floats(-1e3, 1e3), st.integers(1, 9)), max_size=5),
        min_size=1,
        max_size=4,
    )
)
def test_the_reduced_mean_is_the_mean_over_records_for_any_split_across_ranks(
    ranks: list[list[tuple[float, int]]],
) -> None:
    windows = []
    for batches in ranks:
        window = Window([])
        for value, size in batches:
            window.add({"loss": value}, size)
        windows.append(window.partial())
    flat = [(v, n) for batches in ranks for v, n in batches]
    reduced = merge(windows, [])
    if not flat:
        assert reduced == {}
        return
    expected = sum(v * n for v, n in flat) / sum(n for _, n in flat)
    assert reduced["loss"] == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_custom_reducers_see_every_ranks_values_in_rank_order() -> None:
    counts = [Count(), Count()]
    partials = []
    for rank, count in enumerate(counts):
        entries = [
            ReducerEntry(count, "count", True, True),
            ReducerEntry(lambda values: sorted(values), "seen", True, True),
        ]
        window = Window(entries)
        count.update(rank + 2)
        window.add({"seen": 10 * rank, "loss": torch.tensor(1.0)}, 4)
        window.add({"seen": 10 * rank + 1, "loss": torch.tensor(3.0)}, 4)
        partials.append(window.partial())
    reduced = merge(partials, entries)
    assert reduced == {"loss": 2.0, "count": [2, 3], "seen": [0, 1, 10, 11]}


def test_a_metric_that_is_not_a_scalar_is_refused_with_the_fix() -> None:
    window = Window([])
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
            context.wrap_reducer(lambda values: max(values), "largest", for_training=False)

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            self.records.update(len(batch[2]))
            return super().train_batch(batch, epoch_idx, batch_idx)

        def evaluate_batch(self, batch: Any) -> dict[str, Any]:
            return {**super().evaluate_batch(batch), "largest": int(batch[2].max())}

    run(str(tmp_path), 5, trial_class=Counted)
    rows = metrics(str(tmp_path))
    training = [row for row in rows if row["type"] == "training"]
    validation = [row for row in rows if row["type"] == "validation"]
    # windows close at the checkpoint (3), the validation (4) and the end (5)
    assert [row["batches_trained"] for row in training] == [3, 4, 5]
    assert [row["metrics"]["records"] for row in training] == [[24], [8], [8]]
    assert set(training[0]["metrics"]) == {"records", "loss", "accuracy"}
    assert [row["batches_trained"] for row in validation] == [4, 5]
    assert validation[0]["metrics"]["largest"] == 63
    assert set(validation[0]["metrics"]) == {"largest", "validation_loss", "validation_accuracy"}
