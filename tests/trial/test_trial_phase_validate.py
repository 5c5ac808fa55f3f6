"""The validate phase alone (detsamplers/trial/_phase_validate.py).

``ValidatePhase`` is built with the trial, the context, the callbacks and the stop signals;
``validate`` evaluates this rank's shard under a forked RNG, reduces the metrics
(NOTE [ metric reduction ]), logs them and returns them; ``metrics_at`` answers the save
phase's question: did this fit validate at that batch, and with what.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.loader import DataLoader
from detsamplers.trial import Callback, Reducer, Trial, TrialContext, init
from detsamplers.trial._phase import Callbacks
from detsamplers.trial._phase_validate import ValidatePhase, validates
from detsamplers.trial._preemption import StopSignals
from detsamplers.trial._report import Reporter


class Seen(Callback):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_validation_start(self) -> None:
        self.events.append("start")

    def on_validation_epoch_end(self, outputs: list[Any]) -> None:
        self.events.append(len(outputs))

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        self.events.append(metrics)


class Values(Trial):
    """Validates on ``values`` in batches of ``batch``: each batch's mean is its metric."""

    def __init__(
        self, context: TrialContext, values: list[float], batch: int, reducer: Any = Reducer.AVG
    ) -> None:
        super().__init__(context)
        self.values, self.batch, self.reducer = values, batch, reducer

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(torch.zeros(4, 1), batch_size=4)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        return {}

    def build_validation_data_loader(self) -> DataLoader:
        data = torch.tensor(self.values, dtype=torch.float64).reshape(-1, 1)
        return DataLoader(data, batch_size=self.batch)

    def evaluate_batch(self, batch: torch.Tensor) -> dict[str, Any]:
        return {"x": batch.mean(), "noise": torch.rand(())}

    def evaluation_reducer(self) -> Any:
        return self.reducer


def _validate(trial: Values, batches: int = 5, test_mode: bool = False, folder: str = "") -> Any:
    context = trial.context
    callbacks = Callbacks(trial.build_callbacks(), context.distributed)
    phase = ValidatePhase(trial, context, callbacks, StopSignals(()))
    reporter = Reporter(folder, chief=bool(folder), initial=0, total=None)
    return phase, phase.validate(reporter, batches, test_mode)


@pytest.mark.parametrize(
    ("reducer", "expected"),
    [(Reducer.AVG, 3.0), (Reducer.SUM, 10.0), (Reducer.MAX, 5.0), (Reducer.MIN, 1.5)],
)
def test_validate_reduces_the_batch_metrics_with_the_trials_reducer(
    reducer: Reducer, expected: float
) -> None:
    # Batches [1, 2], [3, 4], [5]: means 1.5, 3.5, 5.0; AVG is the mean over the 5 records.
    with init() as context:
        _, metrics = _validate(
            Values(context, [1, 2, 3, 4, 5], 2, {"x": reducer, "noise": reducer})
        )
    assert metrics["x"] == pytest.approx(expected)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=20),
    st.integers(1, 6),
)
def test_the_average_of_a_validation_is_the_mean_over_records_whatever_the_batches(
    values: list[float], batch: int
) -> None:
    with init() as context:
        _, metrics = _validate(Values(context, values, batch))
    assert metrics["x"] == pytest.approx(sum(values) / len(values), rel=1e-9, abs=1e-6)


def test_validate_logs_returns_and_remembers_the_metrics_and_tells_the_callbacks(
    tmp_path: Path,
) -> None:
    seen = Seen()
    with init() as context:
        trial = Values(context, [1, 2, 3, 4, 5], 2)
        trial.build_callbacks = lambda: {"seen": seen}  # type: ignore[method-assign]
        phase, metrics = _validate(trial, batches=7, folder=str(tmp_path))
    assert seen.events == ["start", 3, metrics]
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert row == {"type": "validation", "batches_trained": 7, "metrics": row["metrics"]}
    assert row["metrics"]["x"] == pytest.approx(3.0)
    assert phase.metrics_at(7) is metrics and phase.metrics_at(6) is None


def test_test_mode_evaluates_one_batch() -> None:
    seen = Seen()
    with init() as context:
        trial = Values(context, [1, 2, 3, 4, 5], 2)
        trial.build_callbacks = lambda: {"seen": seen}  # type: ignore[method-assign]
        _, metrics = _validate(trial, test_mode=True)
    assert seen.events[1] == 1 and metrics["x"] == pytest.approx(1.5)


def test_validate_leaves_the_training_rng_where_it_was() -> None:
    with init() as context:
        trial = Values(context, [1, 2, 3], 1)
        torch.manual_seed(7)
        _validate(trial)  # evaluate_batch draws from torch's RNG
        after = torch.rand(4)
    torch.manual_seed(7)
    assert torch.equal(after, torch.rand(4))


def test_metric_names_that_change_between_batches_are_an_error_naming_both() -> None:
    class Changing(Values):
        def evaluate_batch(self, batch: torch.Tensor) -> dict[str, Any]:
            return {"x": 1.0} if float(batch[0, 0]) < 2 else {"y": 1.0}

    with (
        init() as context,
        pytest.raises(
            ValueError,
            match=r"evaluate_batch should return the same metric names for every batch, but got "
            r"\['x'\] and then \['y'\]",
        ),
    ):
        _validate(Changing(context, [1, 2, 3], 1))


def test_a_trial_validates_only_with_a_validation_loader_and_an_evaluate_method() -> None:
    class NoLoader(Trial):
        def evaluate_batch(self, batch: Any) -> dict[str, Any]:
            return {}

    class NoEvaluate(Trial):
        def build_validation_data_loader(self) -> Any:
            return []

    with init() as context:
        assert validates(Values(context, [1.0], 1))
        assert not validates(NoLoader(context)) and not validates(NoEvaluate(context))
