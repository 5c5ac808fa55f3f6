"""The load-checkpoint phase alone (detsamplers/trial/_phase_load.py).

``LoadPhase`` is built with the context, the callbacks and ``weights_only``, and given a
checkpoint, this run's view of it and the clock: it checks them (NOTE [ checkpoint layout ],
NOTE [ gradient aggregation ]), then restores the weights, the callbacks' state and the RNGs
(NOTE [ trial RNG ]). Here it loads checkpoints that ``Trainer.fit`` wrote in this process.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from trial_helpers import as_if_saved_by

from detsamplers import ReproducibilityError
from detsamplers.loader import DataLoader
from detsamplers.trial import Batch, Callback, Trainer, Trial, TrialContext, init
from detsamplers.trial._checkpoint import read_checkpoint_metadata, samples_trained
from detsamplers.trial._clock import Clock
from detsamplers.trial._phase import Callbacks
from detsamplers.trial._phase_load import LoadPhase
from detsamplers.trial._schedule import BatchSchedule

# What the model phase agrees on (Trainer._agree): the fields a checkpoint is checked by.
AGREED = (
    "global_batch_size",
    "batch_size_schedule",
    "seed",
    "dataset_length",
    "dataset_growth",
    "data_seed",
    "aggregation_frequency",
)


class Counter(Callback):
    """A callback whose state the checkpoint holds."""

    def __init__(self) -> None:
        self.trained = 0

    def on_training_workload_end(self, avg_metrics: Any, batch_metrics: Any) -> None:
        self.trained += 1

    def state_dict(self) -> dict[str, Any]:
        return {"trained": self.trained}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.trained = state_dict["trained"]


class Line(Trial):
    def __init__(self, context: TrialContext) -> None:
        super().__init__(context)
        self.model = context.wrap_model(torch.nn.Linear(2, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), 0.1))
        self.counter = Counter()

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(torch.arange(32.0).reshape(16, 2), batch_size=4, shuffle=True)

    def train_batch(self, batch: torch.Tensor, epoch_idx: int, batch_idx: int) -> torch.Tensor:
        loss = self.model(batch).pow(2).mean()
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return loss

    def build_callbacks(self) -> dict[str, Callback]:
        return {"counter": self.counter}


Draws = tuple[torch.Tensor, torch.Tensor]


def _train(folder: Path, batches: int, aggregation_frequency: int = 1) -> tuple[Line, Draws]:
    """Train ``batches`` batches into ``folder``; the trial and the RNG draws that follow."""
    with init(hparams={"global_batch_size": 4}, aggregation_frequency=aggregation_frequency) as c:
        trial = Line(c)
        Trainer(trial, c).fit(Batch(batches), checkpoint_dir=str(folder), reporting_period=Batch(1))
        return trial, (torch.rand(3), torch.randn(2))


def _load(path: Path, aggregation_frequency: int = 1, weights_only: bool = True) -> Line:
    """A fresh trial, loaded from ``path`` by the load phase alone, on one rank."""
    saved = read_checkpoint_metadata(str(path))
    with init(hparams={"global_batch_size": 4}, aggregation_frequency=aggregation_frequency) as c:
        trial = Line(c)
        torch.manual_seed(1234)  # anything the phase does not restore would show
        phase = LoadPhase(c, Callbacks(trial.build_callbacks(), c.distributed), weights_only)
        schedule = BatchSchedule(4)
        clock = Clock.restore(schedule, aggregation_frequency, saved, samples_trained(saved))
        here = {name: saved[name] for name in AGREED}
        here["aggregation_frequency"] = aggregation_frequency
        loader = trial.build_training_data_loader()
        phase.load(str(path), saved, here, None, loader, clock)
        return trial


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Line, Draws]:
    folder = tmp_path_factory.mktemp("trained")
    trial, draws = _train(folder, 3)
    return folder / "batch-000003", trial, draws


@pytest.fixture
def copy(trained: tuple[Path, Line, Draws], tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained[0], tmp_path / "batch-000003"))


def test_the_load_phase_restores_the_weights_the_callbacks_and_the_rng_draws_that_follow(
    trained: tuple[Path, Line, Draws],
) -> None:
    path, trial, draws = trained
    loaded = _load(path)
    for a, b in zip(loaded.model.parameters(), trial.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert loaded.counter.trained == trial.counter.trained == 3
    assert torch.equal(torch.rand(3), draws[0]) and torch.equal(torch.randn(2), draws[1])


def test_the_load_phase_names_a_damaged_rank_file(copy: Path) -> None:
    rank = copy / "rank-0.pth"
    rank.write_bytes(rank.read_bytes()[:50])
    with pytest.raises(ValueError, match=r"cannot load \S+batch-000003/rank-0.pth: it is not a "):
        _load(copy)


def test_the_load_phase_names_a_damaged_state_file(copy: Path) -> None:
    state = copy / "state-dict.pth"
    state.write_bytes(state.read_bytes()[:-10])
    with pytest.raises(ValueError, match=r"cannot load \S+batch-000003/state-dict.pth: it is not"):
        _load(copy)


def test_the_load_phase_refuses_another_aggregation_frequency_naming_both(copy: Path) -> None:
    with pytest.raises(
        ReproducibilityError,
        match=r"batch-000003: aggregation_frequency is 1 in the checkpoint but 3 here",
    ):
        _load(copy, aggregation_frequency=3)


def test_the_load_phase_refuses_gradients_pending_from_another_world_size(tmp_path: Path) -> None:
    _train(tmp_path, 3, aggregation_frequency=2)  # batch 3 is between steps 2 and 4
    path = tmp_path / "batch-000003"
    assert read_checkpoint_metadata(str(path))["pending_gradients"] is True
    as_if_saved_by(path, 2)
    with pytest.raises(ReproducibilityError, match=r"on 1 ranks: it was saved on 2 ranks between"):
        _load(path, aggregation_frequency=2)


def test_the_load_phase_restores_the_gradients_pending_between_aggregation_steps(
    tmp_path: Path,
) -> None:
    trial, _ = _train(tmp_path, 3, aggregation_frequency=2)
    loaded = _load(tmp_path / "batch-000003", aggregation_frequency=2)
    pending = [p.grad for p in loaded.model.parameters()]
    assert all(g is not None and bool(g.abs().sum() > 0) for g in pending)
    for a, b in zip(pending, [p.grad for p in trial.model.parameters()], strict=True):
        assert a is not None and b is not None and torch.equal(a, b)
