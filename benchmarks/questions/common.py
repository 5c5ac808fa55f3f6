"""What the peer questions share: the peers that can run, and their "missing" lines.

A peer whose package is importable runs in the question's process. A peer whose package
lives in a venv of its own (``Peer.venv``, e.g. Mosaic streaming in ``.venv-mosaic``) runs
there: ``gather`` starts ``peers_table.py --question N --peer NAME --results PATH`` with that
venv's Python, which calls the question's ``measure`` on that peer, and merges the figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.table import Cell, from_jsonable, jsonable, not_installed
from peers import Peer, all_peers, with_question

#: A question's ``measure``: peers and quick mode to ``{peer name: figures}``.
Measure = Callable[[list[Peer], bool], dict[str, Any]]

SCRIPT = Path(__file__).resolve().parents[1] / "peers_table.py"

#: Peers whose venv run failed in this process, and why (their cells say so).
FAILED: dict[str, str] = {}


def runnable(attribute: str) -> tuple[list[Peer], list[Peer]]:
    """The peers answering ``attribute`` that can run here, and those that cannot.

    For each that cannot, one line says so (what to install), so a skipped peer is never
    silent.
    """
    peers = with_question(attribute)
    ready = [p for p in peers if p.missing() is None]
    missing = [p for p in peers if p.missing() is not None]
    for peer in missing:
        print(f"skipping {peer.name}: {peer.missing()}", flush=True)
    return ready, missing


def gather(
    attribute: str, question: int, measure: Measure, quick: bool
) -> tuple[list[Peer], dict[str, Any], list[Peer]]:
    """Measure every peer answering ``attribute``: here, in its own venv, or not at all.

    Returns the peers measured (in ``all_peers`` order), their figures by name, and the
    peers that could not run (one line printed for each).
    """
    peers = with_question(attribute)
    here = [p for p in peers if p.missing() is None]
    there = [p for p in peers if p.missing() is not None and p.elsewhere()]
    results = measure(here, quick)
    results.update(_elsewhere(question, there, quick))
    done = [p for p in peers if p.name in results]
    missing = [p for p in peers if p.name not in results]
    for peer in missing:
        if peer not in there:
            print(f"skipping {peer.name}: {peer.missing()}", flush=True)
    return done, results, missing


def _elsewhere(question: int, peers: list[Peer], quick: bool) -> dict[str, Any]:
    """``measure`` of ``peers`` in their venvs, one process per venv."""
    results: dict[str, Any] = {}
    by_python: dict[str, list[Peer]] = {}
    for peer in peers:
        by_python.setdefault(peer.elsewhere() or "", []).append(peer)
    for python, group in by_python.items():
        names = [p.name for p in group]
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder, "results.json")
            command = [python, str(SCRIPT), "--question", str(question), "--results", str(out)]
            command += [arg for name in names for arg in ("--peer", name)]
            command += ["--quick"] if quick else []
            print(f"running {', '.join(names)} with {python}", flush=True)
            done = subprocess.run(command, check=False)
            if done.returncode or not out.exists():
                venv = Path(python).parents[1].name
                for name in names:
                    FAILED[name] = f"failed in {venv} (exit {done.returncode}, see the log)"
                print(f"skipping {', '.join(names)}: failed in {python}", flush=True)
                continue
            results.update(from_jsonable(json.loads(out.read_text(encoding="utf-8"))))
    return results


def measure_only(
    question: int, measure: Measure, names: list[str], path: Path, quick: bool
) -> None:
    """The other end of ``gather``: ``measure`` the peers called ``names``, JSON to ``path``."""
    peers = [p for p in all_peers() if p.name in names]
    unknown = set(names) - {p.name for p in peers}
    if unknown:
        sys.exit(f"--peer: no peer called {sorted(unknown)}")
    path.write_text(json.dumps(jsonable(measure(peers, quick))), encoding="utf-8")


def missing_cell(peer: Peer) -> Cell:
    """The "not installed" cell of ``peer``."""
    if peer.name in FAILED:
        return Cell("skipped", note=FAILED[peer.name])
    return not_installed(peer.missing() or "not installed")


def how_notes(peers: list[Peer]) -> list[str]:
    """One note per peer: its configuration."""
    return [f"{p.name}: {p.how}" for p in peers if p.how]
