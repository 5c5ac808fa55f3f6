"""Shared helpers for the trial tests: in-process runs of the demo trial, and weights."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from demo_trial import DemoTrial, unwrapped

from detsamplers.trial import Batch, Trainer, find_latest_checkpoint, init
from detsamplers.trial._demo import launch

HPARAMS: dict[str, Any] = {"global_batch_size": 8, "lr": 0.1, "records": 40, "num_workers": 0}


def run(
    checkpoint_dir: str,
    batches: int,
    *,
    resume: bool = False,
    seed: int = 1,
    trial_class: type[DemoTrial] = DemoTrial,
    test_mode: bool = False,
    **hparams: Any,
) -> DemoTrial:
    """Train the demo trial in this process (one rank) and return it."""
    with init(hparams={**HPARAMS, **hparams}, seed=seed) as context:
        trial = trial_class(context)
        latest = find_latest_checkpoint(checkpoint_dir) if resume else None
        Trainer(trial, context).fit(
            Batch(batches),
            checkpoint_period=Batch(3),
            validation_period=Batch(4),
            checkpoint_dir=checkpoint_dir,
            latest_checkpoint=latest,
            test_mode=test_mode,
            reporting_period=Batch(5),
        )
    return trial


def as_if_saved_by(folder: Path | str, world_size: int, **fields: Any) -> None:
    """Make a one-rank checkpoint claim ``world_size`` ranks: rank files copied, metadata
    consistent with them (NOTE [ checkpoint metadata ]), and ``fields`` overridden."""
    folder = Path(folder)
    for rank in range(1, world_size):
        shutil.copyfile(folder / "rank-0.pth", folder / f"rank-{rank}.pth")
    path = folder / "metadata.json"
    metadata = json.loads(path.read_text())
    files = sorted(["state-dict.pth", *(f"rank-{r}.pth" for r in range(world_size))])
    path.write_text(json.dumps({**metadata, "world_size": world_size, "files": files, **fields}))


def weights(trial: DemoTrial) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in unwrapped(trial.model).state_dict().items()}


def identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def same_state(a: Any, b: Any) -> bool:
    """Whether two loaded checkpoint files hold the same state: tensors and arrays equal,
    in dicts of the same keys and sequences of the same length, the rest ``==``."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        same = isinstance(b, dict) and a.keys() == b.keys()
        return same and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same_state, a, b))
    return bool(a == b)


def metrics(checkpoint_dir: str) -> list[dict[str, Any]]:
    with open(os.path.join(checkpoint_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def launch_runs(
    ranks: int,
    runs: list[dict[str, Any]],
    folder: Path,
    module: str = "demo_trial",
    trial_class: str | None = None,
) -> None:
    """Run ``module``'s ``main`` once per entry of ``runs`` in one torchrun launch on ``ranks``
    ranks (tests/trial/in_one_launch.py); its plan and log go to ``folder``.

    Raises:
        RuntimeError: a run failed (torchrun exited non-zero), with the log's tail.
    """
    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / f"plan-{ranks}.json"
    plan.write_text(json.dumps({"module": module, "trial_class": trial_class, "runs": runs}))
    here = os.path.dirname(os.path.abspath(__file__))
    previous = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = here + os.pathsep + (previous or "")
    try:
        launch(ranks, [str(plan)], str(folder / "log"), module="in_one_launch")
    finally:
        if previous is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = previous
