"""A demo-trial rank with injected failures, for the tests (run by torchrun or directly).

- ``TRIAL_KILL_AT=<batch>`` and ``TRIAL_KILL_RANK=<rank>``: that rank calls ``os._exit(3)``
  in the middle of global batch ``<batch>``, as a preempted or crashed process would.
  With ``TRIAL_KILL_FIRST_ATTEMPT=1`` only on torchrun's first attempt
  (``TORCHELASTIC_RESTART_COUNT=0``), with exit status 1.
- ``TRIAL_SIGNAL_AT=<batch>`` and ``TRIAL_SIGNAL_RANK=<rank>``: that rank sends itself
  SIGTERM during global batch ``<batch>``, as ``kill <pid>`` on one rank would.
- ``TRIAL_RAISE_AT=<batch>`` and ``TRIAL_RAISE_RANK=<rank>``: that rank's ``train_batch``
  raises ``RuntimeError`` in global batch ``<batch>`` (a bug in the trial), after writing
  the time to ``<record-dir or the working directory>/raised-rank<rank>``.
- ``TRIAL_CRASH_IN_CHECKPOINT=<folder name>``: the process dies with ``os._exit(3)`` half
  way through writing ``state-dict.pth`` of that checkpoint.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from demo_trial import DemoTrial, main

from detsamplers.trial import _checkpoint

_write_torch = _checkpoint._write_torch


def _crashing_write(obj: Any, path: str) -> None:
    if os.environ["TRIAL_CRASH_IN_CHECKPOINT"] in path and path.endswith("state-dict.pth"):
        with open(path, "wb") as f:
            f.write(b"half a checkpoint")
        os._exit(3)
    _write_torch(obj, path)


def _here(name: str, batch_idx: int, rank: int) -> bool:
    return (
        f"{name}_AT" in os.environ
        and batch_idx == int(os.environ[f"{name}_AT"])
        and rank == int(os.environ[f"{name}_RANK"])
    )


class Injected(DemoTrial):
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        rank = self.context.distributed.get_rank()
        if _here("TRIAL_KILL", batch_idx, rank):
            if os.environ.get("TRIAL_KILL_FIRST_ATTEMPT") != "1":
                os._exit(3)
            if os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
                os._exit(1)
        if _here("TRIAL_RAISE", batch_idx, rank):
            folder = self.record_dir or os.getcwd()
            with open(os.path.join(folder, f"raised-rank{rank}"), "w") as f:
                f.write(repr(time.time()))
            raise RuntimeError(f"train_batch of rank {rank} failed at batch {batch_idx}")
        if _here("TRIAL_SIGNAL", batch_idx, rank):
            os.kill(os.getpid(), signal.SIGTERM)
        return super().train_batch(batch, epoch_idx, batch_idx)


if __name__ == "__main__":
    if "TRIAL_CRASH_IN_CHECKPOINT" in os.environ:
        _checkpoint._write_torch = _crashing_write  # type: ignore[assignment]
    main(trial_class=Injected)
