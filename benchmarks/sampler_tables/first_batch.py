"""Table c: the first batch from position 0."""

from __future__ import annotations

from functools import partial
from typing import Any

from _common import ds_chain
from harness.fmt import fmt_n, fmt_time
from harness.table import Cell, Table, not_installed, show, show_ratio

from sampler_tables.common import (
    N_SMALL,
    DetModule,
    Settings,
    det_chain,
    time_first_batch,
    torch_chain,
)


def table_first_batch(s: Settings, det: DetModule) -> Table:
    headers = [
        "W",
        "ds build",
        "ds first batch",
        "detsamplers",
        "torch",
        "Determined",
        "ds/torch",
        "ds/Determined",
        "target",
    ]
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    for world in s.workers:
        mine = time_first_batch(partial(ds_chain, N_SMALL, world), s.repeats, s.op_cap)
        ours = Cell("ok", mine.total, [b + f for b, f in mine.samples])
        timing = time_first_batch(partial(torch_chain, N_SMALL, world), s.repeats, s.op_cap)
        theirs = Cell("ok", timing.total, [b + f for b, f in timing.samples])
        if det.module is None:
            dets = not_installed()
        else:
            timing = time_first_batch(
                partial(det_chain, det.module, N_SMALL, world), s.repeats, s.op_cap
            )
            dets = Cell("ok", timing.total, [b + f for b, f in timing.samples])
        assert theirs.value is not None
        met = mine.total <= theirs.value
        rows.append(
            [
                str(world),
                fmt_time(mine.build),
                fmt_time(mine.first),
                show(ours, fmt_time),
                show(theirs, fmt_time),
                show(dets, fmt_time),
                show_ratio(ours, theirs),
                show_ratio(ours, dets),
                "met" if met else "MISSED",
            ]
        )
        records.append(
            {
                "world_size": world,
                "n": N_SMALL,
                "unit": "seconds",
                "ds_build_seconds": mine.build,
                "ds_first_batch_seconds": mine.first,
                "target_met": met,
                "cells": {"detsamplers": ours, "torch": theirs, "determined": dets},
            }
        )
    notes = [
        f"Build + next(iter(chain)) at position 0, rank 0 of W, N = {fmt_n(N_SMALL)}; "
        f"median of {s.repeats} runs. target: detsamplers no slower than torch. "
        "ds/peer below 1 = detsamplers is faster.",
    ]
    title = "Time to the first batch from position 0 (lower is better)"
    return Table("c", title, headers, rows, notes, records)
