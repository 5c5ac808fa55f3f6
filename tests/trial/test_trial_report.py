"""The trial's metrics log (detsamplers/trial/_report.py).

Rank 0 appends one JSON line per report to ``checkpoint_dir/metrics.jsonl`` (a resumed run
appends after the lines already there) and prints it; every other rank writes, prints and
creates nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.trial._report import Reporter, _format


def test_rank_0_appends_one_json_line_per_report_and_a_resumed_run_appends_after_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "checkpoints" / "run"
    first = Reporter(str(folder), chief=True, initial=0, total=4)
    first.log("training", 2, {"loss": 0.5, "batches": 2})
    first.advance()
    first.close()
    resumed = Reporter(str(folder), chief=True, initial=2, total=4)
    resumed.log("validation", 4, {"val_loss": np.float32(0.25), "acc": torch.tensor(0.75)})
    resumed.close()
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"type": "training", "batches_trained": 2, "metrics": {"batches": 2, "loss": 0.5}},
        {"type": "validation", "batches_trained": 4, "metrics": {"acc": 0.75, "val_loss": 0.25}},
    ]
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "[batch 2] training: batches=2 loss=0.5"
    assert printed[1].startswith("[batch 4] validation: acc=")


def test_a_metric_json_cannot_hold_is_refused_before_a_partial_line_is_written(
    tmp_path: Path,
) -> None:
    reporter = Reporter(str(tmp_path), chief=True, initial=0, total=None)
    reporter.log("training", 1, {"loss": 1.0})
    with pytest.raises(TypeError):
        reporter.log("training", 2, {"loss": object()})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["batches_trained"] for line in lines] == [1]


def test_other_ranks_write_print_and_create_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "not-made"
    reporter = Reporter(str(folder), chief=False, initial=0, total=10)
    reporter.advance()
    reporter.log("training", 1, {"loss": 1.0})
    reporter.close()
    assert not folder.exists()
    assert capsys.readouterr() == ("", "")


def test_a_tensor_or_numpy_metric_prints_as_the_number_the_json_line_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reporter = Reporter(str(tmp_path), chief=True, initial=0, total=None)
    metrics = {"acc": torch.tensor(0.75), "loss": np.float32(0.25), "seen": np.int64(3)}
    reporter.log("validation", 4, metrics)
    reporter.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["metrics"] == {
        "acc": 0.75,
        "loss": 0.25,
        "seen": 3.0,
    }
    assert capsys.readouterr().out == "[batch 4] validation: acc=0.75 loss=0.25 seen=3\n"


@settings(max_examples=50, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_a_scalar_tensor_metric_prints_as_its_float_does(value: float) -> None:
    assert _format({"m": torch.tensor(value)}) == _format({"m": float(torch.tensor(value))})
