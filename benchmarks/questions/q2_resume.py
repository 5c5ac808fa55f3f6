"""Question 2: time to the first batch after resuming in the middle of epoch 3.

Each peer resumes through its own state API: the state at position 3.5 N (saved
beforehand, outside the timing) is loaded into a freshly built pipeline, and the time runs
from building it to holding the first batch. litdata resumes over its shard format in
question 4; Mosaic streaming's state is a position in an index of shards, so it is here too,
over links to one real shard.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.cli import Run
from harness.fmt import fmt_n, fmt_ratio, fmt_time
from harness.output import plot_lines, pyplot, save
from harness.table import Cell, Table, show, skipped
from harness.timing import interleaved, median
from peers import Peer

from questions.common import gather, how_notes, missing_cell

KEY = "p2"
TITLE = "Time to the first batch after resuming mid-epoch 3 (lower is better)"
BATCH = 32
EPOCH = 3


def position(n: int) -> int:
    """Samples before the middle of epoch ``EPOCH`` (counting from 0), at a batch boundary."""
    return (EPOCH * n + n // 2) // BATCH * BATCH


def sizes(quick: bool) -> tuple[int, ...]:
    """The N of the table."""
    return (10**4, 10**5) if quick else (10**6, 10**8)


def rounds(quick: bool) -> int:
    """Timed runs per cell."""
    return 3 if quick else 5


def measure(peers: list[Peer], quick: bool) -> dict[str, dict[str, Cell]]:
    """``{peer: {str(N): Cell}}``, the peers alternating which goes first."""
    for peer in peers:  # first calls pay for imports and caches
        assert peer.resume is not None
        peer.resume(1000, BATCH, position(1000))()
    cells: dict[str, dict[str, Cell]] = {peer.name: {} for peer in peers}
    for n in sizes(quick):
        ops = {}
        for peer in peers:
            assert peer.resume is not None
            if peer.resume_max_n is not None and n > peer.resume_max_n:
                cells[peer.name][str(n)] = skipped(
                    f"skipped: N > {fmt_n(peer.resume_max_n)}",
                    reason="reaching the state means iterating 3.5 N examples",
                )
                continue
            ops[peer.name] = _timed(peer.resume(n, BATCH, position(n)))
        for name, times in interleaved(ops, rounds(quick), warm=True).items():
            cells[name][str(n)] = Cell("ok", median(times), times)
    return cells


def run(out: Run, quick: bool) -> None:
    peers, measured, missing = gather("resume", 2, measure, quick)
    headers = ["N", "position", *(p.name for p in peers + missing), "ds/best peer"]
    rows: list[list[str]] = []
    records = []
    for n in sizes(quick):
        cells = {name: by_n[str(n)] for name, by_n in measured.items()}
        for peer in missing:
            cells[peer.name] = missing_cell(peer)
        ours = cells.get("detsamplers")
        others = [c.value for k, c in cells.items() if k != "detsamplers" and c.measured]
        best = (
            fmt_ratio(ours.value / min(v for v in others if v is not None))
            if ours and ours.value and others
            else "-"
        )
        rows.append(
            [
                fmt_n(n),
                f"{position(n):,}",
                *(show(cells[p.name], fmt_time) for p in peers + missing),
                best,
            ]
        )
        records.append({"n": n, "position": position(n), "unit": "seconds", "cells": cells})
    notes = [
        f"Build the pipeline, load the state saved at position 3.5 N (batch {BATCH}, one rank) "
        f"through the peer's own API and take the first batch; median of {rounds(quick)} runs, "
        "the peers alternating which goes first, each run after an untimed one (warm caches). "
        "Peers in a venv of their own (Mosaic) run in a process of their own, after the others.",
        *how_notes(peers),
        "Mosaic streaming reads real MDS shards: N / 1e5 links to one shard of 1e5 samples "
        "(Mosaic's index lists each link; its resume builds the shuffle of all N), so its "
        "time includes reading a first batch of data. Its state at 3.5 N is the dataset's "
        "state_dict(N / 2, from_beginning=True) at epoch 3, checked equal to the loader's "
        "state after iterating 3.5 N samples at N = 1,000.",
        "ds/best peer below 1 = detsamplers resumes faster than the fastest peer.",
    ]
    out.emit(Table(KEY, TITLE, headers, rows, notes, records))


def _timed(resume: Callable[[], Sequence[int]]) -> Callable[[], float]:
    def once() -> float:
        start = time.perf_counter()
        batch = resume()
        elapsed = time.perf_counter() - start
        if len(batch) != BATCH:
            raise RuntimeError(f"first batch has {len(batch)} samples, expected {BATCH}")
        return elapsed

    return once


def plot(path: Path, tables: list[Table], machine: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    table = tables[0]
    plot_lines(ax, table.records, "n", {name: name for name in table.records[0]["cells"]})
    ax.set_title("2. first batch after resuming mid-epoch 3, one rank", fontsize=10)
    ax.set_xlabel("N")
    ax.set_ylabel("seconds")
    save(fig, path, machine)
