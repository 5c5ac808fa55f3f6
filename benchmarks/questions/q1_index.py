"""Question 1: indices per second on one rank of W (N = 1e6, batch 32), indices only."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from harness.cli import Run
from harness.fmt import fmt_rate, fmt_ratio
from harness.output import plot_lines, pyplot, save
from harness.table import Cell, Table, show
from harness.timing import Batches, interleaved, measure_rate, median

from questions.common import how_notes, missing_cell, runnable

KEY = "p1"
TITLE = "Index throughput per rank (indices/s, higher is better)"
N = 10**6
BATCH = 32
#: Our column that reads the same arrow rows as HF datasets' (peers/hf_datasets.py).
ROWS = "detsamplers + arrow rows"


def run(out: Run, quick: bool) -> None:
    worlds = (1, 64) if quick else (1, 8, 64, 1024)
    budget, cap, rounds = (2**18, 1.0, 1) if quick else (2**21, 4.0, 3)
    ready, missing = runnable("index_batches")
    for peer in ready:  # first calls pay for imports and caches (HF's arrow table of N rows)
        assert peer.index_batches is not None
        next(iter(peer.index_batches(N, 2, 0, BATCH)))
    headers = ["W", *(p.name for p in ready + missing), "ds/best peer", "rows: ds/HF"]
    rows: list[list[str]] = []
    records = []
    for world in worlds:
        ops: dict[str, Callable[[], tuple[float, bool]]] = {}
        for peer in ready:
            assert peer.index_batches is not None
            make = partial(peer.index_batches, N, world, 0, BATCH)
            ops[peer.name] = partial(_one_rate, make, budget, cap)
        runs = interleaved(ops, rounds)
        cells: dict[str, Cell] = {}
        for name, results in runs.items():
            values = [value for value, _ in results]
            capped = any(c for _, c in results)
            cells[name] = Cell("capped" if capped else "ok", median(values), values)
        for peer in missing:
            cells[peer.name] = missing_cell(peer)
        rows.append(
            [
                str(world),
                *(show(cells[p.name], fmt_rate) for p in ready + missing),
                _best(cells),
                _ratio(cells, ROWS, "HF datasets"),
            ]
        )
        records.append({"world_size": world, "n": N, "unit": "indices/s", "cells": cells})
    notes = [
        f"Indices/s yielded on rank 0 of W, N = 1e6, batches of {BATCH}, pipeline built inside "
        f"the timed region; a run stops at {budget:,} indices or {cap:g} s (* = stopped by the "
        f"cap); median of {rounds} runs, the peers alternating which goes first.",
        *how_notes(ready),
        "ds/best peer above 1 = detsamplers yields more indices per second than the fastest peer "
        f"(not counting {ROWS!r}, ours).",
        f"rows: ds/HF compares the two columns that read the same rows from arrow ({ROWS!r} "
        "against HF datasets); HF has num_shards = W at W = 1024, so that every rank reads only "
        "whole shards of its own.",
    ]
    out.emit(Table(KEY, TITLE, headers, rows, notes, records))


def _one_rate(make: Callable[[], Batches], budget: int, cap: float) -> tuple[float, bool]:
    cell = measure_rate(make, budget, cap, 1)
    assert cell.value is not None
    return cell.value, cell.status == "capped"


def _best(cells: dict[str, Cell]) -> str:
    ours = cells.get("detsamplers")
    others = [
        c.value
        for n, c in cells.items()
        if not n.startswith("detsamplers") and c.measured and c.value
    ]
    if ours is None or not ours.value or not others:
        return "-"
    return fmt_ratio(ours.value / max(others))


def _ratio(cells: dict[str, Cell], ours: str, peer: str) -> str:
    """``ours``' cell over ``peer``'s, or "-" when either was not measured."""
    mine, theirs = cells.get(ours), cells.get(peer)
    if not (mine and theirs and mine.measured and theirs.measured and mine.value and theirs.value):
        return "-"
    return fmt_ratio(mine.value / theirs.value)


def plot(path: Path, tables: list[Table], machine: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    table = tables[0]
    names = {name: name for name in table.records[0]["cells"]}
    plot_lines(ax, table.records, "world_size", names)
    ax.set_title("1. indices/s on one rank of W (N=1e6, batch 32)", fontsize=10)
    ax.set_xlabel("W (ranks)")
    ax.set_ylabel("indices/s")
    save(fig, path, machine)
