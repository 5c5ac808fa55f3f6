"""What the peer questions share: the peers that can run, and their "missing" lines."""

from __future__ import annotations

from harness.table import Cell, not_installed
from peers import Peer, with_question


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


def missing_cell(peer: Peer) -> Cell:
    """The "not installed" cell of ``peer``."""
    return not_installed(peer.missing() or "not installed")


def how_notes(peers: list[Peer]) -> list[str]:
    """One note per peer: its configuration."""
    return [f"{p.name}: {p.how}" for p in peers if p.how]
