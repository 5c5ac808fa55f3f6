"""Question 4: streaming the same tiny samples from local shards, each peer's own format."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from harness.cli import Run
from harness.fmt import fmt_rate, fmt_time
from harness.output import plot_bars, pyplot, save
from harness.table import Cell, Table, show
from harness.timing import interleaved, median
from peers import Peer, ShardFormat

from questions.common import gather, how_notes, missing_cell

KEY = "p4"
TITLE = "Local shards: samples/s over an epoch and resume mid-epoch 3 (batch 64)"
BATCH = 64
WORKERS = (0, 2)


def _epoch_rate(shards: ShardFormat, written: str, workers: int, total: int) -> float:
    start = time.perf_counter()
    seen: list[int] = []
    for labels in shards.epoch(written, workers, BATCH):
        seen.extend(labels)
    elapsed = time.perf_counter() - start
    if sorted(seen) != list(range(total)):
        raise RuntimeError(f"an epoch yielded {len(seen)} samples, not each of {total} once")
    return total / elapsed


def _resume_time(resume: Callable[[], list[int]]) -> float:
    start = time.perf_counter()
    labels = resume()
    elapsed = time.perf_counter() - start
    if len(labels) != BATCH:
        raise RuntimeError(f"the first batch after resume has {len(labels)} samples")
    return elapsed


def sizes(quick: bool) -> tuple[int, int, int]:
    """Shards, samples per shard, timed rounds."""
    return (8, 500, 1) if quick else (50, 2000, 3)


def measure(peers: list[Peer], quick: bool) -> dict[str, dict[str, Cell]]:
    """``{peer: {column: Cell}}``, the peers alternating which goes first."""
    shard_count, per_shard, rounds = sizes(quick)
    total = shard_count * per_shard
    position = 2 * total + total // 2 // BATCH * BATCH  # mid epoch 3, a batch boundary
    with tempfile.TemporaryDirectory() as folder:
        written: dict[str, str] = {}
        cells: dict[str, dict[str, Cell]] = {}
        for peer in peers:
            assert peer.shards is not None
            start = time.perf_counter()
            written[peer.name] = peer.shards.write(folder, total, per_shard)
            wrote = time.perf_counter() - start
            start = time.perf_counter()  # the first read pays for any one-off index
            next(iter(peer.shards.epoch(written[peer.name], 0, BATCH)))
            opened = time.perf_counter() - start
            cells[peer.name] = {"write": Cell("ok", wrote), "first open": Cell("ok", opened)}
        for workers in WORKERS:
            ops: dict[str, Callable[[], float]] = {}
            for peer in peers:
                assert peer.shards is not None
                rate = partial(_epoch_rate, peer.shards, written[peer.name], workers, total)
                ops[peer.name] = rate
            for name, rates in interleaved(ops, rounds).items():
                cells[name][f"{workers} workers"] = Cell("ok", median(rates), rates)
        resumes: dict[str, Callable[[], float]] = {}
        for peer in peers:
            assert peer.shards is not None
            resume = peer.shards.resume(written[peer.name], BATCH, position)
            resumes[peer.name] = partial(_resume_time, resume)
        for name, times in interleaved(resumes, max(3, rounds)).items():
            cells[name]["resume"] = Cell("ok", median(times), times)
    return cells


def run(out: Run, quick: bool) -> None:
    shard_count, per_shard, rounds = sizes(quick)
    total = shard_count * per_shard
    position = 2 * total + total // 2 // BATCH * BATCH
    ready, cells, missing = gather("shards", 4, measure, quick)
    headers = ["peer", "write", "first open", *(f"{w} workers" for w in WORKERS), "resume"]
    rows: list[list[str]] = []
    records = []
    for peer in ready + missing:
        row = cells.get(peer.name, {h: missing_cell(peer) for h in headers[1:]})
        rows.append(
            [
                peer.name,
                show(row["write"], fmt_time),
                show(row["first open"], fmt_time),
                *(show(row[f"{w} workers"], partial(_samples, fmt_rate)) for w in WORKERS),
                show(row["resume"], fmt_time),
            ]
        )
        records.append({"peer": peer.name, "total": total, "cells": row})
    notes = [
        f"{total:,} samples ({shard_count} shards of {per_shard:,}), each a 71-byte PNG and an "
        f"integer label, written in each peer's format into a temporary folder. write: "
        "writing them; first open: building the reader and taking its first batch (ours "
        "scans the tars once and caches an index next to them). Samples/s over one shuffled "
        f"epoch, batch {BATCH}, every label checked to come exactly once; median of {rounds} "
        "runs, peers alternating. The same work on every side: samples shuffled within a "
        "shard's 2,000 (ours shuffle_window=2,000, a full permutation of each shard; litdata "
        "shuffle=True, its default within each chunk: blocks of 256 in random order, "
        "shuffled inside; Mosaic py1e within blocks), torch's default_collate, the labels "
        "taken with the batch tensor's .tolist(); litdata with item_shuffle_window=0 (a full "
        "permutation of each chunk, as ours) reads about 11 times slower. resume: build the "
        "reader, load the state saved at position "
        f"{position:,} (mid-epoch 3) and take the first batch, no workers; median of "
        f"{max(3, rounds)}.",
        *how_notes(ready),
        "detsamplers over HTTP: write includes starting the server and writing the index "
        "files over HTTP. Mosaic streaming runs in .venv-mosaic, in a process of its own "
        "after the others; its saved state is the dataset's state_dict at that position "
        "(see question 2), not reached by iterating. litdata 0.2.76 and Mosaic 0.13.0 have "
        "no http(s):// remote (litdata: s3, gs, azure, hf, r2, local:; Mosaic: s3, gs, oci, "
        "azure, sftp, hf, dbfs, alipan), so neither is read over HTTP here.",
    ]
    out.emit(Table(KEY, TITLE, headers, rows, notes, records))


def _samples(fmt: Callable[[float], str], value: float) -> str:
    return fmt(value).replace(" /s", "/s").replace("/s", " samples/s")


def plot(path: Path, tables: list[Table], machine: str) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    table = tables[0]
    rates: dict[str, list[float | None]] = {}
    for record in table.records:
        for w in WORKERS:
            cell: Cell = record["cells"][f"{w} workers"]
            rates.setdefault(record["peer"], []).append(cell.value if cell.measured else None)
    plot_bars(left, [f"{w} workers" for w in WORKERS], rates, log=False)
    left.set_title("4a. samples/s over an epoch, batch 64", fontsize=10)
    resumes: dict[str, list[float | None]] = {}
    for record in table.records:
        cell = record["cells"]["resume"]
        resumes[record["peer"]] = [cell.value if cell.measured else None]
    plot_bars(right, ["resume mid-epoch 3"], resumes, log=False)
    right.set_title("4b. seconds to the first batch after resume", fontsize=10)
    save(fig, path, machine)
