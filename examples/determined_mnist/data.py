"""Synthetic 12x12 "digits" in place of the MNIST download (no network in the tests).

Each training record appends its index to ``$RECORD_FILE-rank<r>`` (a line per fetch), if set,
so that a test can count what the run trained.
"""

import os
import pathlib

import torch


class Digits(torch.utils.data.Dataset):
    def __init__(self, length: int, seed: int, record_file: str | None) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(length, 1, 12, 12, generator=generator)
        self.labels = torch.randint(0, 10, (length,), generator=generator)
        self.record_file = record_file

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        if self.record_file:
            with open(self.record_file, "a") as f:
                f.write(f"{index}\n")
        return self.images[index], self.labels[index]


def get_dataset(data_dir: pathlib.Path, train: bool) -> Digits:
    record = os.environ.get("RECORD_FILE") if train else None
    if record:
        record = f"{record}-rank{os.environ.get('RANK', '0')}"
    return Digits(256 if train else 64, seed=0 if train else 1, record_file=record)
