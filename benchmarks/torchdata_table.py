"""torchdata's StatefulDataLoader: state_dict and resume, with and without detsamplers.

How to run (from the repository root)::

    .venv/bin/python benchmarks/torchdata_table.py --quick    # < 20 s; `make test` runs it
    .venv/bin/python benchmarks/torchdata_table.py            # the full figures, for the docs
    .venv/bin/python benchmarks/torchdata_table.py --json td.json --plot docs/torchdata.png

The dataset is map-style and trivial (``__getitem__`` returns its index), N = 1e6, batch
size 32 (31,250 batches an epoch), torch's default collate. Three ways to resume:

a. "torchdata": ``StatefulDataLoader(dataset, batch_size=32, shuffle=True)``, i.e. torch's
   default shuffle, which StatefulDataLoader swaps for torchdata's stateful
   ``RandomSampler``. Its state is the generator state at the start of the epoch and the
   count of indices yielded in it; ``load_state_dict`` then the first ``next()`` draw the
   epoch's ``randperm(N)`` again and fast-forward the sampler through that many indices.
b. "torchdata + ds": ``StatefulDataLoader(dataset, batch_sampler=make_batch_sampler(
   dataset, "training", 0, 1, 0, 32))``. detsamplers' chain implements the Stateful
   protocol, so StatefulDataLoader stores its state (a position and the chain's
   fingerprint) and does not fast-forward: the load is O(1).
c. "ds loader": ``detsamplers.loader.DataLoader(dataset, batch_size=32, shuffle=True,
   seed=0).get_data_loader(repeat=True, skip=k)``: no state at all, the trainer keeps the
   batch count k.

For each num_workers (0; also 2 in full mode) one StatefulDataLoader of each of a and b is
iterated from the start through the positions (in epochs: 0.5 is the middle of the first
epoch); at each, ``state_dict()`` is timed and the state kept, with the batch that the
uninterrupted run yields next. Then, for each position, a fresh loader is built and the time
from ``load_state_dict(state)`` to its first batch is timed (c: from ``get_data_loader(skip=k)``
to its first batch); with workers this includes starting them. Every resumed first batch is
checked against the uninterrupted run's (c against b's: their orders are the same). State
sizes are ``len(pickle.dumps(state))`` and ``len(json.dumps(state))`` (torchdata's state
holds a tensor: not JSON-able).

Method: ``time.perf_counter``, ``gc.collect()`` before each timed run, median of the runs;
the machine is shared and noisy: read ratios and orders of magnitude. Speed is reported,
never asserted.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.metadata
import importlib.util
import json
import os
import pickle
import platform
import statistics
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud
from _common import Trivial, cpu_model, fmt_ratio, fmt_time, load_average, usable_cpus

import detsamplers as ds
from detsamplers.loader import DataLoader

BATCH = 32
N = 10**6
EPOCH_BATCHES = -(-N // BATCH)
LOADERS = ("torchdata", "torchdata + ds", "ds loader")


@dataclass(frozen=True)
class Settings:
    mode: str
    #: Resume positions, in epochs.
    positions: tuple[float, ...]
    workers: tuple[int, ...]
    #: Timed resumes per (loader, position); state_dict() calls per position.
    repeats: int


QUICK = Settings(mode="quick", positions=(0.5, 1.5), workers=(0,), repeats=3)
FULL = Settings(
    mode="full",
    positions=(0.01, 0.25, 0.5, 0.75, 0.99, 1.5, 2.5, 3.5),
    workers=(0, 2),
    repeats=5,
)


# -- formatting and the machine --------------------------------------------------------------


def machine_line(load: str) -> str:
    return (
        f"machine:  {platform.platform()}, {cpu_model()}, {os.cpu_count()} CPUs "
        f"({usable_cpus()} usable), "
        f"load {load}\n"
        f"software: python {platform.python_version()}, torch {torch.__version__}, "
        f"numpy {np.__version__}, detsamplers {ds.__version__}, "
        f"torchdata {importlib.metadata.version('torchdata')}"
    )


def render(
    key: str,
    title: str,
    headers: list[str],
    rows: list[list[str]],
    notes: list[str],
    machine: str,
) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    out = [f"Table {key}. {title}", machine, "", line(headers)]
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(row) for row in rows)
    for note in notes:
        out.extend(textwrap.wrap(note, 100, initial_indent="  ", subsequent_indent="    "))
    return "\n".join(out)


# -- the loaders -----------------------------------------------------------------------------


def stateful_loader_class() -> type[Any]:
    module = importlib.import_module("torchdata.stateful_dataloader")
    cls: type[Any] = module.StatefulDataLoader
    return cls


def make_loader(kind: str, dataset: Trivial, workers: int) -> Any:
    if kind == "torchdata":
        return stateful_loader_class()(dataset, batch_size=BATCH, shuffle=True, num_workers=workers)
    if kind == "torchdata + ds":
        chain = ds.make_batch_sampler(dataset, "training", 0, 1, 0, BATCH)
        return stateful_loader_class()(dataset, batch_sampler=chain, num_workers=workers)
    raise ValueError(kind)


def ds_loader(dataset: Trivial, workers: int, skip: int) -> tud.DataLoader[Any]:
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=workers, seed=0)
    return loader.get_data_loader(repeat=True, skip=skip)


def to_batch(position: float) -> tuple[int, int]:
    """(epoch, batch within the epoch) of a position in epochs."""
    epoch = int(position)
    return epoch, round((position - epoch) * EPOCH_BATCHES)


@dataclass
class Snapshot:
    position: float
    batches: int
    state: Any
    expected: list[int]
    state_dict_seconds: list[float]


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def snapshots(
    kind: str, dataset: Trivial, workers: int, s: Settings
) -> tuple[list[Snapshot], float]:
    """Iterate one loader through the positions; return the snapshots and the wall time."""
    loader = make_loader(kind, dataset, workers)
    wanted = sorted(s.positions)
    out: list[Snapshot] = []
    start = time.perf_counter()
    if kind == "torchdata":  # epochs end: one iterator per epoch
        for epoch in range(int(wanted[-1]) + 1):
            iterator: Iterator[Any] = iter(loader)
            done = 0
            for position in (p for p in wanted if int(p) == epoch):
                target = to_batch(position)[1]
                for _ in islice(iterator, target - done):
                    pass
                out.append(_snapshot(loader, iterator, position, epoch * EPOCH_BATCHES + target, s))
                done = target + 1
            if epoch < int(wanted[-1]):
                for _ in iterator:
                    pass
            del iterator
    else:  # one endless stream
        iterator = iter(loader)
        done = 0
        for position in wanted:
            epoch, within = to_batch(position)
            target = epoch * EPOCH_BATCHES + within
            for _ in islice(iterator, target - done):
                pass
            out.append(_snapshot(loader, iterator, position, target, s))
            done = target + 1
        del iterator
    return out, time.perf_counter() - start


def _snapshot(
    loader: Any, iterator: Iterator[Any], position: float, batches: int, s: Settings
) -> Snapshot:
    seconds: list[float] = []
    state: Any = None
    for _ in range(s.repeats):
        t0 = time.perf_counter()
        state = loader.state_dict()
        seconds.append(time.perf_counter() - t0)
    expected = next(iterator).tolist()
    return Snapshot(position, batches, state, expected, seconds)


def time_resume(
    kind: str, dataset: Trivial, workers: int, snap: Snapshot, s: Settings
) -> list[float]:
    samples: list[float] = []
    for _ in range(s.repeats):
        gc.collect()
        if kind == "ds loader":
            t0 = time.perf_counter()
            loader = ds_loader(dataset, workers, snap.batches)
            iterator = iter(loader)
            batch = next(iterator)
        else:
            loader = make_loader(kind, dataset, workers)
            t0 = time.perf_counter()
            loader.load_state_dict(snap.state)
            iterator = iter(loader)
            batch = next(iterator)
        samples.append(time.perf_counter() - t0)
        if batch.tolist() != snap.expected:
            raise RuntimeError(f"{kind}: the resumed batch at {snap.position} epochs differs")
        del iterator, loader
    return samples


def state_sizes(state: Any) -> tuple[int, int | None]:
    pickled = len(pickle.dumps(state))
    try:
        as_json: int | None = len(json.dumps(state))
    except TypeError:
        as_json = None
    return pickled, as_json


# -- the tables ------------------------------------------------------------------------------


def run(s: Settings) -> dict[str, Any]:
    dataset = Trivial(N)
    results: dict[str, Any] = {"settings": asdict(s), "n": N, "batch_size": BATCH, "runs": []}
    for workers in s.workers:
        snaps: dict[str, list[Snapshot]] = {}
        walls: dict[str, float] = {}
        for kind in LOADERS[:2]:
            snaps[kind], walls[kind] = snapshots(kind, dataset, workers, s)
        for i, position in enumerate(sorted(s.positions)):
            record: dict[str, Any] = {"num_workers": workers, "position_epochs": position}
            for kind in LOADERS:
                snap = snaps[LOADERS[1] if kind == "ds loader" else kind][i]
                record["batches"] = snap.batches
                resume = time_resume(kind, dataset, workers, snap, s)
                entry: dict[str, Any] = {
                    "resume_seconds": _median(resume),
                    "resume_samples": resume,
                }
                if kind != "ds loader":
                    pickled, as_json = state_sizes(snap.state)
                    entry.update(
                        state_dict_seconds=_median(snap.state_dict_seconds),
                        state_dict_samples=snap.state_dict_seconds,
                        pickle_bytes=pickled,
                        json_bytes=as_json,
                    )
                record[kind] = entry
            results["runs"].append(record)
        results.setdefault("iteration_seconds", {})[str(workers)] = walls
    return results


def table_state(results: dict[str, Any], machine: str) -> str:
    headers = ["loader", "num_workers", "state_dict() median", "max", "pickle", "JSON"]
    rows: list[list[str]] = []
    for kind in LOADERS[:2]:
        for workers in results["settings"]["workers"]:
            entries = [r[kind] for r in results["runs"] if r["num_workers"] == workers]
            medians = [e["state_dict_seconds"] for e in entries]
            pickled = max(e["pickle_bytes"] for e in entries)
            sizes = [e["json_bytes"] for e in entries]
            as_json = "not JSON-able" if None in sizes else f"{max(sizes):,} B"
            rows.append(
                [
                    kind,
                    str(workers),
                    fmt_time(_median(medians)),
                    fmt_time(max(medians)),
                    f"{pickled:,} B",
                    as_json,
                ]
            )
    positions = ", ".join(f"{p:g}" for p in results["settings"]["positions"])
    notes = [
        f"StatefulDataLoader.state_dict() at each position ({positions} epochs): the median "
        "over the positions of the per-position medians, and the largest. Sizes: the largest "
        "over the positions. torchdata's state holds the sampler's generator state (a "
        "ByteTensor) and the count yielded; detsamplers' a position, the chain's fingerprint "
        "and configuration.",
        "ds loader (get_data_loader(skip=k)) has no state: the trainer keeps k, one integer.",
    ]
    title = f"StatefulDataLoader state_dict(): time and size (N = 1e6, B = {BATCH})"
    return render("t1", title, headers, rows, notes, machine)


def table_resume(results: dict[str, Any], machine: str) -> str:
    headers = [
        "num_workers",
        "epochs",
        "batch k",
        "torchdata",
        "torchdata + ds",
        "ds loader",
        "(torchdata+ds)/torchdata",
        "ds loader/torchdata",
    ]
    rows: list[list[str]] = []
    for r in results["runs"]:
        base = r["torchdata"]["resume_seconds"]
        rows.append(
            [
                str(r["num_workers"]),
                f"{r['position_epochs']:g}",
                f"{r['batches']:,}",
                fmt_time(base),
                fmt_time(r["torchdata + ds"]["resume_seconds"]),
                fmt_time(r["ds loader"]["resume_seconds"]),
                fmt_ratio(r["torchdata + ds"]["resume_seconds"] / base),
                fmt_ratio(r["ds loader"]["resume_seconds"] / base),
            ]
        )
    repeats = results["settings"]["repeats"]
    notes = [
        "torchdata and torchdata + ds: time from load_state_dict(state) on a freshly built "
        "StatefulDataLoader to its first batch (each checked equal to the uninterrupted run's); "
        "ds loader: from get_data_loader(repeat=True, skip=k) to its first batch. With "
        f"workers, starting them is included. Median of {repeats} runs. batch k = global "
        f"batch index ({EPOCH_BATCHES:,} an epoch). Ratios below 1 = faster than torchdata.",
    ]
    title = "StatefulDataLoader resume: time to the first batch (lower is better)"
    return render("t2", title, headers, rows, notes, machine)


# -- output ----------------------------------------------------------------------------------


def write_plot(path: Path, results: dict[str, Any], machine: str) -> None:
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    fig, ax = plt.subplots(figsize=(8, 5))
    styles = {0: "-", 2: "--"}
    for color, kind in zip(("C1", "C0", "C2"), LOADERS, strict=True):
        for workers in results["settings"]["workers"]:
            runs = [r for r in results["runs"] if r["num_workers"] == workers]
            xs = [r["position_epochs"] for r in runs]
            ys = [r[kind]["resume_seconds"] for r in runs]
            label = f"{kind}, num_workers={workers}"
            ax.plot(xs, ys, styles.get(workers, ":"), marker="o", color=color, label=label)
    ax.set_title(f"Resume: time to the first batch, N=1e6, B={BATCH}", fontsize=10)
    ax.set_xlabel("position (epochs)")
    ax.set_ylabel("seconds")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(machine, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="torchdata's StatefulDataLoader state_dict and resume, with detsamplers.",
        epilog="The module docstring explains each table.",
    )
    parser.add_argument("--quick", action="store_true", help="2 positions, num_workers 0, < 20 s")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the raw figures here")
    parser.add_argument(
        "--plot", type=Path, metavar="PATH", help="save a PNG here (needs matplotlib)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = QUICK if args.quick else FULL
    if importlib.util.find_spec("torchdata") is None:
        print("torchdata is not installed (the `compare` extra): nothing to measure")
        return 0
    started = time.perf_counter()
    load_before = load_average()
    with warnings.catch_warnings():  # torchdata 0.11 calls torch's deprecated set_vital
        warnings.simplefilter("ignore", UserWarning)
        results = run(settings)
    load = f"{load_before} at the start, {load_average()} at the end"
    machine = machine_line(load)
    results["machine"] = machine
    print(table_state(results, machine), end="\n\n")
    print(table_resume(results, machine), end="\n\n")
    walls = results["iteration_seconds"]
    wall = time.perf_counter() - started
    results["wall_seconds"] = wall
    for workers, by_kind in walls.items():
        spent = ", ".join(f"{kind} {fmt_time(t)}" for kind, t in by_kind.items())
        print(f"iterating to the positions, num_workers={workers}: {spent}")
    print(f"{settings.mode} mode: {wall:.1f} s wall time")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
        print(f"raw figures written to {args.json}")
    if args.plot:
        if importlib.util.find_spec("matplotlib") is None:
            print(f"--plot: matplotlib is not importable from {sys.executable}", file=sys.stderr)
        else:
            write_plot(args.plot, results, machine)
            print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
