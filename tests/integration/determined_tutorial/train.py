"""Determined's mnist_pytorch tutorial trial, run by detsamplers: only the imports differ.

The two import lines below replace ``import determined as det`` and
``from determined import pytorch``; nothing else changes (tests/integration/
test_determined_tutorial.py asserts it against the same script with Determined's imports).
Under torchrun it trains, validates and checkpoints into ``checkpoints/``; launched again
in the same folder, ``det.get_cluster_info()`` finds ``const.yaml`` and hands the newest
checkpoint back as ``latest_checkpoint``, so the run resumes where it stopped::

    cd examples/determined_mnist
    torchrun --nproc_per_node=2 train.py --batches 6
    torchrun --nproc_per_node=1 train.py --batches 12   # resumes at batch 6
"""

import argparse
import logging
import pathlib
from typing import Any

import data
import model
import torch
from ruamel import yaml
from torch import nn

import determined as det
from determined import pytorch


class MNistTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext, hparams: dict) -> None:
        self.context = context

        # Constants of the trial.
        self.data_dir = pathlib.Path("data")
        self.batch_size = 64
        self.per_slot_batch_size = self.batch_size // self.context.distributed.get_size()

        self.loss_fn = nn.NLLLoss()
        self.model = self.context.wrap_model(model.build_model(hparams=hparams))
        self.optimizer = self.context.wrap_optimizer(
            torch.optim.Adadelta(self.model.parameters(), lr=hparams["learning_rate"])
        )

    def build_training_data_loader(self) -> pytorch.DataLoader:
        train_data = data.get_dataset(self.data_dir, train=True)
        return pytorch.DataLoader(train_data, batch_size=self.per_slot_batch_size)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        validation_data = data.get_dataset(self.data_dir, train=False)
        return pytorch.DataLoader(validation_data, batch_size=self.per_slot_batch_size)

    def train_batch(
        self, batch: pytorch.TorchData, epoch_idx: int, batch_idx: int
    ) -> dict[str, torch.Tensor]:
        images, labels = batch
        loss = self.loss_fn(self.model(images), labels)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: pytorch.TorchData, batch_idx: int) -> dict[str, Any]:
        images, labels = batch
        output = self.model(images)
        predicted = output.argmax(dim=1, keepdim=True)
        return {
            "validation_loss": self.loss_fn(output, labels).item(),
            "accuracy": predicted.eq(labels.view_as(predicted)).sum().item() / len(images),
        }


def run(max_length, local: bool = False):
    """Train locally (hyperparameters from const.yaml) or on the cluster (its info)."""
    info = det.get_cluster_info()

    if local:
        conf = yaml.YAML(typ="safe", pure=True).load(pathlib.Path("./const.yaml").read_text())
        hparams = conf["hyperparameters"]
        latest_checkpoint = None
    else:
        hparams = info.trial.hparams
        latest_checkpoint = info.latest_checkpoint  # what a pause and resume needs

    with pytorch.init() as train_context:
        trial = MNistTrial(train_context, hparams=hparams)
        trainer = pytorch.Trainer(trial, train_context)
        trainer.fit(max_length=max_length, latest_checkpoint=latest_checkpoint)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)

    parser = argparse.ArgumentParser()
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--batches", type=int)
    group.add_argument("--epochs", type=int)
    args = parser.parse_args()
    if args.batches:
        max_length = pytorch.Batch(args.batches)
    elif args.epochs:
        max_length = pytorch.Epoch(args.epochs)
    else:
        max_length = pytorch.Batch(100)

    local_training = det.get_cluster_info() is None
    run(max_length, local=local_training)
