"""Metrics as JSON lines in ``checkpoint_dir/metrics.jsonl``, printed, and a progress bar.

A metric prints as its JSON line holds it (a tensor or NumPy scalar as its number). Only
rank 0 writes, prints and shows the bar (a tqdm bar, hidden when stderr is not a
terminal); the other ranks' calls do nothing.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

__all__ = ["Reporter"]

# tqdm ships no type stubs (pyproject's mypy config lists none for it): load it untyped.
_tqdm: Any = importlib.import_module("tqdm").tqdm


def _format(metrics: dict[str, Any]) -> str:
    """``name=value`` pairs of ``metrics`` as the JSON line holds them (a tensor as its number).

    Examples:
        >>> import torch
        >>> _format({"acc": torch.tensor(0.75), "loss": 1 / 3, "n": 4})
        'acc=0.75 loss=0.333333 n=4'
    """
    held = json.loads(json.dumps(metrics, default=float))  # as the metrics.jsonl line
    return " ".join(
        f"{name}={value:.6g}" if isinstance(value, float) else f"{name}={value}"
        for name, value in sorted(held.items())
    )


class Reporter:
    """Rank 0's metrics log and progress bar."""

    def __init__(self, checkpoint_dir: str, chief: bool, initial: int, total: int | None) -> None:
        self.chief = chief
        self.path = os.path.join(checkpoint_dir, "metrics.jsonl")
        self.bar: Any = None
        if chief:
            os.makedirs(checkpoint_dir, exist_ok=True)
            self.bar = _tqdm(
                total=total, initial=initial, unit="batch", disable=not sys.stderr.isatty()
            )

    def advance(self) -> None:
        """One more global batch."""
        if self.bar is not None:
            self.bar.update(1)

    def log(self, kind: str, batches_trained: int, metrics: dict[str, Any]) -> None:
        """Append ``{"type", "batches_trained", "metrics"}`` and print it."""
        if not self.chief:
            return
        record = {"type": kind, "batches_trained": batches_trained, "metrics": metrics}
        line = json.dumps(record, sort_keys=True, default=float)
        with open(self.path, "a") as f:
            f.write(line + "\n")
        _tqdm.write(f"[batch {batches_trained}] {kind}: {_format(metrics)}")

    def close(self) -> None:
        """Close the bar."""
        if self.bar is not None:
            self.bar.close()
