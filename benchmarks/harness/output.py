"""The raw figures as JSON, and the plots (matplotlib, optional)."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.table import Cell, Table, jsonable


def write_json(
    path: Path, settings: dict[str, Any], info: dict[str, str], tables: list[Table], wall: float
) -> None:
    """Settings, machine, wall time and every table (cells as dicts) to ``path``."""
    payload = {
        "settings": settings,
        "machine": info,
        "wall_seconds": wall,
        "tables": [
            {
                "key": t.key,
                "title": t.title,
                "headers": t.headers,
                "rows": t.rows,
                "notes": t.notes,
                "records": jsonable(t.records),
            }
            for t in tables
        ],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def matplotlib_missing() -> str | None:
    """Why no plot can be drawn, or None when matplotlib is importable."""
    if importlib.util.find_spec("matplotlib") is None:
        return (
            f"--plot: matplotlib is not importable from {sys.executable}; no PNG is written "
            "(pip install matplotlib, or run with a Python that has it)."
        )
    return None


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display)."""
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def series(records: list[dict[str, Any]], x_key: str, name: str) -> tuple[list[float], list[float]]:
    """The measured, non-zero ``(x, value)`` points of peer ``name`` across ``records``."""
    xs: list[float] = []
    ys: list[float] = []
    for record in records:
        cell: Cell | None = record["cells"].get(name)
        if cell is not None and cell.measured and cell.value:
            xs.append(record[x_key])
            ys.append(cell.value)
    return xs, ys


def plot_lines(
    ax: Any,
    records: list[dict[str, Any]],
    x_key: str,
    names: dict[str, str],
    *,
    suffix: str = "",
    style: str = "-",
) -> None:
    """One line per peer (``names`` maps a cell key to its label), log-log axes."""
    for (key, label), color in zip(names.items(), itertools.cycle(f"C{i}" for i in range(10))):
        xs, ys = series(records, x_key, key)
        if xs:
            ax.plot(xs, ys, style, marker="o", color=color, label=label + suffix)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def plot_bars(
    ax: Any, groups: Sequence[str], values: dict[str, list[float | None]], *, log: bool = True
) -> None:
    """Grouped bars: one group per entry of ``groups``, one bar per peer (None: no bar)."""
    width = 0.8 / max(1, len(values))
    for i, ((label, ys), color) in enumerate(
        zip(values.items(), itertools.cycle(f"C{i}" for i in range(10)))
    ):
        xs = [g + i * width for g, y in enumerate(ys) if y]
        hs = [y for y in ys if y]
        ax.bar(xs, hs, width, color=color, label=label)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))], groups, fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)


def save(fig: Any, path: Path, machine: str) -> None:
    """Put the machine line on ``fig`` and save it as a PNG."""
    plt = pyplot()
    lines = [part for line in machine.splitlines() for part in textwrap.wrap(line, 110)]
    fig.suptitle("\n".join(lines), fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
