"""Under torchrun: several examples' runs, one after the other, in the same processes.

One launch instead of one per run, for runs on the same number of processes that need
nothing from each other's end (tests/frameworks/run_twice.py copies a run between its two)::

    python -m torch.distributed.run --nproc_per_node=1 tests/frameworks/run_in_turn.py \\
        examples/torchrun_train.py ARGS... --next examples/dcp_train.py ARGS...

Each run is the example's ``main`` with a new trainer, model and loader, as in a launch of its
own; the process group is kept between runs, and every rank has finished a run before any
starts the next.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__:  # imported as tests.frameworks.run_in_turn (pytest's --doctest-modules)
    from .run_twice import in_turn, keep_process_group, load, run, runs_of
else:  # run as a script under torchrun: its folder is sys.path[0]
    from run_twice import in_turn, keep_process_group, load, run, runs_of


def main() -> None:
    (script, *args), *then = runs_of(sys.argv[1:])
    destroy = keep_process_group()
    run(load(Path(script)), args)
    in_turn(then)
    destroy()


if __name__ == "__main__":
    main()
