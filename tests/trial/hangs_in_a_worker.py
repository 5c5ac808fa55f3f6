"""A rank whose loader worker never returns a sample: a hung run, for ``launch``'s timeout."""

from __future__ import annotations

import time

import torch.utils.data as tud


class NeverReturns(tud.Dataset[int]):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        time.sleep(3600)
        return index


if __name__ == "__main__":
    next(iter(tud.DataLoader(NeverReturns(), num_workers=1)))
