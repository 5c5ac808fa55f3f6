"""Which validations checkpoint (``checkpoint_policy``) and which checkpoints stay.

NOTE [ checkpoint retention ]
``checkpoint_policy`` is Determined's: after a validation, ``"all"`` checkpoints,
``"best"`` checkpoints when ``searcher_metric`` beats every earlier validation of the run
(lower if ``smaller_is_better``, as in the searcher configuration), and ``"none"`` never;
``checkpoint_period``, a stop and the end of training checkpoint regardless. Rank 0
decides and broadcasts. As in Determined's local training, ``"best"`` without a
``searcher_metric`` acts as ``"all"``.

Retention follows Determined's checkpoint garbage collection (``save_trial_latest``,
``save_trial_best``): ``keep_last`` newest complete checkpoints plus ``keep_best`` best by
``searcher_metric`` (the validation at the checkpoint's own batch, saved in its
metadata). ``keep_last=None``, the default, deletes nothing, as local Determined does.
Rank 0 applies it after each checkpoint is complete, so an old folder goes only once a
newer one is complete; it never deletes the folder this ``fit`` resumed from, nor
folders past the current batch (left by an earlier run that was resumed further back). A
folder is deleted by removing ``metadata.json`` first, so that it stops counting as
complete at once, then the rest.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from typing import Any

from .._errors import check_bool, check_int, check_one_of
from ._checkpoint import METADATA, read_metadata
from ._distributed import DistributedContext

__all__ = ["POLICIES", "Retention", "complete_checkpoints"]

POLICIES = ("best", "all", "none")
_FOLDER = re.compile(r"^batch-(\d+)$")


def complete_checkpoints(checkpoint_dir: str) -> list[tuple[int, str, dict[str, Any]]]:
    """``(batches_trained, path, metadata)`` of every complete checkpoint, oldest first."""
    if not os.path.isdir(checkpoint_dir):
        return []
    found = []
    for name in os.listdir(checkpoint_dir):
        match = _FOLDER.match(name)
        path = os.path.join(checkpoint_dir, name)
        metadata = read_metadata(path) if match else None
        if match and metadata is not None:
            found.append((int(match.group(1)), path, metadata))
    return sorted(found, key=lambda row: row[0])


class Retention:
    """A run's ``checkpoint_policy`` and retention (NOTE [ checkpoint retention ]).

    Args:
        checkpoint_policy: ``"best"``, ``"all"`` or ``"none"``.
        searcher_metric: The validation metric that ranks checkpoints.
        smaller_is_better: Whether a lower ``searcher_metric`` is better.
        keep_last: Keep this many newest checkpoints (``None``: keep every one).
        keep_best: Also keep this many best checkpoints by ``searcher_metric``.
        resumed_from: The checkpoint this run resumed from; never deleted by it.

    Examples:
        >>> retention = Retention("best", "loss", True, keep_last=1, keep_best=1)
        >>> [retention.after_validation({"loss": x}, DistributedContext()) for x in (3, 2, 4)]
        [True, True, False]
        >>> Retention("best", None, True, keep_last=0)
        Traceback (most recent call last):
        ...
        ValueError: keep_last should be a positive integer value, but got keep_last=0
    """

    def __init__(
        self,
        checkpoint_policy: str,
        searcher_metric: str | None,
        smaller_is_better: bool,
        keep_last: int | None = None,
        keep_best: int = 0,
        resumed_from: str | None = None,
    ) -> None:
        self.policy = check_one_of("checkpoint_policy", checkpoint_policy, POLICIES)
        if searcher_metric is not None and not isinstance(searcher_metric, str):
            raise TypeError(
                "searcher_metric should be the name of a validation metric, but got "
                f"searcher_metric={searcher_metric!r} of type {type(searcher_metric).__name__}"
            )
        self.searcher_metric = searcher_metric
        self.smaller_is_better = check_bool("smaller_is_better", smaller_is_better)
        self.keep_last = None if keep_last is None else check_int("keep_last", keep_last, minimum=1)
        self.keep_best = check_int("keep_best", keep_best, minimum=0)
        if self.keep_best and searcher_metric is None:
            raise ValueError(
                f"keep_best needs a searcher_metric to rank checkpoints, but got keep_best="
                f"{keep_best} with searcher_metric=None; name a validation metric"
            )
        if self.keep_best and keep_last is None:
            raise ValueError(
                f"keep_best only limits retention together with keep_last, but got keep_best="
                f"{keep_best} with keep_last=None, which keeps every checkpoint; set keep_last=1 "
                "to keep the newest and the best"
            )
        if self.policy == "best" and searcher_metric is None:
            self.policy = "all"  # as Determined's local training does
        self.resumed_from = None if resumed_from is None else os.path.abspath(resumed_from)
        self.best: float | None = None

    def metric(self, metrics: dict[str, Any]) -> float:
        """The ``searcher_metric`` of validation ``metrics``, checked."""
        name = self.searcher_metric
        if name not in metrics:
            raise ValueError(
                f"searcher_metric should name a validation metric, but got searcher_metric="
                f"{name!r} and the validation metrics are {sorted(metrics)}"
            )
        value = metrics[name]
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if math.isnan(number):
            raise ValueError(
                f"searcher_metric {name!r} should be a number, but the validation got {value!r}"
            )
        return number

    def _better(self, value: float) -> bool:
        if self.best is None:
            return True
        return value < self.best if self.smaller_is_better else value > self.best

    def remember(self, checkpoint_dir: str) -> None:
        """Load the best validation so far from ``metrics.jsonl`` (on a resume)."""
        path = os.path.join(checkpoint_dir, "metrics.jsonl")
        if self.searcher_metric is None or not os.path.isfile(path):
            return
        with open(path) as f:
            for line in f:
                try:
                    row = json.loads(line)
                    value = self.metric(row["metrics"]) if row["type"] == "validation" else None
                except (ValueError, KeyError, TypeError):
                    continue  # another row, or one without the metric
                if value is not None and self._better(value):
                    self.best = value

    def after_validation(self, metrics: dict[str, Any], distributed: DistributedContext) -> bool:
        """Whether to checkpoint after this validation (rank 0's decision, broadcast).

        The metric is checked on every rank (the reduced metrics are the same on each), so
        a missing one raises everywhere instead of leaving the others in the broadcast.
        """
        value = None if self.searcher_metric is None else self.metric(metrics)
        decision = False
        if distributed.is_chief:
            decision = self.policy == "all"
            if value is not None and self._better(value):
                self.best = value
                decision = self.policy != "none"
        return bool(distributed.broadcast(decision))

    def apply(self, checkpoint_dir: str, batches_trained: int) -> list[str]:
        """Delete the checkpoints retention lets go (on rank 0); their paths.

        Only checkpoints up to ``batches_trained``, this run's history, are considered:
        folders past it come from a run that a resume from an older checkpoint left
        behind, and are left alone.
        """
        if self.keep_last is None:
            return []
        found = [row for row in complete_checkpoints(checkpoint_dir) if row[0] <= batches_trained]
        keep = {path for _, path, _ in found[-self.keep_last :]}
        if self.keep_best:
            scored = []
            for batches, path, metadata in found:
                try:
                    value = self.metric(metadata.get("validation_metrics") or {})
                except ValueError:
                    continue  # no validation at this checkpoint's batch: not ranked
                scored.append((value if self.smaller_is_better else -value, -batches, path))
            keep |= {path for _, _, path in sorted(scored)[: self.keep_best]}
        deleted = []
        for _, path, _ in found:
            if path in keep or os.path.abspath(path) == self.resumed_from:
                continue
            os.remove(os.path.join(path, METADATA))  # no longer complete, at once
            shutil.rmtree(path, ignore_errors=True)
            deleted.append(path)
        return deleted
