"""Numbers as text: three significant digits and a unit."""

from __future__ import annotations


def fmt_time(seconds: float) -> str:
    """Three significant digits in us, ms or s."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def fmt_ratio(ratio: float) -> str:
    """A ratio; below 0.1 as ``1/k``."""
    if ratio >= 100:
        return f"{ratio:,.0f}"
    if ratio >= 0.1:
        return f"{ratio:.3g}"
    if ratio > 0:
        return f"1/{1 / ratio:,.0f}"
    return "0"


def fmt_rate(per_second: float) -> str:
    """A rate in G/s, M/s, k/s or /s."""
    for scale, unit in ((1e9, "G/s"), (1e6, "M/s"), (1e3, "k/s")):
        if per_second >= scale:
            return f"{per_second / scale:.3g} {unit}"
    return f"{per_second:.3g} /s"


def fmt_bytes(size: float) -> str:
    """A size in GB, MB, kB or B (powers of 10)."""
    for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:.0f} B"


def fmt_n(n: int) -> str:
    """``1e6`` for a power of ten, else the number."""
    exponent = len(str(n)) - 1
    return f"1e{exponent}" if n == 10**exponent else str(n)
