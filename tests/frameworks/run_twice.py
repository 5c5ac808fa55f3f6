"""Under torchrun: an example's run, then its resume from a copy, in the same processes.

One launch instead of two: the first run stops mid-epoch and saves through the framework's
own checkpointing; every rank then waits until all have finished, rank 0 copies the run's
folder, and each rank calls the example's ``main`` again on the copy, resuming from the
checkpoint on disk (nothing carries over in memory: a new trainer, model and loader)::

    python -m torch.distributed.run --nproc_per_node=2 tests/frameworks/run_twice.py \\
        examples/lightning_train.py FIRST SECOND --first ARGS... --second ARGS...

``FIRST`` is left as the first run made it, so another launch can resume it on another
number of processes. ``--checks PATH`` runs ``check(FIRST)`` of the file at ``PATH`` first.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import time
from pathlib import Path
from types import ModuleType

WAIT = 180  # seconds a rank waits for the others before it fails


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # so that worker processes can unpickle its classes
    spec.loader.exec_module(module)
    return module


def wait_for(paths: list[Path]) -> None:
    deadline = time.monotonic() + WAIT
    while not all(path.exists() for path in paths):
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {WAIT} s for {[str(p) for p in paths]}")
        time.sleep(0.05)


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
    second_args = argv[split + 1 :]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    marks = args.first.parent / f"{args.first.name}.marks"
    marks.mkdir(parents=True, exist_ok=True)

    if args.checks is not None:
        load(args.checks).check(args.first)
    example = load(args.script)
    example.main(args.first_args)
    (marks / f"done-{rank}").touch()
    if rank == 0:
        wait_for([marks / f"done-{r}" for r in range(world)])
        shutil.copytree(args.first, args.second)
        (marks / "copied").touch()
    wait_for([marks / "copied"])
    example.main(second_args)


if __name__ == "__main__":
    main()
