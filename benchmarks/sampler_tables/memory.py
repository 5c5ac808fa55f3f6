"""Tables d1 and d2: peak memory of a shuffle's first index."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from harness.fmt import fmt_bytes, fmt_n
from harness.table import Cell, Table, not_installed, show, show_ratio
from harness.timing import extrapolate, over_cap, rss_peak, traced_peak

from sampler_tables.common import (
    DetModule,
    Settings,
    det_shuffle_first,
    ds_shuffle_first,
    torch_shuffle_first,
)


def _memory_cells(
    s: Settings, ops: dict[str, Callable[[int], object] | None]
) -> list[dict[str, tuple[Cell, Cell]]]:
    """For each N: each sampler's (tracemalloc peak, RSS peak growth) cells."""
    out: list[dict[str, tuple[Cell, Cell]]] = [{} for _ in s.memory_sizes]
    for name, op in ops.items():
        points: list[tuple[float, float]] = []
        for i, n in enumerate(s.memory_sizes):
            if op is None:
                out[i][name] = (not_installed(), not_installed())
                continue
            capped = over_cap(extrapolate(points, n), s.memory_cap)
            if capped is not None:
                out[i][name] = (capped, capped)
                continue
            rss, seconds = rss_peak(partial(op, n))  # first: tracemalloc's tables stay mapped
            peak, traced_seconds = traced_peak(partial(op, n))
            points.append((n, traced_seconds))
            traced = Cell("ok", peak, extra={"traced_seconds": traced_seconds})
            grown = (
                Cell("skipped", note="n/a")
                if rss is None
                else Cell("ok", rss, extra={"seconds": seconds})
            )
            out[i][name] = (traced, grown)
    return out


def tables_memory(s: Settings, det: DetModule) -> list[Table]:
    ops: dict[str, Callable[[int], object] | None] = {
        "detsamplers": ds_shuffle_first,
        "torch": torch_shuffle_first,
        "determined": None if det.module is None else partial(det_shuffle_first, det.module),
    }
    cells = _memory_cells(s, ops)
    headers = ["N", "detsamplers", "torch", "Determined", "ds/torch", "ds/Determined"]
    tables: list[Table] = []
    for which, key, title, note in (
        (
            0,
            "d1",
            "Peak memory of a shuffle's first index: tracemalloc (lower is better)",
            "tracemalloc does not see torch's tensor storage (the 8 N bytes of randperm's "
            "result while it is turned into a list); d2 counts it.",
        ),
        (
            1,
            "d2",
            "Peak memory of a shuffle's first index: RSS growth (lower is better)",
            "Peak RSS growth of an untraced run (VmHWM reset before it): a lower bound when "
            "the allocator reuses memory the process already holds. RSS moves by pages: figures "
            "below about 100 kB are noise.",
        ),
    ):
        rows: list[list[str]] = []
        records: list[dict[str, Any]] = []
        for n, by_name in zip(s.memory_sizes, cells, strict=True):
            row = {name: pair[which] for name, pair in by_name.items()}
            rows.append(
                [
                    fmt_n(n),
                    show(row["detsamplers"], fmt_bytes),
                    show(row["torch"], fmt_bytes),
                    show(row["determined"], fmt_bytes),
                    show_ratio(row["detsamplers"], row["torch"]),
                    show_ratio(row["detsamplers"], row["determined"]),
                ]
            )
            records.append({"n": n, "unit": "bytes", "cells": row})
        notes = [
            "Build ReproducibleShuffleSampler(SequentialSampler(range(N)), 0) (torch: "
            "DistributedSampler(range(N), 1, 0, shuffle=True)) and take its first index.",
            note,
            f"Not run: cells whose traced time, extrapolated from smaller N, exceeds "
            f"{s.memory_cap:g} s. ds/peer below 1 = detsamplers uses less.",
        ]
        tables.append(Table(key, title, headers, rows, notes, records))
    return tables
