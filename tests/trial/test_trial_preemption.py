"""Pause and resume in one process: signals, stop requests, "auto", retention, the metrics log.

The ranks' agreement, torchrun restarts and several nodes run as real processes in
test_trial_preemption_distributed.py.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from demo_trial import DemoTrial
from hypothesis import given, settings
from hypothesis import strategies as st
from trial_helpers import HPARAMS, identical, metrics, weights

from detsamplers.trial import (
    Batch,
    Callback,
    Trainer,
    _checkpoint,
    _preemption,
    find_latest_checkpoint,
    init,
)
from detsamplers.trial._preemption import StopAgreement, StopSignals
from detsamplers.trial._retention import complete_checkpoints

TOTAL = 11


def fit(
    checkpoint_dir: str,
    batches: int = TOTAL,
    trial_class: type[DemoTrial] = DemoTrial,
    latest_checkpoint: str | None = "auto",
    num_workers: int = 0,
    **options: Any,
) -> DemoTrial:
    """The demo trial on one rank: checkpoints every 3, validation every 4, reports every 5."""
    with init(hparams={**HPARAMS, "num_workers": num_workers}, seed=1) as context:
        trial = trial_class(context)
        Trainer(trial, context).fit(
            Batch(batches),
            checkpoint_period=Batch(3),
            validation_period=Batch(4),
            checkpoint_dir=checkpoint_dir,
            latest_checkpoint=latest_checkpoint,
            reporting_period=Batch(5),
            **options,
        )
    return trial


def signalled_at(batch: int, signum: int = signal.SIGTERM) -> type[DemoTrial]:
    class Signalled(DemoTrial):
        def train_batch(self, data: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            if batch_idx == batch:
                os.kill(os.getpid(), signum)
            return super().train_batch(data, epoch_idx, batch_idx)

    return Signalled


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoTrial, list[dict[str, Any]]]:
    folder = str(tmp_path_factory.mktemp("straight"))
    return fit(folder), metrics(folder)


def rows_without_events(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in rows if row["type"] in ("training", "validation")]


def test_sigterm_pauses_fit_after_the_batch_with_a_checkpoint_and_restores_the_handler(
    tmp_path: Path,
) -> None:
    trial = fit(str(tmp_path), trial_class=signalled_at(6))
    assert trial.context.current_train_batch() == 6  # the last batch's index
    assert find_latest_checkpoint(str(tmp_path)) == str(tmp_path / "batch-000007")
    stop = metrics(str(tmp_path))[-1]
    assert (stop["type"], stop["batches_trained"], stop["metrics"]["reason"]) == (
        "stop",
        7,
        "signal",
    )
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_sigusr1_pauses_too_and_stop_signals_picks_the_signals(tmp_path: Path) -> None:
    paused = fit(str(tmp_path / "usr1"), trial_class=signalled_at(2, signal.SIGUSR1))
    assert paused.context.current_train_batch() == 2  # the last batch's index
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: None)  # ignored: no stop
    try:
        unpaused = fit(
            str(tmp_path / "usr2"),
            trial_class=signalled_at(2, signal.SIGUSR2),
            stop_signals=(signal.SIGTERM,),
        )
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert unpaused.context.current_train_batch() == TOTAL - 1


@settings(max_examples=6)
@given(stop_at=st.integers(0, TOTAL - 2))
def test_a_stop_at_any_batch_then_auto_resume_gives_the_uninterrupted_run(
    straight: tuple[DemoTrial, list[dict[str, Any]]], stop_at: int
) -> None:
    trial, rows = straight
    with tempfile.TemporaryDirectory() as folder:
        fit(folder, trial_class=signalled_at(stop_at))
        resumed = fit(folder)
        assert resumed.context.get_initial_batch() == stop_at + 1
        assert identical(weights(trial), weights(resumed))
        here = metrics(folder)
    # The metrics log holds every training window and validation once, as the straight run's
    # (windows also close at the stop, so compare the validations and the batches covered).
    training = [row["batches_trained"] for row in here if row["type"] == "training"]
    assert training == sorted(set(training)) and training[-1] == TOTAL
    assert [r for r in here if r["type"] == "validation"] == [
        r for r in rows if r["type"] == "validation"
    ]
    assert [r["batches_trained"] for r in here if r["type"] in ("stop", "resume")] == [
        stop_at + 1,
        stop_at + 1,
    ]


class GroupSignalled(DemoTrial):
    """SIGTERM to the loader workers and this process at batch 3, as ``killpg`` sends it.

    From another process: torch's workers exit quietly on a SIGTERM from their parent.
    """

    to_self = True

    def train_batch(self, data: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        if batch_idx == 3:
            pids = [str(child.pid) for child in multiprocessing.active_children()]
            pids += [str(os.getpid())] if self.to_self else []
            subprocess.run(["kill", "-TERM", *pids], check=True)
        return super().train_batch(data, epoch_idx, batch_idx)


@pytest.mark.workers
def test_sigterm_to_the_whole_process_group_spares_the_loader_workers(tmp_path: Path) -> None:
    straight = fit(str(tmp_path / "straight"), num_workers=1)
    paused = fit(str(tmp_path / "paused"), trial_class=GroupSignalled, num_workers=1)
    assert paused.context.current_train_batch() == 3  # the last batch's index
    resumed = fit(str(tmp_path / "paused"), num_workers=1)
    assert identical(weights(straight), weights(resumed))


@pytest.mark.workers
def test_unshielded_loader_workers_die_of_a_group_sigterm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The control for the test above: torch's workers die of a SIGTERM from a non-parent.
    # (To the workers only: a fit that fails after a signal of its own re-sends it.)
    class WorkersSignalled(GroupSignalled):
        to_self = False

    monkeypatch.setattr(_preemption, "shield_workers", lambda loader, signals: loader)
    with pytest.raises(RuntimeError, match="DataLoader worker"):
        fit(str(tmp_path), trial_class=WorkersSignalled, num_workers=1)


def test_a_second_signal_during_the_checkpoint_write_does_not_corrupt_it(
    straight: tuple[DemoTrial, list[dict[str, Any]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write = _checkpoint._write_torch
    interrupted: list[str] = []

    def signalled_write(obj: Any, path: str) -> None:
        if "batch-000005" in path and path.endswith("state-dict.pth"):
            os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM mid-write
            interrupted.append(path)
        write(obj, path)

    monkeypatch.setattr(_checkpoint, "_write_torch", signalled_write)
    fit(str(tmp_path), trial_class=signalled_at(4))
    monkeypatch.undo()
    assert interrupted and find_latest_checkpoint(str(tmp_path)) == str(tmp_path / "batch-000005")
    assert identical(weights(straight[0]), weights(fit(str(tmp_path))))


@pytest.mark.parametrize("where", ["train_batch", "evaluate_batch", "callback"])
def test_set_stop_requested_stops_after_that_batch_with_a_checkpoint(
    straight: tuple[DemoTrial, list[dict[str, Any]]], tmp_path: Path, where: str
) -> None:
    class EarlyStop(Callback):
        def __init__(self, context: Any) -> None:
            self.context = context

        def on_validation_end(self, metrics: dict[str, Any]) -> None:
            self.context.set_stop_requested(metrics["validation_loss"] < 10)

    class Stopping(DemoTrial):
        def train_batch(self, data: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            if where == "train_batch" and batch_idx == 3:  # the batch before the validation
                self.context.set_stop_requested(True)
            return super().train_batch(data, epoch_idx, batch_idx)

        def evaluate_batch(self, batch: Any) -> dict[str, Any]:
            if where == "evaluate_batch":
                self.context.set_stop_requested(True)
            return super().evaluate_batch(batch, 0)

        def build_callbacks(self) -> dict[str, Callback]:
            return {"early": EarlyStop(self.context)} if where == "callback" else {}

    stopped = fit(str(tmp_path), trial_class=Stopping)
    assert stopped.context.get_stop_requested()
    assert stopped.context.current_train_batch() == 3  # batch index 3 was the last
    assert metrics(str(tmp_path))[-1]["metrics"]["reason"] == "stop requested"
    assert find_latest_checkpoint(str(tmp_path)) == str(tmp_path / "batch-000004")
    assert identical(weights(straight[0]), weights(fit(str(tmp_path))))


def test_auto_starts_fresh_without_a_complete_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "batch-000009").mkdir()  # half written: no metadata
    (tmp_path / ".batch-000010.tmp").mkdir()
    trial = fit(str(tmp_path), batches=2)
    assert trial.context.get_initial_batch() == 0


def test_a_crash_and_auto_resume_leave_every_metrics_row_once_as_the_straight_run(
    straight: tuple[DemoTrial, list[dict[str, Any]]], tmp_path: Path
) -> None:
    class Crashing(DemoTrial):
        def train_batch(self, data: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            if batch_idx == 5:  # after the training row at 5, past the checkpoint at 4
                raise RuntimeError("node lost")
            return super().train_batch(data, epoch_idx, batch_idx)

    with pytest.raises(RuntimeError, match="node lost"):
        fit(str(tmp_path), trial_class=Crashing)
    assert [row["batches_trained"] for row in metrics(str(tmp_path))][-1] == 5
    fit(str(tmp_path))
    rows = metrics(str(tmp_path))
    assert rows_without_events(rows) == rows_without_events(straight[1])
    assert [(row["type"], row["batches_trained"]) for row in rows if row["type"] == "resume"] == [
        ("resume", 4)
    ]


def folders(path: Path) -> list[str]:
    return sorted(name for name in os.listdir(path) if name.startswith("batch-"))


def test_checkpoint_policy_decides_which_validations_checkpoint(tmp_path: Path) -> None:
    fit(str(tmp_path / "all"), checkpoint_policy="all")  # default "best" without a metric
    fit(str(tmp_path / "none"), checkpoint_policy="none")
    assert folders(tmp_path / "all") == [f"batch-{b:06d}" for b in (3, 4, 6, 8, 9, 11)]
    assert folders(tmp_path / "none") == [f"batch-{b:06d}" for b in (3, 6, 9, 11)]


def test_checkpoint_policy_best_checkpoints_only_improving_validations(tmp_path: Path) -> None:
    class Worsening(DemoTrial):
        def evaluate_batch(self, batch: Any) -> dict[str, Any]:  # 4: 4.0, then 8: 8.0
            return {"score": float(self.context.current_train_batch() + 1)}

    fit(str(tmp_path / "low"), trial_class=Worsening, searcher_metric="score")
    assert "batch-000008" not in folders(tmp_path / "low")
    fit(
        str(tmp_path / "high"),
        trial_class=Worsening,
        searcher_metric="score",
        smaller_is_better=False,
        checkpoint_policy="best",
    )
    assert "batch-000008" in folders(tmp_path / "high")


def test_keep_last_and_keep_best_delete_old_checkpoints_only_after_a_newer_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Scored(DemoTrial):
        def evaluate_batch(self, batch: Any) -> dict[str, Any]:  # best at batch 4
            return {"score": abs(self.context.current_train_batch() + 1 - 4.0)}

    seen: list[list[str]] = []
    save = _checkpoint.save

    def watched_save(checkpoint_dir: str, *args: Any) -> str:
        seen.append(folders(Path(checkpoint_dir)) if os.path.isdir(checkpoint_dir) else [])
        return save(checkpoint_dir, *args)

    monkeypatch.setattr(_checkpoint, "save", watched_save)
    fit(str(tmp_path), trial_class=Scored, searcher_metric="score", keep_last=1, keep_best=1)
    assert folders(tmp_path) == ["batch-000004", "batch-000011"]
    assert all(len(before) >= 1 for before in seen[1:])  # never down to none while writing
    metadata = json.loads((tmp_path / "batch-000004" / "metadata.json").read_text())
    assert metadata["validation_metrics"] == {"score": 0.0}


def test_retention_never_deletes_the_checkpoint_being_resumed(tmp_path: Path) -> None:
    fit(str(tmp_path), batches=9)  # 3, 4, 6, 8, 9
    older = str(tmp_path / "batch-000004")
    fit(str(tmp_path), batches=7, latest_checkpoint=older, keep_last=1)
    # 4 is pinned by the resume, 7 is the newest of this history; 8 and 9 lie past it
    assert folders(tmp_path) == [f"batch-{b:06d}" for b in (4, 7, 8, 9)]
    assert [row[0] for row in complete_checkpoints(str(tmp_path))] == [4, 7, 8, 9]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"checkpoint_policy": "some"}, ValueError, "checkpoint_policy should be one of 'best'"),
        ({"keep_last": 0}, ValueError, "keep_last should be a positive integer value"),
        ({"keep_last": 1, "keep_best": 1}, ValueError, "keep_best needs a searcher_metric"),
        ({"keep_best": 1, "searcher_metric": "x"}, ValueError, "together with keep_last"),
        ({"smaller_is_better": 1}, TypeError, "smaller_is_better should be a bool"),
        ({"stop_signals": (signal.SIGKILL,)}, ValueError, "cannot hold SIGKILL"),
        ({"stop_signals": "SIGTERM"}, TypeError, "stop_signals should be a tuple of signals"),
        ({"searcher_metric": "accuracy"}, ValueError, "searcher_metric should name a validation"),
    ],
)
def test_bad_preemption_options_are_refused_naming_the_parameter(
    tmp_path: Path, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        fit(str(tmp_path), batches=4, **options)


def test_a_single_process_checks_for_a_stop_after_every_batch() -> None:
    from detsamplers.trial import DistributedContext

    agreement = StopAgreement(DistributedContext(), start=5, period=None)
    assert all(agreement.due(b) for b in range(6, 20))


def test_the_check_spacing_keeps_checks_under_one_percent_and_a_second_apart() -> None:
    from detsamplers.trial import DistributedContext

    agreement = StopAgreement(DistributedContext(), start=0, period=None)
    assert agreement._spacing(per_batch=0.001, cost=0.0002) == 20  # 0.2 ms check, 1 ms step
    assert agreement._spacing(per_batch=0.5, cost=0.0002) == 1
    assert agreement._spacing(per_batch=0.0001, cost=0.01) == 10_000  # capped at 1 s
    assert StopAgreement(DistributedContext(), 0, period=7)._spacing(1.0, 1.0) == 7


def test_stop_signals_outside_the_main_thread_leave_the_handlers_alone() -> None:
    import threading

    seen: list[Any] = []

    def enter() -> None:
        with StopSignals() as signals:
            seen.append(signal.getsignal(signal.SIGTERM))
            seen.append(signals.received)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert seen == [signal.SIG_DFL, None]


@pytest.mark.subprocess
def test_a_fit_that_fails_after_a_signal_lets_the_signal_end_the_process(tmp_path: Path) -> None:
    script = f"""
import os, signal, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from test_trial_preemption import fit
from demo_trial import DemoTrial

class Failing(DemoTrial):
    def train_batch(self, data, epoch_idx, batch_idx):
        os.kill(os.getpid(), signal.SIGTERM)
        raise RuntimeError("a peer died")

try:
    fit({str(tmp_path)!r}, trial_class=Failing)
except RuntimeError:
    print("the signal was swallowed")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, check=False)
    assert done.returncode == -signal.SIGTERM, done.stdout + done.stderr
