"""A process's peak resident set, read from ``/proc/self/status`` (Linux), in MiB.

Standard library only, unlike ``_common.py`` (which imports torch and detsamplers): the
peers' scripts run each peer in a process of its own, in the peers' venv, and report that
process's peak, so importing this module adds neither the library nor torch to it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["growth_since", "reset_peak"]


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak() -> float:
    """Reset the peak resident set to the current one (``/proc/self/clear_refs``); MiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_mb("VmRSS")


def growth_since(before: float) -> float:
    """The peak resident set since :func:`reset_peak` less ``before``, in MiB."""
    return _status_mb("VmHWM") - before
