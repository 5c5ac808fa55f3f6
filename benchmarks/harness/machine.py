"""The machine and software line every table starts with, load average included."""

from __future__ import annotations

import importlib.metadata
import os
import platform

import numpy as np
import torch

import detsamplers as ds


def load_average() -> str:
    """The 1-minute load average, or ``?``."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def usable_cpus() -> str:
    """CPUs this process may run on, or ``?``."""
    try:
        return str(len(os.sched_getaffinity(0)))
    except AttributeError:
        return "?"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for text in f:
                if text.startswith("model name"):
                    return text.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def version(distribution: str) -> str:
    """The installed version of ``distribution``, or "not installed"."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_info(peers: dict[str, str] | None = None) -> dict[str, str]:
    """Platform, CPUs, load and versions; ``peers`` maps a peer's name to its version."""
    return {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": str(os.cpu_count()),
        "cpus_usable": usable_cpus(),
        "load_1min": load_average(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "detsamplers": ds.__version__,
        **(peers or {}),
    }


_BASE = ("platform", "cpu", "cpu_count", "cpus_usable", "load_1min", "python", "torch", "numpy")


def machine_line(info: dict[str, str], load_end: str | None = None) -> str:
    """Two lines: the machine with its load, and the software versions."""
    load = f"load {info['load_1min']}"
    if load_end is not None:
        load = f"load {info['load_1min']} at the start, {load_end} at the end"
    software = ", ".join(f"{k} {v}" for k, v in info.items() if k not in _BASE)
    return (
        f"machine:  {info['platform']}, {info['cpu']}, {info['cpu_count']} CPUs "
        f"({info['cpus_usable']} usable), {load}\n"
        f"software: python {info['python']}, torch {info['torch']}, numpy {info['numpy']}, "
        f"{software}"
    )
