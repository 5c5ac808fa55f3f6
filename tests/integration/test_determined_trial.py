"""detsamplers inside Determined's own PyTorchTrial, trained by the real local Trainer on CPU.

Each training run is a fresh ``python this_file.py`` process, as a restarted trial is on a
cluster; this also keeps Determined's process-wide state (a SIGUSR1 handler, warning filters,
some 1,300 imported modules) out of the pytest process. Determined is imported only there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

N_RECORDS = 40
GLOBAL_BATCH_SIZE = 4  # one slot locally, so also the per-slot batch size
BATCHES_PER_EPOCH = N_RECORDS // GLOBAL_BATCH_SIZE
TOTAL_BATCHES = 25  # two and a half epochs
RESUME_AT = 13  # mid-way through the second epoch
# Locally, context.get_trial_seed() raises "Trial seed not set."; a cluster sets one per trial.
SEED = 1234


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    # Local mode stores checkpoints in appdirs.user_data_dir("determined").
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    # Determined 0.38.1 pickles numpy RNG state into state_dict.pth, which torch>=2.6's
    # torch.load(weights_only=True) default refuses on resume.
    env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    return env


def _start(tmp_path: Path, name: str, *args: str) -> tuple[subprocess.Popen[str], Path]:
    # Local mode copies the working directory into every checkpoint's code/: start from an
    # empty one.
    cwd = tmp_path / f"cwd-{name}"
    cwd.mkdir()
    out = tmp_path / f"{name}.json"
    command = [sys.executable, __file__, "--out", str(out), *args]
    log = (tmp_path / f"{name}.log").open("w")
    process = subprocess.Popen(
        command, cwd=cwd, env=_env(tmp_path), stdout=log, stderr=subprocess.STDOUT, text=True
    )
    log.close()
    return process, out


def _finish(process: subprocess.Popen[str], out: Path, timeout: float = 120) -> dict[str, Any]:
    try:
        returncode = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    log = out.with_suffix(".log").read_text()
    assert returncode == 0, f"{out.stem} run failed:\n{log[-4000:]}"
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _steps_completed(tmp_path: Path, uuid: str) -> int:
    """What the checkpoint's metadata.json says, as Determined reports it to the master."""
    metadata = json.loads((tmp_path / "data" / "determined" / uuid / "metadata.json").read_text())
    return int(metadata["steps_completed"])


@pytest.mark.subprocess
def test_a_resumed_determined_trial_sees_exactly_the_batches_the_uninterrupted_run_saw_next(
    tmp_path: Path,
) -> None:
    pytest.importorskip("determined")
    # The uninterrupted run and the first part of the interrupted one share a process (each
    # its own init and trainer); the resume, as a restarted trial, is a process of its own.
    first_out = tmp_path / "first.json"
    full = _finish(
        *_start(
            tmp_path,
            "full",
            "--max-batches",
            str(TOTAL_BATCHES),
            "--then-out",
            str(first_out),
            "--then-max-batches",
            str(RESUME_AT),
        ),
        timeout=240,  # two runs
    )
    first = json.loads(first_out.read_text())

    uuid = first["checkpoints"][-1]
    steps_completed = _steps_completed(tmp_path, uuid)
    assert steps_completed == RESUME_AT
    # The cluster's report, emulated: a resumed trial is told the steps_completed of its latest
    # checkpoint. Local mode reports 0; see NOTE [ emulated cluster report ] below.
    second = _finish(
        *_start(
            tmp_path,
            "second",
            "--max-batches",
            str(TOTAL_BATCHES),
            "--latest-checkpoint",
            uuid,
            "--steps-completed",
            str(steps_completed),
        )
    )

    assert [batch_idx for batch_idx, _ in full["batches"]] == list(range(TOTAL_BATCHES))
    batches = [indices for _, indices in full["batches"]]
    assert all(len(batch) == GLOBAL_BATCH_SIZE for batch in batches)
    for epoch in range(TOTAL_BATCHES // BATCHES_PER_EPOCH):
        epoch_batches = batches[epoch * BATCHES_PER_EPOCH : (epoch + 1) * BATCHES_PER_EPOCH]
        seen = [index for batch in epoch_batches for index in batch]
        assert sorted(seen) == list(range(N_RECORDS)), f"epoch {epoch} is not a permutation"
        assert seen != list(range(N_RECORDS)), f"epoch {epoch} is not shuffled"
    assert batches[:BATCHES_PER_EPOCH] != batches[BATCHES_PER_EPOCH : 2 * BATCHES_PER_EPOCH]

    assert first["batches"] == full["batches"][:RESUME_AT]
    assert second["batches"] == full["batches"][RESUME_AT:]
    assert _steps_completed(tmp_path, second["checkpoints"][-1]) == TOTAL_BATCHES
    assert _steps_completed(tmp_path, full["checkpoints"][-1]) == TOTAL_BATCHES
    # What local mode itself reports on resume; if this starts failing, Determined reports the
    # real position locally and the emulation can go.
    assert second["steps_completed_reported_by_determined"] == {"context": 0, "controller": 0}


def _train(
    out: Path, max_batches: int, latest_checkpoint: str | None, steps_completed: int
) -> None:
    import torch
    from determined import pytorch

    import detsamplers

    seen: list[tuple[int, list[int]]] = []  # (batch_idx, the records' indices) per train_batch
    checkpoints: list[str] = []

    class Records(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
        """Record i is x = i / N (target 2x + 1), returned with its index i."""

        def __len__(self) -> int:
            return N_RECORDS

        def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
            return torch.tensor([index / N_RECORDS]), index

    class RecordCheckpoints(pytorch.PyTorchCallback):
        def on_checkpoint_upload_end(self, uuid: str) -> None:
            checkpoints.append(uuid)

    class IndexTrial(pytorch.PyTorchTrial):
        def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
            self.context = context
            context.experimental.disable_dataset_reproducibility_checks()
            self.model = context.wrap_model(torch.nn.Linear(1, 1))
            self.optimizer = context.wrap_optimizer(
                torch.optim.SGD(self.model.parameters(), lr=0.1)
            )

        def build_training_data_loader(self) -> torch.utils.data.DataLoader[Any]:
            dataset = Records()
            batches = detsamplers.make_batch_sampler(
                dataset,
                "training",
                shuffle_seed=SEED,
                num_workers=self.context.distributed.get_size(),
                rank=self.context.distributed.get_rank(),
                batch_size=self.context.get_per_slot_batch_size(),
                skip=self.context.get_initial_batch(),
            )
            return torch.utils.data.DataLoader(dataset, batch_sampler=batches)

        def build_validation_data_loader(self) -> torch.utils.data.DataLoader[Any]:
            dataset = Records()
            batches = detsamplers.make_batch_sampler(
                dataset,
                "validation",
                shuffle_seed=SEED,
                num_workers=self.context.distributed.get_size(),
                rank=self.context.distributed.get_rank(),
                batch_size=self.context.get_per_slot_batch_size(),
            )
            return torch.utils.data.DataLoader(dataset, batch_sampler=batches)

        def build_callbacks(self) -> dict[str, pytorch.PyTorchCallback]:
            return {"record_checkpoints": RecordCheckpoints()}

        def _loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
            x, _ = batch
            return torch.nn.functional.mse_loss(self.model(x), 2 * x + 1)

        def train_batch(
            self, batch: tuple[torch.Tensor, torch.Tensor], epoch_idx: int, batch_idx: int
        ) -> dict[str, float]:
            seen.append((batch_idx, batch[1].tolist()))
            loss = self._loss(batch)
            self.context.backward(loss)
            self.context.step_optimizer(self.optimizer)
            return {"loss": loss.item()}

        def evaluate_batch(
            self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
        ) -> dict[str, float]:
            return {"val_loss": self._loss(batch).item()}

    # NOTE [ emulated cluster report ]: on a cluster, Determined reads the master's
    # steps_completed (det.get_cluster_info().trial) in two places: det.pytorch.init() gives it
    # to the context as get_initial_batch(), and Trainer.fit() gives it to the trial controller
    # as the first batch_idx, from which max_length and the checkpoint and validation periods
    # are counted. Local mode passes 0 to both, so a resumed local run restarts the data and
    # trains max_length more batches. No public API takes the value, so inject it where the
    # cluster's value lands: the context's attribute, and the controller's keyword argument.
    reported: dict[str, int] = {}

    class ClusterController(pytorch._PyTorchTrialController):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            reported["controller"] = kwargs["steps_completed"]
            super().__init__(*args, **{**kwargs, "steps_completed": steps_completed})

    original = pytorch._PyTorchTrialController
    pytorch._PyTorchTrialController = ClusterController  # while this run lasts

    hparams = {"global_batch_size": GLOBAL_BATCH_SIZE}
    # enable_tensorboard_logging=False: the default needs the tensorboard package.
    try:
        with pytorch.init(hparams=hparams, enable_tensorboard_logging=False) as context:
            reported["context"] = context.get_initial_batch()
            context._steps_completed = steps_completed
            trainer = pytorch.Trainer(IndexTrial(context), context)
            trainer.fit(
                max_length=pytorch.Batch(max_batches),
                latest_checkpoint=latest_checkpoint,
                checkpoint_policy="all",  # the local Trainer's only policy; says so, no warning
            )
    finally:
        pytorch._PyTorchTrialController = original
    result = {
        "steps_completed_reported_by_determined": reported,
        "batches": seen,
        "checkpoints": checkpoints,
    }
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="One local run of the Determined trial above.")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-batches", type=int, required=True)
    parser.add_argument("--latest-checkpoint")
    parser.add_argument("--steps-completed", type=int, default=0)
    parser.add_argument("--then-out", type=Path, help="then a run from scratch, written here")
    parser.add_argument("--then-max-batches", type=int)
    args = parser.parse_args()
    _train(args.out, args.max_batches, args.latest_checkpoint, args.steps_completed)
    if args.then_out is not None:
        _train(args.then_out, args.then_max_batches, None, 0)
