"""The tutorial's network: two convolutions, dropout, two linear layers, log-softmax."""

from typing import Any

from torch import nn


def build_model(hparams: dict[str, Any]) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, hparams["n_filters1"], 3, 1),
        nn.ReLU(),
        nn.Conv2d(hparams["n_filters1"], hparams["n_filters2"], 3, 1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(hparams["dropout1"]),
        nn.Flatten(),
        nn.Linear(4 * 4 * hparams["n_filters2"], 32),
        nn.ReLU(),
        nn.Dropout(hparams["dropout2"]),
        nn.Linear(32, 10),
        nn.LogSoftmax(dim=1),
    )
