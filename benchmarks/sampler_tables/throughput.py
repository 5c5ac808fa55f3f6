"""Table a: per-rank throughput of the index chains."""

from __future__ import annotations

from functools import partial
from typing import Any

from _common import BATCH, ds_chain
from harness.fmt import fmt_n, fmt_rate
from harness.table import Table, not_installed, show, show_ratio
from harness.timing import measure_rate

from sampler_tables.common import (
    N_SMALL,
    DetModule,
    Settings,
    det_chain,
    torch_epochs,
)


def table_throughput(s: Settings, det: DetModule) -> Table:
    headers = ["W", "detsamplers", "torch", "Determined", "ds/torch", "ds/Determined"]
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    for world in s.workers:
        ours = measure_rate(partial(ds_chain, N_SMALL, world), s.budget, s.rate_cap, s.repeats)
        theirs = measure_rate(
            partial(torch_epochs, N_SMALL, world), s.budget, s.rate_cap, s.repeats
        )
        if det.module is None:
            dets = not_installed()
        else:
            dets = measure_rate(
                partial(det_chain, det.module, N_SMALL, world), s.budget, s.rate_cap, s.repeats
            )
        rows.append(
            [
                str(world),
                show(ours, fmt_rate),
                show(theirs, fmt_rate),
                show(dets, fmt_rate),
                show_ratio(ours, theirs),
                show_ratio(ours, dets),
            ]
        )
        records.append(
            {
                "world_size": world,
                "n": N_SMALL,
                "unit": "indices/s",
                "cells": {"detsamplers": ours, "torch": theirs, "determined": dets},
            }
        )
    notes = [
        f"indices/s yielded on rank 0 of W (batches of {BATCH}, N = {fmt_n(N_SMALL)}), "
        f"chain built inside the timed region; budget {s.budget:,} indices or "
        f"{s.rate_cap:g} s per run, median of up to {s.repeats} runs.",
        "* = stopped at the time cap: the rate over what was done. "
        "ds/peer above 1 = detsamplers yields more indices per second.",
    ]
    title = "Per-rank throughput (indices/s, higher is better)"
    return Table("a", title, headers, rows, notes, records)
