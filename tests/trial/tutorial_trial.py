r"""A trial written as Determined's mnist_pytorch tutorial is, with only the imports changed.

Its shape is the tutorial's (a conv net, ``evaluate_batch(batch, batch_idx)``, hparams
passed to the trial, no ``global_batch_size``), plus seed 004's AMP scaler, gradient
aggregation over 2 batches, a callback with every hook and a wrapped reducer. The data
are synthetic 12x12 "digits". One rank of a run::

    PYTHONPATH=tests/trial OMP_NUM_THREADS=1 python -m torch.distributed.run \
        --nproc_per_node=2 -m tutorial_trial --checkpoint-dir ckpt --record-dir rec \
        --max-batches 14

Every rank appends what it saw to ``<record-dir>``: ``batches-rank<r>.jsonl`` (a
fingerprint of each record of its share of each global batch) and ``hooks-rank<r>.jsonl``
(each callback hook, in order).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.utils.data as tud
from torch import nn

# The only lines that differ from a Determined trial: the imports.
from detsamplers.loader import DataLoader
from detsamplers.trial import (
    Batch,
    Callback,
    Epoch,
    Trainer,
    Trial,
    TrialContext,
    find_latest_checkpoint,
    init,
)

HPARAMS = {"learning_rate": 1.0, "n_filters1": 4, "n_filters2": 8, "dropout1": 0.25}


class Digits(tud.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """12x12 single-channel images with 10 classes, fixed by ``seed``."""

    def __init__(self, length: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(length, 1, 12, 12, generator=generator)
        self.labels = torch.randint(0, 10, (length,), generator=generator)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]


def fingerprint(images: torch.Tensor) -> list[float]:
    """One number per record, the same wherever and whenever the record is read."""
    return images.double().flatten(1).sum(1).tolist()


def build_model(hparams: dict[str, Any]) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, hparams["n_filters1"], 3, 1),
        nn.ReLU(),
        nn.Conv2d(hparams["n_filters1"], hparams["n_filters2"], 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(hparams["dropout1"]),
        nn.Flatten(),
        nn.Linear(16 * hparams["n_filters2"], 10),
        nn.LogSoftmax(dim=1),
    )


class EveryHook(Callback):
    """Logs every hook it gets, in order, to this rank's file; keeps a checkpointed count."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.workloads = 0

    def log(self, hook: str, **fields: Any) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"hook": hook, **fields}, sort_keys=True, default=str) + "\n")

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        self.log("on_trial_startup", first_batch_idx=first_batch_idx)

    def on_trial_shutdown(self) -> None:
        self.log("on_trial_shutdown")

    def on_validation_start(self) -> None:
        self.log("on_validation_start")

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        self.log("on_validation_end", metrics=metrics)

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        self.log("on_checkpoint_load_start", keys=sorted(checkpoint))

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        self.log("on_checkpoint_save_start")

    def on_checkpoint_end(self, checkpoint_dir: str) -> None:
        self.log("on_checkpoint_end")

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        self.log("on_checkpoint_write_end", folder=os.path.basename(checkpoint_dir))

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        self.log("on_checkpoint_upload_end", uuid=uuid)

    def on_training_start(self) -> None:
        self.log("on_training_start", workloads=self.workloads)

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        self.log("on_training_epoch_start", epoch_idx=epoch_idx)

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        self.log("on_training_epoch_end", epoch_idx=epoch_idx)

    def on_training_workload_end(
        self, avg_metrics: dict[str, Any], batch_metrics: list[dict[str, Any]]
    ) -> None:
        self.workloads += 1
        self.log("on_training_workload_end", batches=len(batch_metrics))

    def on_validation_epoch_start(self) -> None:
        self.log("on_validation_epoch_start")

    def on_validation_epoch_end(self, outputs: list[Any]) -> None:
        self.log("on_validation_epoch_end", batches=len(outputs))

    def state_dict(self) -> dict[str, Any]:
        return {"workloads": self.workloads}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.workloads = state_dict["workloads"]


class MNistTrial(Trial):
    def __init__(self, context: TrialContext, hparams: dict[str, Any], record_dir: str) -> None:
        self.context = context
        self.record_dir = record_dir
        self.rank = self.context.distributed.get_rank()

        # Trial-level constants.
        self.batch_size = 16
        self.per_slot_batch_size = self.batch_size // self.context.distributed.get_size()

        # Seed 004: wrap the scaler, here a CPU one (bfloat16 autocast).
        self.scaler = self.context.wrap_scaler(torch.amp.GradScaler("cpu", init_scale=1024.0))

        self.loss_fn = nn.NLLLoss()
        self.model = self.context.wrap_model(build_model(hparams))
        self.optimizer = self.context.wrap_optimizer(
            torch.optim.Adadelta(self.model.parameters(), lr=hparams["learning_rate"])
        )
        self.seen = self.context.wrap_reducer(lambda counts: sum(counts), name="records_seen")

    def build_training_data_loader(self) -> DataLoader:
        return DataLoader(Digits(96, seed=0), batch_size=self.per_slot_batch_size, shuffle=True)

    def build_validation_data_loader(self) -> DataLoader:
        return DataLoader(Digits(40, seed=1), batch_size=self.per_slot_batch_size)

    def build_callbacks(self) -> dict[str, Callback]:
        return {
            "every_hook": EveryHook(os.path.join(self.record_dir, f"hooks-rank{self.rank}.jsonl"))
        }

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, torch.Tensor]:
        batch_data, labels = batch
        with open(os.path.join(self.record_dir, f"batches-rank{self.rank}.jsonl"), "a") as f:
            f.write(json.dumps({"batch": batch_idx, "records": fingerprint(batch_data)}) + "\n")

        with torch.autocast("cpu"):
            output = self.model(batch_data)
        loss = self.loss_fn(output.float(), labels)

        self.context.backward(self.scaler.scale(loss))
        self.context.step_optimizer(self.optimizer, scaler=self.scaler)
        self.scaler.update()
        self.seen.update(len(labels))

        return {"loss": loss}

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        batch_data, labels = batch

        with torch.autocast("cpu"):
            output = self.model(batch_data)
        validation_loss = self.loss_fn(output.float(), labels).item()

        pred = output.argmax(dim=1, keepdim=True)
        accuracy = pred.eq(labels.view_as(pred)).sum().item() / len(batch_data)
        self.seen.update(len(labels))

        return {
            "validation_loss": validation_loss,
            "accuracy": accuracy,
            "batch": self.context.current_train_batch(),
        }


def main(argv: Sequence[str] | None = None) -> MNistTrial:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--record-dir", required=True)
    parser.add_argument("--max-batches", type=int, required=True)
    parser.add_argument("--resume-from", default=None)
    parser.add_argument("--weights-out", default=None)
    args = parser.parse_args(argv)
    os.makedirs(args.record_dir, exist_ok=True)
    latest = args.resume_from or find_latest_checkpoint(args.checkpoint_dir)
    with init(aggregation_frequency=2) as train_context:
        trial = MNistTrial(train_context, hparams=HPARAMS, record_dir=args.record_dir)
        trainer = Trainer(trial, train_context)
        trainer.fit(
            max_length=Batch(args.max_batches),
            checkpoint_period=Batch(4),
            validation_period=Epoch(1),
            checkpoint_dir=args.checkpoint_dir,
            latest_checkpoint=latest,
        )
        if args.weights_out is not None and train_context.distributed.get_rank() == 0:
            model = trial.model
            inner = (
                model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
            )
            torch.save(inner.state_dict(), args.weights_out)
    return trial


if __name__ == "__main__":
    main()
