"""A shielded worker stopped holding torch's ``done_event`` lock (NOTE [ failing rank exits ]).

Run as ``python shield_held_lock.py METHOD...`` (``fork``, ``spawn``): for each start method
in turn, with a loader of its own, the worker takes the lock that torch's
``done_event.is_set()`` takes and sends itself SIGTERM inside it, after ``fit`` failed;
the parent then stops its workers as torch does, and prints the method and how long that
took. A worker that exits with the lock held makes that stop wait forever.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

import torch.utils.data as tud

from detsamplers.trial._shield import failure_flag, shield_workers

STOP_AT = 8


def _done_event() -> Any:
    frame = sys._getframe(1)
    while frame.f_code.co_name != "_worker_loop":
        assert frame.f_back is not None, "not in torch's worker loop"
        frame = frame.f_back
    return frame.f_locals["done_event"]


class StopsInsideIsSet(tud.Dataset[int]):
    """Index ``STOP_AT`` is read with the event's Condition held, as ``is_set()`` holds it."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        if index == STOP_AT:
            with _done_event()._cond:
                signal.raise_signal(signal.SIGTERM)  # the handler runs before the next line
                time.sleep(60)
        return index


def main(method: str) -> None:
    flag = failure_flag()
    flag.value = True  # fit failed: a stop signal now ends the workers
    data = StopsInsideIsSet()  # plain ints: no tensor storage shared through the dead worker
    loader = tud.DataLoader(
        data,
        batch_size=None,
        num_workers=1,
        prefetch_factor=2,
        multiprocessing_context=method,
        timeout=60,
    )
    iterator = iter(shield_workers(loader, (signal.SIGTERM,), flag))
    # Taking item STOP_AT - 2 hands the worker index STOP_AT (torch keeps two indices ahead).
    # Item STOP_AT - 1 may die with the worker: its queue's feeder thread may not have sent
    # it before the exit, so it is not asked for.
    assert [next(iterator) for _ in range(STOP_AT - 1)] == list(range(STOP_AT - 1))
    worker = iterator._workers[0]  # type: ignore[attr-defined]
    worker.join(60)
    assert worker.exitcode == 0, worker.exitcode
    started = time.monotonic()
    stop = threading.Thread(target=iterator._shutdown_workers, daemon=True)  # type: ignore[attr-defined]
    stop.start()
    stop.join(30)
    verdict = "hung" if stop.is_alive() else "stopped"
    print(method, verdict, f"{time.monotonic() - started:.1f}", flush=True)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        main(name)
