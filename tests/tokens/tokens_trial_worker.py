"""A rank of examples/tokens_trial.py that SIGTERMs itself, for the tests (run by torchrun).

``TRIAL_SIGNAL_AT=<batch>`` and ``TRIAL_SIGNAL_RANK=<rank>``: that rank sends itself
SIGTERM during global batch ``<batch>``, as ``kill <pid>`` or a cluster's preemption would.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from tokens_trial import TokensTrial, main


class Signalled(TokensTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        rank = self.context.distributed.get_rank()
        if batch_idx == int(os.environ.get("TRIAL_SIGNAL_AT", -1)) and rank == int(
            os.environ.get("TRIAL_SIGNAL_RANK", -1)
        ):
            os.kill(os.getpid(), signal.SIGTERM)
        return super().train_batch(batch, epoch_idx, batch_idx)


if __name__ == "__main__":
    main(trial_class=Signalled)
