"""``python -m detsamplers demo``: the pause-and-resume demonstration (see ``make demo``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run it; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m detsamplers")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="train on 2 ranks, pause, resume on 1, and verify the global batches",
        description="Train a small model with torchrun (gloo on 127.0.0.1), stop it midway, "
        "resume it from its latest checkpoint on another world size, and check the result "
        "against an uninterrupted run. Exits 1 if a check fails.",
    )
    demo.add_argument("--ranks", type=int, default=2, help="ranks of the first run (2)")
    demo.add_argument("--pause-at", type=int, default=20, help="global batch to stop at (20)")
    demo.add_argument("--resume-ranks", type=int, default=1, help="ranks of the resume (1)")
    demo.add_argument("--batches", type=int, default=48, help="total global batches (48)")
    demo.add_argument("--num-workers", type=int, default=1, help="loader workers per rank (1)")
    demo.add_argument("--workdir", default=None, help="keep the runs here (default: temporary)")
    args = parser.parse_args(argv)

    from .trial._demo import run_demo

    try:
        ok = run_demo(
            ranks=args.ranks,
            pause_at=args.pause_at,
            resume_ranks=args.resume_ranks,
            max_batches=args.batches,
            num_workers=args.num_workers,
            workdir=args.workdir,
        )
    except ValueError as error:
        parser.error(str(error))
    except RuntimeError as error:  # a launch failed; its output is in the message
        print(f"demo failed: {error}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
