"""A rank whose loader worker never returns a sample: a hung run, for ``launch``'s timeout.

With ``HANG_READY_DIR`` set, a worker that reaches the hang writes a file named by its pid
there first, so that a test can wait for the hang instead of guessing how long it takes.
"""

from __future__ import annotations

import os
import time

import torch.utils.data as tud


class NeverReturns(tud.Dataset[int]):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        if ready := os.environ.get("HANG_READY_DIR"):
            open(os.path.join(ready, str(os.getpid())), "w").close()
        time.sleep(3600)
        return index


if __name__ == "__main__":
    next(iter(tud.DataLoader(NeverReturns(), num_workers=1)))
