"""The peers the benchmarks compare with: one adapter module each.

Each module here defines ``PEERS``, a list of ``Peer``: a name, the distribution it needs
and, for each question it can answer, a function. A question script runs every peer that
has its function, side by side in one process; a peer whose package is not installed gets
a "not installed" cell and a line saying so. Adding a peer is adding one module.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import pkgutil
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The repository root (``venv`` paths are relative to it).
ROOT = Path(__file__).resolve().parents[2]

#: Batches of indices (question 1) or of sample ids (questions 2, 4 and 5).
Batches = Iterable[Sequence[int]]


@dataclass(frozen=True)
class ShardFormat:
    """Question 4: a peer's own shard format and its streaming reader.

    Every sample is ``{"png": <a 70-byte PNG>, "cls": i}`` for ``i`` in ``range(total)``;
    every batch comes back as the list of its ``cls`` values.

    Attributes:
        write: ``(folder, total, per_shard)`` writes the samples in the peer's format and
            returns what ``epoch`` and ``resume`` read (a path or a pattern).
        epoch: ``(written, num_workers, batch)`` to one shuffled epoch of batches.
        resume: ``(written, batch, position)`` to a function that builds the reader, loads
            the state saved at ``position`` samples through the peer's API (saved
            beforehand) and returns the first batch.
    """

    write: Callable[[str, int, int], str]
    epoch: Callable[[str, int, int], Iterable[list[int]]]
    resume: Callable[[str, int, int], Callable[[], list[int]]]


@dataclass(frozen=True)
class Peer:
    """One library in its idiomatic best configuration, and what it can be asked.

    Attributes:
        name: The column label.
        distribution: The pip distribution it needs (``""``: none beyond ours).
        module: The import name checked before running (``""``: none).
        venv: A venv (relative to the repository root) whose Python runs this peer when
            ``module`` is not importable here (``""``: none); ``elsewhere()`` finds it.
        how: One line on the configuration, printed under the tables.
        index_batches: Question 1: ``(n, world, rank, batch)`` to an endless iterable of
            batches of indices of rank ``rank`` of ``world``, built when called.
        resume: Question 2: ``(n, batch, position)`` to a function that, when called,
            builds the pipeline, loads the state of ``position`` samples through the peer's
            own state API (saved beforehand, outside the timing) and returns the first
            batch. ``position`` is a multiple of ``batch``.
        shuffle_first: Question 3: ``n`` to the first index of a fresh shuffle of ``n``.
        shards: Question 4: a ``ShardFormat``.
        capability: Question 5: a function returning ``{"num_workers": ..., "world_size":
            ...}`` with ``True``/``False`` (or a string saying why not checked) per change.
    """

    name: str
    distribution: str = ""
    module: str = ""
    venv: str = ""
    how: str = ""
    index_batches: Callable[[int, int, int, int], Batches] | None = None
    resume: Callable[[int, int, int], Callable[[], Sequence[int]]] | None = None
    resume_max_n: int | None = None
    shuffle_first: Callable[[int], object] | None = None
    shards: ShardFormat | None = None
    capability: Callable[[bool], dict[str, bool | str]] | None = None

    def elsewhere(self) -> str | None:
        """The Python of ``venv`` if this peer must run there (not importable here)."""
        if not self.venv or not self.module or importlib.util.find_spec(self.module):
            return None
        python = ROOT / self.venv / "bin" / "python"
        return str(python) if python.exists() else None

    def missing(self) -> str | None:
        """Why this peer cannot run here ("not installed: pip install ..."), or None."""
        if self.module and importlib.util.find_spec(self.module) is None:
            if self.venv:
                return f"not installed (no {self.venv}: make mosaic)"
            return f"not installed (pip install {self.distribution})"
        return None

    def version(self) -> str:
        """The installed version of its distribution ("" for ours)."""
        if not self.distribution:
            return ""
        python = self.elsewhere()
        if python:
            code = f"import importlib.metadata as m; print(m.version({self.distribution!r}))"
            done = subprocess.run([python, "-c", code], capture_output=True, text=True)
            return done.stdout.strip() or "not installed"
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"


def all_peers() -> list[Peer]:
    """Every adapter's peers, ours first, then the modules in name order."""
    found: list[Peer] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: (m.name != "ours", m.name)):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.extend(module.PEERS)
    return found


def with_question(attribute: str) -> list[Peer]:
    """The peers that answer the question whose function is ``attribute``."""
    return [p for p in all_peers() if getattr(p, attribute) is not None]


def versions(peers: Iterable[Peer]) -> dict[str, str]:
    """``{distribution: version}`` of the peers, for the machine line."""
    return {p.distribution: p.version() for p in peers if p.distribution}
