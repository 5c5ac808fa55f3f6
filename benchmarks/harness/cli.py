"""The command line every table script shares, and its run loop."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.machine import load_average, machine_info, machine_line
from harness.output import matplotlib_missing, write_json
from harness.table import Table, render


@dataclass
class Run:
    """What a script is asked to do, and the tables it has printed so far."""

    quick: bool
    json: Path | None
    plot: Path | None
    info: dict[str, str]
    machine: str
    tables: list[Table] = field(default_factory=list)

    def emit(self, table: Table) -> None:
        """Print ``table`` under the machine line (with the load now) and keep it."""
        self.tables.append(table)
        print(render(table, self.machine_now()), end="\n\n", flush=True)

    def machine_now(self) -> str:
        """The machine line with the load when the run started and now."""
        return machine_line(self.info, load_end=load_average())


def parser(description: str, quick_help: str) -> argparse.ArgumentParser:
    """``--quick``, ``--json PATH`` and ``--plot PATH``; scripts add their own options."""
    out = argparse.ArgumentParser(
        description=description, epilog="The module docstring explains each table."
    )
    out.add_argument("--quick", action="store_true", help=quick_help)
    out.add_argument("--json", type=Path, metavar="PATH", help="write the raw figures here")
    out.add_argument("--plot", type=Path, metavar="PATH", help="save a PNG here (needs matplotlib)")
    return out


def run(
    args: argparse.Namespace,
    versions: dict[str, str],
    body: Callable[[Run], None],
    plot: Callable[[Path, list[Table], str], None] | None,
    settings: dict[str, object],
) -> int:
    """Probe the machine, run ``body``, then write the JSON and the plot if asked.

    Speed is reported, never asserted: this returns 0 unless something raised.
    """
    plot_problem = matplotlib_missing() if args.plot else None
    if plot_problem:
        print(plot_problem, file=sys.stderr)
    started = time.perf_counter()
    info = machine_info(versions)
    state = Run(args.quick, args.json, args.plot, info, machine_line(info))
    body(state)
    wall = time.perf_counter() - started
    mode = "quick" if args.quick else "full"
    print(f"{mode} mode: {wall:.1f} s wall time, load {load_average()} at the end")
    if args.json:
        info = {**info, "load_1min_end": load_average()}
        write_json(args.json, settings, info, state.tables, wall)
        print(f"raw figures written to {args.json}")
    if args.plot and plot is not None:
        if plot_problem:
            print(plot_problem, file=sys.stderr)
        else:
            plot(args.plot, state.tables, state.machine_now())
            print(f"plot written to {args.plot}")
    return 0


def main_guard(main: Callable[[Sequence[str] | None], int]) -> None:
    """``sys.exit(main(None))``, for the scripts' ``if __name__ == "__main__"``."""
    sys.exit(main(None))
