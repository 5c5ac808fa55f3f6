"""A hung run is ended, with the stacks of its processes: by ``launch``'s own timeout, and by an
interruption of its wait (pytest-timeout's, as a hung test in CI gets it).

These two launches do not use the shared ``demo`` run, so they live apart from
tests/trial/test_trial_failure_distributed.py (one of tests/parallel.py's ``DEMO_FILES``, which
share one worker) and run beside that group on another pytest-xdist worker.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from detsamplers.trial._demo import launch, processes

HERE = os.path.dirname(os.path.abspath(__file__))
# The times a hung run of 2 ranks is given before it is ended, in turn: its 4 processes must
# import torch and reach the hang first (about 5 s unloaded; 45 s fell short once under a CI
# load of 8). A run whose workers were not all in the hang a second before its time ran out
# (HANG_READY_DIR tells) proves nothing, and is launched again with the next, longer time.
HUNG_SECONDS = (30, 75)


@pytest.mark.distributed
def test_a_hung_run_is_ended_with_the_stacks_of_its_ranks_and_their_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``launch`` ends a run that does not exit, and says where every process was."""
    monkeypatch.setenv("PYTHONPATH", HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for seconds in HUNG_SECONDS:
        ready = tmp_path / f"ready-{seconds}"
        ready.mkdir()
        monkeypatch.setenv("HANG_READY_DIR", str(ready))
        started, begun = time.monotonic(), time.time()
        with pytest.raises(RuntimeError, match=f"no exit within {seconds} s") as raised:
            log = str(tmp_path / f"log-{seconds}")
            launch(2, [], log, module="hangs_in_a_worker", timeout=seconds)
        assert time.monotonic() - started < seconds + 10.0 + 30  # timeout, stacks, slack
        assert not _running("hangs_in_a_worker"), "a process of the hung run outlived launch"
        if _in_the_hang(ready, workers=2, before=begun + seconds - 1.0):
            break
    else:
        pytest.fail(f"the hung run's workers never reached the hang within {seconds} s")
    message = str(raised.value)
    # Both ranks, in torch's wait for a batch, and both workers, in the sample's sleep.
    assert len(re.findall(r"line \d+ in _try_get_data\n", message)) == 2, message
    assert message.count('hangs_in_a_worker.py", line 22 in __getitem__') == 2, message


def _in_the_hang(ready: Path, workers: int, before: float) -> bool:
    """Whether ``workers`` workers wrote their file in ``ready`` (on entering the hang) before
    the time ``before`` (seconds since the epoch)."""
    return sum(path.stat().st_mtime < before for path in ready.iterdir()) >= workers


def _running(module: str) -> list[int]:
    """The live processes whose command line names ``module`` (ranks and their workers)."""
    out = []
    for pid, (state, _, _) in processes().items():
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            if state != "Z" and module.encode() in f.read():
                out.append(pid)
    return out


def _alarm_once_hung(ready: Path, workers: int, seconds: float) -> threading.Thread:
    """A thread that, once ``workers`` files are in ``ready`` (each worker of the hung run in
    its sleep), brings the pending SIGALRM (pytest-timeout's) forward to now; or lets it come
    at its time if they are not there within ``seconds``."""

    def watch() -> None:
        deadline = time.monotonic() + seconds
        while len(os.listdir(ready)) < workers and time.monotonic() < deadline:
            time.sleep(0.1)
        if len(os.listdir(ready)) >= workers:
            signal.setitimer(signal.ITIMER_REAL, 0.5)  # this thread has ended by then

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


# The interrupted run's time limit, when its workers never report the hang: far beyond the
# time they take to reach it on 2 loaded cores; they report it in a few seconds.
INTERRUPT_SECONDS = 300


@pytest.mark.distributed
@pytest.mark.timeout(INTERRUPT_SECONDS)
def test_a_run_whose_wait_is_interrupted_is_ended_and_the_interruption_carries_its_stacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Here the interruption is pytest-timeout's own, as a hung test in CI gets it: its alarm
    comes as soon as both workers are in the hang (an event, not a guess of how long 4
    processes take to import torch and get there under load)."""
    monkeypatch.setenv("PYTHONPATH", HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ready = tmp_path / "ready"
    ready.mkdir()
    monkeypatch.setenv("HANG_READY_DIR", str(ready))
    started = time.monotonic()
    watcher = _alarm_once_hung(ready, workers=2, seconds=INTERRUPT_SECONDS - 30)
    with pytest.raises(pytest.fail.Exception, match="Timeout") as raised:
        launch(2, [], str(tmp_path / "log"), module="hangs_in_a_worker", timeout=600)
    watcher.join()
    assert len(os.listdir(ready)) == 2, "the hung run's workers never reached the hang"
    assert time.monotonic() - started < INTERRUPT_SECONDS - 30  # the event's alarm, not the limit
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    if sys.version_info >= (3, 11):  # notes are new in 3.11
        assert notes.count('hangs_in_a_worker.py", line 22 in __getitem__') == 2, notes
    assert not _running("hangs_in_a_worker"), "a process of the stopped run outlived launch"
