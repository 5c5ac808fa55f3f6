"""Question 3: the memory of a shuffle of N = 1e8 records, and the time to its first index."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from harness.cli import Run
from harness.fmt import fmt_bytes, fmt_n, fmt_ratio, fmt_time
from harness.output import plot_bars, pyplot, save
from harness.table import Cell, Table, show
from harness.timing import rss_peak, traced_peak
from peers import Peer

from questions.common import gather, missing_cell

KEY = "p3"
TITLE = "Memory of a shuffle of N records: build it, take its first index (lower is better)"


def size(quick: bool) -> int:
    """The N of the shuffle."""
    return 10**6 if quick else 10**8


def measure(peers: list[Peer], quick: bool) -> dict[str, list[Cell]]:
    """``{peer: [RSS peak growth, tracemalloc peak, seconds]}``, one peer after the other."""
    n = size(quick)
    for peer in peers:  # imports and caches first
        assert peer.shuffle_first is not None
        peer.shuffle_first(1000)
    cells: dict[str, list[Cell]] = {}
    for peer in peers:
        assert peer.shuffle_first is not None
        op = partial(peer.shuffle_first, n)
        rss, seconds = rss_peak(op)  # first: tracemalloc's tables stay mapped
        peak, _ = traced_peak(op)
        cells[peer.name] = [
            Cell("ok", rss) if rss is not None else Cell("skipped", note="n/a"),
            Cell("ok", peak),
            Cell("ok", seconds),
        ]
    return cells


def run(out: Run, quick: bool) -> None:
    n = size(quick)
    ready, cells, missing = gather("shuffle_first", 3, measure, quick)
    headers = ["peer", "N", "RSS peak growth", "tracemalloc peak", "time", "ds/peer (RSS)"]
    ours = cells.get("detsamplers", [Cell("skipped")])[0]
    rows: list[list[str]] = []
    records = []
    for peer in ready + missing:
        if peer.name in cells:
            rss_cell, traced, time_cell = cells[peer.name]
        else:
            rss_cell = traced = time_cell = missing_cell(peer)
        ratio = (
            fmt_ratio(ours.value / rss_cell.value)
            if ours.measured and ours.value and rss_cell.measured and rss_cell.value
            else "-"
        )
        rows.append(
            [
                peer.name,
                fmt_n(n),
                show(rss_cell, fmt_bytes),
                show(traced, fmt_bytes),
                show(time_cell, fmt_time),
                ratio,
            ]
        )
        records.append(
            {
                "peer": peer.name,
                "n": n,
                "unit": "bytes",
                "cells": {"rss": rss_cell, "tracemalloc": traced, "seconds": time_cell},
            }
        )
    notes = [
        "Build the peer's shuffle of N records and take its first index: the peak RSS growth "
        "of an untraced run (VmHWM reset before it, after malloc_trim; figures below about "
        "100 kB are page noise), then the tracemalloc peak of a second run (numpy and Python "
        "allocations), and the untraced run's time.",
        "The shuffles: detsamplers ReproducibleShuffleSampler(SequentialSampler(range(N)), 0); "
        "grain MapDataset.range(N).shuffle(seed=0)[0]; grain IndexSampler(N, NoSharding(), "
        "shuffle=True, num_epochs=None, seed=0)[0]; Mosaic ALGO: streaming.base.shuffle."
        "get_shuffle(ALGO, N / 1e5 shards of 1e5 samples, canonical nodes, seed 0, epoch 0, "
        "block)[0] with StreamingDataset's one-node defaults (64 canonical nodes for py1s and "
        "py2s, else 1; block max(4e6 / nodes, 2^18)); it returns the epoch's whole sample "
        "order. Mosaic's run in .venv-mosaic, in a process of their own.",
        "ds/peer below 1 = detsamplers uses less memory.",
    ]
    out.emit(Table(KEY, TITLE, headers, rows, notes, records))


def plot(path: Path, tables: list[Table], machine: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    table = tables[0]
    groups = [r["peer"] for r in table.records]
    values: dict[str, list[float | None]] = {"RSS peak growth": [], "tracemalloc peak": []}
    for record in table.records:
        for label, key in (("RSS peak growth", "rss"), ("tracemalloc peak", "tracemalloc")):
            cell: Cell = record["cells"][key]
            values[label].append(cell.value if cell.measured else None)
    plot_bars(ax, groups, values)
    ax.set_title(f"3. shuffle memory, N={fmt_n(table.records[0]['n'])}", fontsize=10)
    ax.set_ylabel("bytes")
    ax.tick_params(axis="x", labelrotation=20)
    save(fig, path, machine)
