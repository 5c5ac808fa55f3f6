"""Question 2: time to the first batch after resuming in the middle of epoch 3.

Each peer resumes through its own state API: the state at position 3.5 N (saved
beforehand, outside the timing) is loaded into a freshly built pipeline, and the time runs
from building it to holding the first batch. Shard-based peers (Mosaic, litdata) resume
over their shard formats in question 4.
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

from questions.common import how_notes, missing_cell, runnable

KEY = "p2"
TITLE = "Time to the first batch after resuming mid-epoch 3 (lower is better)"
BATCH = 32
EPOCH = 3


def position(n: int) -> int:
    """Samples before the middle of epoch ``EPOCH`` (counting from 0), at a batch boundary."""
    return (EPOCH * n + n // 2) // BATCH * BATCH


def run(out: Run, quick: bool) -> None:
    sizes = (10**4, 10**5) if quick else (10**6, 10**8)
    rounds = 3 if quick else 5
    ready, missing = runnable("resume")
    for peer in ready:  # first calls pay for imports and caches
        assert peer.resume is not None
        peer.resume(1000, BATCH, position(1000))()
    headers = ["N", "position", *(p.name for p in ready + missing), "ds/best peer"]
    rows: list[list[str]] = []
    records = []
    for n in sizes:
        cells: dict[str, Cell] = {}
        ops = {}
        for peer in ready:
            assert peer.resume is not None
            if peer.resume_max_n is not None and n > peer.resume_max_n:
                cells[peer.name] = skipped(
                    f"skipped: N > {fmt_n(peer.resume_max_n)}",
                    reason="reaching the state means iterating 3.5 N examples",
                )
                continue
            ops[peer.name] = _timed(peer.resume(n, BATCH, position(n)))
        for name, times in interleaved(ops, rounds, warm=True).items():
            cells[name] = Cell("ok", median(times), times)
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
                *(show(cells[p.name], fmt_time) for p in ready + missing),
                best,
            ]
        )
        records.append({"n": n, "position": position(n), "unit": "seconds", "cells": cells})
    notes = [
        f"Build the pipeline, load the state saved at position 3.5 N (batch {BATCH}, one rank) "
        f"through the peer's own API and take the first batch; median of {rounds} runs, the "
        "peers alternating which goes first, each run after an untimed one (warm caches).",
        *how_notes(ready),
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
