"""Side-by-side tables: detsamplers against torch's and Determined's samplers.

How to run (from the repository root)::

    .venv/bin/python benchmarks/samplers_table.py --quick    # < 60 s; `make test` runs it
    .venv/bin/python benchmarks/samplers_table.py            # the full figures, for the docs
    .venv/bin/python benchmarks/samplers_table.py --json figures.json --plot figures.png
    PYTHONPATH=. /path/to/venv-with-determined/bin/python benchmarks/samplers_table.py

Determined (``determined==0.38.1``) is optional: when ``determined.pytorch.samplers`` cannot
be imported its columns say "not installed". ``--plot`` needs matplotlib; without it the
script says so and writes no PNG. Speed is reported, never asserted: the script exits 0
unless something raises.

Every table starts with the machine (platform, CPUs, load, Python/torch/numpy versions).
"detsamplers" is ``make_batch_sampler(range(N), "training", shuffle_seed=0,
num_workers=W, rank=0, batch_size=32, skip=...)``; "torch" is
``BatchSampler(torch.utils.data.DistributedSampler(range(N), num_replicas=W, rank=0,
shuffle=True, seed=0), 32, False)``; "Determined" is Determined's own chain
``SkipBatchSampler(BatchSampler(DistributedSampler(RepeatSampler(
ReproducibleShuffleSampler(SequentialSampler(range(N)), 0)), W, 0), 32, False), skip)``.
This process always plays rank 0 of W.

a. Per-rank throughput: indices yielded per second on rank 0, batches of 32, N = 1e6,
   for several world sizes W. torch is re-iterated with ``set_epoch`` each epoch. A cell
   stops at a budget of indices or at a time cap, whichever comes first, and reports the
   rate over what was done (``*`` marks a cell stopped by the cap); the median of up to 3
   runs (one when a run takes more than a third of the cap). Chain construction is inside
   the timed region.
b1. Seek cost of detsamplers: the chain is built with ``skip = epochs * N / (32 W)``
   batches (W = 1) and ``next(iter(chain))`` is timed, split into build and first batch,
   with the extra memory of build + first batch: the tracemalloc peak and the peak RSS
   growth (``/proc/self/status`` VmHWM after resetting it through ``/proc/self/clear_refs``).
   The issue's targets at N = 1e9 are < 5 ms and < 50 MB.
b2. The same seek against the peers. torch has no skip: it resumes at an epoch boundary
   with ``set_epoch(epochs)`` (all positions here are epoch boundaries). Peers that would
   materialise N indices (N = 1e9: 8 GB and more) are not run; Determined skips by
   iterating, O(position), so a cell whose estimated time (extrapolated from the previous
   positions) exceeds the cap is not run either.
b3. Time to the first batch after resume against N, at a fixed relative position: the
   middle of epoch 3 (counting from 0), i.e. after 3.5 N records, W = 1, build included.
   detsamplers and Determined skip ``3.5 N / 32`` batches; torch resumes as a training loop
   (or torchdata's ``StatefulDistributedSampler``) does: ``set_epoch(3)``, ``iter()`` (its
   ``randperm(N)``, turned into a list) and ``islice`` past the first N/2 indices of the
   epoch. Cells that would materialise more than 1e8 indices (torch, Determined) are not
   run, nor Determined cells whose time, extrapolated from the smaller N, exceeds the cap.
c. Time to the first batch from position 0, N = 1e6, build included, per W. The target
   is detsamplers no slower than torch.
d1. Peak memory (tracemalloc) of building a bare shuffle and taking its first index, per N:
   detsamplers' and Determined's ``ReproducibleShuffleSampler(SequentialSampler(range(N)),
   0)`` and torch's ``DistributedSampler(range(N), num_replicas=1, rank=0, shuffle=True)``.
   tracemalloc sees numpy and Python allocations but not torch's tensor storage, so the
   torch column leaves out its ``randperm`` tensor (8 N bytes while it is turned into a
   list); d2 counts it.
d2. The same as d1, as the peak RSS growth of an untraced run, after glibc's
   ``malloc_trim`` (a lower bound when the allocator reuses memory the process holds).

Ratios are detsamplers over the peer: for rates above 1 means detsamplers is faster, for
times and memory below 1 means detsamplers takes less ("1/160" = 160 times less).

Method: ``time.perf_counter``; short measurements take the median of 3 runs after an
untimed warm-up run (a single run when one takes more than a third of the cap);
``gc.collect()`` before each cell, the collector left on as in a training loop. The
machine is shared and noisy: read the figures as orders of magnitude and ratios, not to
the last digit.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.cli import Run, parser, run
from harness.fmt import fmt_n
from harness.output import pyplot, save, series
from harness.table import Table
from sampler_tables.common import FULL, QUICK, load_determined, warm_up
from sampler_tables.first_batch import table_first_batch
from sampler_tables.memory import tables_memory
from sampler_tables.seek import table_resume_sizes, table_seek, table_seek_peers
from sampler_tables.throughput import table_throughput


def write_plot(path: Path, tables: list[Table], machine: str) -> None:
    plt = pyplot()
    by_key = {t.key: t for t in tables}
    names = {"detsamplers": "detsamplers", "torch": "torch", "determined": "Determined"}
    colors = {"detsamplers": "C0", "torch": "C1", "determined": "C2"}
    panels = [
        ("a", "world_size", "a. per-rank throughput, N=1e6", "W", "indices/s"),
        ("b2", "epochs", "b2. first batch after skipping N x epochs, W=1", "epochs", "seconds"),
        ("b3", "n", "b3. first batch after resume mid-epoch 3, W=1", "N", "seconds"),
        ("c", "world_size", "c. first batch from position 0, N=1e6", "W", "seconds"),
        ("d1", "n", "d1. tracemalloc peak, shuffle's first index", "N", "bytes"),
        ("d2", "n", "d2. RSS peak growth, shuffle's first index", "N", "bytes"),
    ]
    fig, axes = plt.subplots(3, 2, figsize=(12, 13))
    for ax, (key, x_key, title, x_label, y_label) in zip(axes.flat, panels, strict=True):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        table = by_key.get(key)
        if table is None:
            ax.text(0.5, 0.5, "not measured", ha="center", transform=ax.transAxes)
            continue
        groups: list[tuple[str, list[dict[str, Any]]]] = [("", table.records)]
        if key == "b2":
            sizes = sorted({r["n"] for r in table.records}, reverse=True)
            groups = [(f", N={fmt_n(n)}", [r for r in table.records if r["n"] == n]) for n in sizes]
        for (suffix, records), style in zip(groups, itertools.cycle(["-", "--", ":"])):
            for name, label in names.items():
                xs, ys = series(records, x_key, name)
                if xs:
                    ax.plot(xs, ys, style, marker="o", color=colors[name], label=label + suffix)
        if key == "b2":  # epoch 0 has no place on a log axis: symlog is linear on [0, 1]
            ax.set_xscale("symlog", linthresh=1)
        else:
            ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    save(fig, path, machine)


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser(
        "Benchmark detsamplers against torch's and Determined's samplers.",
        "smaller grids and 2 s caps, < 60 s in total",
    )
    cli.add_argument(
        "--tables", default="abcd", help="which tables to run, a subset of 'abcd' (default: all)"
    )
    args = cli.parse_args(argv)
    unknown = set(args.tables) - set("abcd")
    if unknown or not args.tables:
        cli.error(f"--tables takes letters from 'abcd', got {args.tables!r}")
    settings = QUICK if args.quick else FULL
    det = load_determined()

    def body(out: Run) -> None:
        warm_up(det)
        if "a" in args.tables:
            out.emit(table_throughput(settings, det))
        if "b" in args.tables:
            seek = table_seek(settings)
            out.emit(seek)
            out.emit(table_seek_peers(settings, det, seek))
            out.emit(table_resume_sizes(settings, det))
        if "c" in args.tables:
            out.emit(table_first_batch(settings, det))
        if "d" in args.tables:
            for table in tables_memory(settings, det):
                out.emit(table)

    return run(args, {"determined": det.status}, body, write_plot, asdict(settings))


if __name__ == "__main__":
    sys.exit(main())
