"""Several runs of a trial script in one torchrun launch: a torch import per rank, not per run.

Started by torchrun (``-m in_one_launch PLAN``, with this folder on ``PYTHONPATH``); ``PLAN``
is a JSON file::

    {"module": "trial_worker", "trial_class": "Injected",
     "runs": [{"argv": [...], "env": {...}, "copy": [[SOURCE, TARGET]]}, ...]}

Each run calls ``module.main(argv, trial_class=...)`` as ``python -m module argv`` would,
with ``env`` set for that run only (the failures ``trial_worker`` injects). Nothing carries
over in memory: each run builds its own context, trainer, model and loader, seeded anew by
``init``, and resumes only from what the runs before it left on disk. After a run every rank
waits for the others; then rank 0 copies each ``SOURCE`` folder to ``TARGET`` (a checkpoint
to resume elsewhere later) before any rank starts the next run.

The process group is created once, here, and kept: ``init`` reuses a live group and leaves
it alive, and a group destroyed and created again in the same processes can hang (one rank
finds the first group's keys in torchrun's store; tests/frameworks/run_twice.py).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
from typing import Any

import torch.distributed as dist

from detsamplers.trial._distributed import setup


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def main(plan_path: str) -> None:
    with open(plan_path) as f:
        plan: dict[str, Any] = json.load(f)
    module = importlib.import_module(plan["module"])
    kwargs = {}
    if plan.get("trial_class"):
        kwargs["trial_class"] = getattr(module, plan["trial_class"])
    _, created = setup()
    rank = int(os.environ.get("RANK", "0"))
    for run in plan["runs"]:
        env: dict[str, str] = run.get("env", {})
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            module.main(run["argv"], **kwargs)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        _barrier()
        if rank == 0:
            for source, target in run.get("copy", []):
                shutil.copytree(source, target)
        _barrier()
    if created:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
