"""Under torchrun: an example's run, then its resume from a copy, in the same processes.

One launch instead of two: the first run stops mid-epoch and saves through the framework's
own checkpointing; every rank then waits until all have finished, rank 0 copies the run's
folder, and each rank calls the example's ``main`` again on the copy, resuming from the
checkpoint on disk (nothing carries over in memory: a new trainer, model and loader)::

    python -m torch.distributed.run --nproc_per_node=2 tests/frameworks/run_twice.py \\
        examples/lightning_train.py FIRST SECOND --first ARGS... --second ARGS...

``FIRST`` is left as the first run made it, so another launch can resume it on another
number of processes. ``--checks PATH`` runs ``check(FIRST)`` of the file at ``PATH`` first.
``--next SCRIPT ARGS...`` after the second run's arguments (any number of them) runs another
example's ``main`` in turn, once every rank has finished the run before it: a launch (torch and
the framework imported on each rank, a rendezvous) serves several scenarios. ``--copy FROM TO``
among them copies a finished run's folder (rank 0, all ranks waiting), for a resume to follow.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

WAIT = 180  # seconds a rank waits for the others before it fails
JOURNAL = "DETSAMPLERS_TEST_JOURNAL"  # a file each rank notes each run's start and end in


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # so that worker processes can unpickle its classes
    spec.loader.exec_module(module)
    return module


def run(example: ModuleType, args: list[str]) -> None:
    """``example.main(args)``, noted before and after in the file ``$DETSAMPLERS_TEST_JOURNAL``
    (when set): a test sharing the launch tells whether its own runs ended."""
    note = os.environ.get(JOURNAL)
    line = {"rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"])}
    line |= {"run": f"{example.__name__} {' '.join(args)}", "out": out_of(args)}
    if note:
        with open(note, "a") as journal:
            journal.write(json.dumps({**line, "ended": False}) + "\n")
    example.main(args)
    if note:
        with open(note, "a") as journal:
            journal.write(json.dumps({**line, "ended": True}) + "\n")


def out_of(args: list[str]) -> str | None:
    """The folder a run writes to (its ``--out``)."""
    return args[args.index("--out") + 1] if "--out" in args[:-1] else None


def wait_for(paths: list[Path]) -> None:
    deadline = time.monotonic() + WAIT
    while not all(path.exists() for path in paths):
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {WAIT} s for {[str(p) for p in paths]}")
        time.sleep(0.05)


def keep_process_group() -> Any:
    """Keep the first run's process group for the second; return the real destroy.

    A group destroyed and created again in the same processes can hang (one rank finds the
    first group's keys in torchrun's store); so the examples' ``destroy_process_group``
    waits for the end, and their ``init_process_group`` keeps a live group.
    """
    import torch.distributed as dist

    init, destroy = dist.init_process_group, dist.destroy_process_group

    def init_once(*args: Any, **kwargs: Any) -> None:
        if not dist.is_initialized():
            init(*args, **kwargs)

    dist.init_process_group = init_once  # type: ignore[assignment]
    dist.destroy_process_group = lambda *args, **kwargs: None  # type: ignore[assignment]
    return destroy


def fresh_process_state() -> None:
    """Forget what a new process would not know: Accelerate's process-wide singletons.

    As Accelerate's own tests do between runs; the next ``Accelerator`` finds the live
    process group (:func:`keep_process_group`).
    """
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(reset_partial_state=True)
        state.GradientState._reset_state()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("script", type=Path)
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--checks", type=Path, default=None)
    parser.add_argument("--first-args", nargs=argparse.REMAINDER, required=True)
    argv = sys.argv[1:]
    split = argv.index("--second-args")
    args = parser.parse_args(argv[:split])
    second_args, *then = runs_of(argv[split + 1 :])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    marks = args.first.parent / f"{args.first.name}.marks"
    marks.mkdir(parents=True, exist_ok=True)

    if args.checks is not None:
        load(args.checks).check(args.first)
    destroy = keep_process_group()
    example = load(args.script)
    run(example, args.first_args)
    (marks / f"done-{rank}").touch()
    if rank == 0:
        wait_for([marks / f"done-{r}" for r in range(world)])
        shutil.copytree(args.first, args.second)
        (marks / "copied").touch()
    wait_for([marks / "copied"])
    fresh_process_state()
    run(example, second_args)
    in_turn(then)
    destroy()


def runs_of(argv: list[str]) -> list[list[str]]:
    """``argv`` split at each ``--next`` and ``--copy``: the first run's arguments, then each
    next run's script and arguments (``["--copy", FROM, TO]`` for a copy)."""
    runs: list[list[str]] = [[]]
    for arg in argv:
        if arg == "--next":
            runs.append([])
        elif arg == "--copy":
            runs.append([arg])
        else:
            runs[-1].append(arg)
    return runs


def in_turn(runs: list[list[str]]) -> None:
    """Each ``[script, *args]`` of ``runs``: its ``main(args)``, once all ranks are done with
    the run before (the process group is kept, :func:`keep_process_group`); each
    ``["--copy", FROM, TO]``: rank 0 copies the folder ``FROM`` to ``TO``."""
    import torch.distributed as dist

    for script, *args in runs:
        dist.barrier()
        if script == "--copy":
            if dist.get_rank() == 0:
                shutil.copytree(*args)
            continue
        fresh_process_state()
        run(load(Path(script)), args)


if __name__ == "__main__":
    main()
