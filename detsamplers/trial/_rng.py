"""The process's global RNGs: capture, restore, seed, and a fork for validation.

NOTE [ trial RNG ]
- ``init`` seeds torch, numpy and ``random`` from ``derive(seed, "init")`` on every rank,
  so models are built with identical weights everywhere.
- A fresh run then seeds each rank from ``derive(seed, "rank", rank, 0)`` before the
  first batch, so dropout differs between ranks.
- A checkpoint saves every rank's states in its own file; a resume on the same world
  size restores each rank's file on that rank, which makes the continuation bit-identical
  on CPU. A resume on another world size cannot map old ranks to new ones, so each rank is
  re-seeded from ``derive(seed, "rank", rank, batches_trained)``: the global batches stay
  identical (they depend only on the data seed and the position), the dropout draws do not.
- Validation runs inside :func:`fork`, so it never moves the training stream: a run that
  validates (or checkpoints) at a step and one that does not continue identically.
- With ``num_workers=0`` the loader fetches in this process and leaves its RNGs in each
  batch's stream (NOTE [ per-batch seeding ]), so a step's draws follow the batch and the
  restore above only matters with workers. A resume that switches between
  ``num_workers=0`` and workers sees the same batches but other dropout draws.

States are kept as tensors and lists so that ``torch.load(weights_only=True)`` reads them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from .._seeds import derive
from ..loader._seeding import seed_globals

__all__ = ["capture", "fork", "restore", "seed_all"]


def seed_all(seed: int, *labels: int | str) -> None:
    """Seed torch (CPU and CUDA), numpy and ``random`` from ``derive(seed, *labels)``.

    Examples:
        >>> seed_all(0, "rank", 1, 0); a = torch.rand(1)
        >>> seed_all(0, "rank", 1, 0); bool((a == torch.rand(1)).all())
        True
    """
    key = derive(seed, *labels)
    seed_globals(key)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(key)


def capture() -> dict[str, Any]:
    """This process's RNG states, as tensors and lists.

    Examples:
        >>> state = capture(); a = random.random(), np.random.rand(), torch.rand(1).item()
        >>> restore(state); a == (random.random(), np.random.rand(), torch.rand(1).item())
        True
    """
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [name, torch.from_numpy(np.asarray(keys, dtype=np.int64)), pos, has_gauss, cached],
        "random": [version, list(internal), gauss],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> None:
    """Set this process's RNGs to a state from :func:`capture`."""
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["random"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextmanager
def fork(seed: int, *labels: int | str) -> Iterator[None]:
    """Run the block under RNGs seeded from ``(seed, *labels)``, then put the old ones back.

    Examples:
        >>> before = torch.get_rng_state()
        >>> with fork(0, "validation"):
        ...     _ = torch.rand(3)
        >>> bool((before == torch.get_rng_state()).all())
        True
    """
    saved = capture()
    try:
        seed_all(seed, *labels)
        yield
    finally:
        restore(saved)
