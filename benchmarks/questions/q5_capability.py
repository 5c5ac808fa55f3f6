"""Question 5: does a resume on another num_workers or world size give the exact rest?

Each peer runs a small stream (160 records, global batch 16, 25 steps: two and a half
epochs), saves its state after step 13 through its own API and resumes: with the same
configuration, with 2 DataLoader workers instead of none, and on 2 ranks of batch 8
instead of 1 rank of batch 16 (the same global batch). A resume passes when the steps it
yields equal the uninterrupted run's (on 2 ranks: each step's samples, gathered over the
ranks). A peer that refuses the resume (raises) fails it.
"""

from __future__ import annotations

from pathlib import Path

from harness.capability import Outcome, show
from harness.cli import Run
from harness.output import pyplot, save
from harness.table import Table
from peers import Peer

from questions.common import gather, how_notes, missing_cell

KEY = "p5"
TITLE = "Resume on another configuration: is the remaining stream exact? (capability)"
CHANGES = ("same config", "other num_workers", "other world size", "world size 2 to 1")


def measure(peers: list[Peer], quick: bool) -> dict[str, dict[str, Outcome]]:
    """``{peer: {change: outcome}}``; a change a peer does not report is "not checked"."""
    results: dict[str, dict[str, Outcome]] = {}
    for peer in peers:
        assert peer.capability is not None
        found = peer.capability(quick)
        results[peer.name] = {c: found.get(c, "not checked") for c in CHANGES}
    return results


def run(out: Run, quick: bool) -> None:
    ready, results, missing = gather("capability", 5, measure, quick)
    rows: list[list[str]] = []
    records = []
    for peer in ready:
        result = results[peer.name]
        rows.append([peer.name, *(show(result[c]) for c in CHANGES)])
        records.append({"peer": peer.name, "cells": {}, "result": dict(result)})
    for peer in missing:
        cell = missing_cell(peer)
        rows.append([peer.name, *(cell.note or cell.status for _ in CHANGES)])
        records.append({"peer": peer.name, "cells": {}, "result": {}})
    notes = [
        "160 records, global batch 16, 25 steps; state saved after step 13 (mid-epoch 2) "
        "through the peer's own API, resumed on the configuration of the column: no workers "
        "and one rank of 16 (same config), 2 DataLoader workers, 2 ranks of 8 (other world "
        "size), or saved on 2 ranks of 8 and resumed on one of 16 (world size 2 to 1). yes = "
        "the remaining steps equal the uninterrupted run's (on the world size that saved); "
        "no (raises X) = the peer refused.",
        "litdata and Mosaic read the world size from torch.distributed or torchrun's "
        "environment: their world-size columns run each rank as a process of "
        "torch.distributed.run (gloo, 127.0.0.1), rank 0's state resumed on every rank "
        "(--quick: not checked). The others take the rank as an argument and run in this "
        "process.",
        *how_notes(ready),
    ]
    out.emit(Table(KEY, TITLE, ["peer", *CHANGES], rows, notes, records))


def _score(result: Outcome | None) -> float:
    if isinstance(result, str) and result.startswith("not checked"):
        return 0.5
    return 1.0 if result is True else 0.0


def plot(path: Path, tables: list[Table], machine: str) -> None:
    plt = pyplot()
    table = tables[0]
    peers = [r["peer"] for r in table.records]
    grid = [[_score(r["result"].get(c)) for c in CHANGES] for r in table.records]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(peers)))
    ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(CHANGES)), CHANGES, fontsize=8)
    ax.set_yticks(range(len(peers)), peers, fontsize=8)
    for i, record in enumerate(table.records):
        for j, change in enumerate(CHANGES):
            text = show(record["result"][change]) if change in record["result"] else "-"
            ax.text(j, i, text.split(" (")[0], ha="center", va="center", fontsize=8)
    ax.set_title("5. exact remaining stream after a resume on another configuration", fontsize=10)
    save(fig, path, machine)
