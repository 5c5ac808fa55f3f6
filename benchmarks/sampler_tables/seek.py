"""Tables b1 to b3: the first batch after a skip, and after resume against N."""

from __future__ import annotations

from functools import partial
from typing import Any

from _common import BATCH, ds_chain
from harness.fmt import fmt_bytes, fmt_n, fmt_time
from harness.table import Cell, Table, materialises, show, show_ratio
from harness.timing import traced_peak

from sampler_tables.common import (
    MATERIALISE_LIMIT,
    RESUME_EPOCH,
    TARGET_BYTES,
    TARGET_SECONDS,
    DetModule,
    Settings,
    determined_skip_cell,
    ds_first_batch,
    resume_skip,
    time_first_batch,
    torch_chain,
    torch_resume,
)


def table_seek(s: Settings) -> Table:
    headers = [
        "N",
        "epochs",
        "skip (batches)",
        "build",
        "first batch",
        "total",
        "tracemalloc peak",
        "RSS peak growth",
        "target",
    ]
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    for n in s.seek_sizes:
        for epochs in s.seek_epochs:
            skip = epochs * n // BATCH
            timing = time_first_batch(partial(ds_chain, n, 1, skip), s.repeats, s.op_cap, rss=True)
            peak, _ = traced_peak(partial(ds_first_batch, n, 1, skip))
            extra = max(peak, timing.rss or 0)
            met = timing.total < TARGET_SECONDS and extra < TARGET_BYTES
            rows.append(
                [
                    fmt_n(n),
                    str(epochs),
                    f"{skip:,}",
                    fmt_time(timing.build),
                    fmt_time(timing.first),
                    fmt_time(timing.total),
                    fmt_bytes(peak),
                    "n/a" if timing.rss is None else fmt_bytes(timing.rss),
                    "met" if met else "MISSED",
                ]
            )
            records.append(
                {
                    "n": n,
                    "epochs": epochs,
                    "skip": skip,
                    "build_seconds": timing.build,
                    "first_batch_seconds": timing.first,
                    "total_seconds": timing.total,
                    "samples_build_first": timing.samples,
                    "tracemalloc_peak_bytes": peak,
                    "rss_peak_growth_bytes": timing.rss,
                    "target_met": met,
                }
            )
    notes = [
        "detsamplers, W = 1: build make_batch_sampler(..., skip) then next(iter(chain)); "
        f"skip = epochs * N / {BATCH}. Median of {s.repeats} runs.",
        "Memory is that of build + first batch, each measured in a run of its own: the "
        "tracemalloc peak and the peak RSS growth.",
        f"target (from the issue, for N = 1e9): total < {fmt_time(TARGET_SECONDS)} and "
        f"extra memory < {fmt_bytes(TARGET_BYTES)}.",
    ]
    title = "Time to the first batch after a skip: detsamplers (lower is better)"
    return Table("b1", title, headers, rows, notes, records)


def table_seek_peers(s: Settings, det: DetModule, seek: Table) -> Table:
    headers = ["N", "epochs", "detsamplers", "torch", "Determined", "ds/torch", "ds/Determined"]
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    for n in s.seek_sizes:
        det_points: list[tuple[float, float]] = []
        for epochs in s.seek_epochs:
            skip = epochs * n // BATCH
            mine = next(r for r in seek.records if r["n"] == n and r["epochs"] == epochs)
            ours = Cell("ok", mine["total_seconds"])
            if n > MATERIALISE_LIMIT:
                theirs = materialises(n)
            else:
                timing = time_first_batch(partial(torch_chain, n, 1, epochs), s.repeats, s.op_cap)
                theirs = Cell("ok", timing.total, [b + f for b, f in timing.samples])
            dets = determined_skip_cell(det, n, skip, det_points, epochs, s)
            rows.append(
                [
                    fmt_n(n),
                    str(epochs),
                    show(ours, fmt_time),
                    show(theirs, fmt_time),
                    show(dets, fmt_time),
                    show_ratio(ours, theirs),
                    show_ratio(ours, dets),
                ]
            )
            records.append(
                {
                    "n": n,
                    "epochs": epochs,
                    "skip": skip,
                    "unit": "seconds",
                    "cells": {"detsamplers": ours, "torch": theirs, "determined": dets},
                }
            )
    notes = [
        "Build + first batch at the position, W = 1 (detsamplers from table b1). torch "
        "resumes at an epoch boundary with set_epoch(epochs) and pays a randperm(N) per "
        "epoch; Determined iterates every skipped batch, O(position).",
        "Not run: peers that would materialise N = 1e9 indices (8 GB+), and Determined "
        f"cells whose time, extrapolated from the earlier positions, exceeds the "
        f"{s.op_cap:g} s cap. ds/peer below 1 = detsamplers is faster.",
    ]
    title = "Time to the first batch after a skip: against the peers (lower is better)"
    return Table("b2", title, headers, rows, notes, records)


def table_resume_sizes(s: Settings, det: DetModule) -> Table:
    headers = [
        "N",
        "skip (batches)",
        "detsamplers",
        "torch",
        "Determined",
        "ds/torch",
        "ds/Determined",
    ]
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    det_points: list[tuple[float, float]] = []
    for n in s.resume_sizes:
        skip = resume_skip(n)
        mine = time_first_batch(partial(ds_chain, n, 1, skip), s.repeats, s.op_cap)
        ours = Cell("ok", mine.total, [b + f for b, f in mine.samples])
        if n > MATERIALISE_LIMIT:
            theirs = materialises(n)
        else:
            timing = time_first_batch(
                partial(torch_resume, n, 1, RESUME_EPOCH, n // 2), s.repeats, s.op_cap
            )
            theirs = Cell("ok", timing.total, [b + f for b, f in timing.samples])
        dets = determined_skip_cell(det, n, skip, det_points, n, s)
        rows.append(
            [
                fmt_n(n),
                f"{skip:,}",
                show(ours, fmt_time),
                show(theirs, fmt_time),
                show(dets, fmt_time),
                show_ratio(ours, theirs),
                show_ratio(ours, dets),
            ]
        )
        records.append(
            {
                "n": n,
                "skip": skip,
                "epoch": RESUME_EPOCH + 0.5,
                "unit": "seconds",
                "cells": {"detsamplers": ours, "torch": theirs, "determined": dets},
            }
        )
    notes = [
        f"Build + first batch in the middle of epoch {RESUME_EPOCH} (after 3.5 N records), "
        f"W = 1; median of {s.repeats} runs after a warm-up run (one run when it takes more "
        f"than {s.op_cap / 3:.2g} s). detsamplers and Determined skip the batches; torch "
        f"calls set_epoch({RESUME_EPOCH}), draws its randperm(N) and islices past N/2 indices.",
        f"Not run: torch and Determined above N = {fmt_n(MATERIALISE_LIMIT)}: they hold every "
        "index of the epoch (at 1e9, 8 GB for torch's tensor and some 36 GB for its list of "
        "Python ints); Determined cells whose time, extrapolated from the smaller N, exceeds "
        f"the {s.op_cap:g} s cap. ds/peer below 1 = detsamplers is faster.",
    ]
    title = "Time to the first batch after resume, against N (lower is better)"
    return Table("b3", title, headers, rows, notes, records)
