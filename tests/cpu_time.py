"""Opt-in measurement of the suite: each test's wall time and CPU time, as JSON lines.

``DETSAMPLERS_TEST_CPU=path pytest ...`` appends one line per test to ``path``::

    {"test": nodeid, "wall": s, "cpu": s, "cpu_children": s, "markers": [...], "worker": "gw0"}

``wall`` is the time from the start of the test's setup to the end of its teardown (a session or
module fixture counts in the first test that uses it). ``cpu`` is this process's user + system time
over the same span (``RUSAGE_SELF``) and ``cpu_children`` that of its child processes
(``RUSAGE_CHILDREN``: torchrun, scripts, servers, pip), which the kernel counts once a child has
been waited for (a server stopped at the end of the session is counted in the last test).
``wall - cpu - cpu_children`` is waiting (sleeps, timeouts, rendezvous, the network, other
processes' turns on the CPU): what running tests side by side can overlap on a machine of few
cores. Lines are appended (``O_APPEND``, one write each), so several pytest-xdist workers can share
one file. Without the variable the plugin does nothing.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Generator
from pathlib import Path

import pytest

ENV = "DETSAMPLERS_TEST_CPU"


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    path = os.environ.get(ENV)
    if not path:
        return (yield)
    wall = time.perf_counter()
    cpu, children = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    try:
        return (yield)
    finally:
        line = {
            "test": item.nodeid,
            "wall": round(time.perf_counter() - wall, 4),
            "cpu": round(_cpu(resource.RUSAGE_SELF) - cpu, 4),
            "cpu_children": round(_cpu(resource.RUSAGE_CHILDREN) - children, 4),
            "markers": sorted({mark.name for mark in item.iter_markers()}),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        }
        data = (json.dumps(line) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def summary(path: str, top: int = 15) -> str:
    """Totals of a file written by the plugin, and its ``top`` files by wall time."""
    files: dict[str, list[float]] = {}
    for text in Path(path).read_text().splitlines():
        line = json.loads(text)
        row = files.setdefault(line["test"].split("::")[0], [0.0, 0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += line["wall"]
        row[2] += line["cpu"] + line["cpu_children"]
        row[3] += line["cpu_children"]
    tests, wall, cpu, children = (sum(row[i] for row in files.values()) for i in range(4))
    out = [
        f"{int(tests)} tests: wall {wall:.1f} s, CPU {cpu:.1f} s ({children:.1f} s in children),"
        f" waiting {wall - cpu:.1f} s ({(wall - cpu) / max(wall, 1e-9):.0%} of the wall time)",
        f"{'file':60} {'tests':>5} {'wall':>8} {'cpu':>8} {'wait':>6}",
    ]
    for name, row in sorted(files.items(), key=lambda kv: -kv[1][1])[:top]:
        waiting = (row[1] - row[2]) / max(row[1], 1e-9)
        out.append(f"{name:60} {int(row[0]):5} {row[1]:8.1f} {row[2]:8.1f} {waiting:6.0%}")
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(summary(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 15))
