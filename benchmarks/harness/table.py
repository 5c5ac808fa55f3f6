"""A measured figure, a table of them, and the table as text."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.fmt import fmt_bytes, fmt_ratio


@dataclass
class Cell:
    """One measured (or not measured) figure.

    ``status`` is "ok", "capped" (stopped at the time cap, the value covers what was
    done), "skipped" (not run; ``note`` says why) or "not installed".
    """

    status: str
    value: float | None = None
    samples: list[float] = field(default_factory=list)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def measured(self) -> bool:
        return self.value is not None and self.status in ("ok", "capped")


def not_installed(reason: str = "not installed") -> Cell:
    """The cell of a peer whose package is missing."""
    return Cell("not installed", note=reason)


def skipped(note: str, **extra: Any) -> Cell:
    """A cell not run, with the reason shown in the table."""
    return Cell("skipped", note=note, extra=dict(extra))


def materialises(n: int) -> Cell:
    """The cell of a peer that would hold all ``n`` indices."""
    return skipped("skipped: materialises N", reason=f"would hold {fmt_bytes(8 * n)}+ of indices")


@dataclass
class Table:
    """A rendered table plus the raw figures behind it."""

    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str]
    records: list[dict[str, Any]]


def show(cell: Cell, fmt: Callable[[float], str]) -> str:
    """The cell's value through ``fmt`` (``*`` when capped), else its note or status."""
    if not cell.measured:
        return cell.note or cell.status
    assert cell.value is not None
    return fmt(cell.value) + ("*" if cell.status == "capped" else "")


def show_ratio(ours: Cell, theirs: Cell) -> str:
    """``ours / theirs``, or "-" when either is missing or zero (below resolution)."""
    if ours.measured and theirs.measured and ours.value and theirs.value:
        return fmt_ratio(ours.value / theirs.value)
    return "-"


def render(table: Table, machine: str) -> str:
    """The table as aligned text under its title and the machine line, notes wrapped."""
    widths = [len(h) for h in table.headers]
    for row in table.rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    out = [f"Table {table.key}. {table.title}", machine, "", line(table.headers)]
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(row) for row in table.rows)
    for note in table.notes:
        out.extend(textwrap.wrap(note, 100, initial_indent="  ", subsequent_indent="    "))
    return "\n".join(out)


def from_jsonable(value: Any) -> Any:
    """The inverse of ``jsonable``: every dict with exactly ``Cell``'s fields is a ``Cell``.

    Examples:
        >>> from_jsonable({"a": [jsonable(Cell("ok", 1.5))]})
        {'a': [Cell(status='ok', value=1.5, samples=[], note='', extra={})]}
    """
    if isinstance(value, dict):
        if set(value) == set(Cell.__dataclass_fields__):
            return Cell(**value)
        return {k: from_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_jsonable(v) for v in value]
    return value


def jsonable(value: Any) -> Any:
    """``value`` with every ``Cell`` turned into a dict, for ``json.dumps``."""
    if isinstance(value, Cell):
        return asdict(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value
