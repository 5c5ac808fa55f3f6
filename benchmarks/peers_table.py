"""detsamplers against the peers users choose between: grain, Mosaic streaming, litdata, HF.

How to run (from the repository root)::

    .venv/bin/python benchmarks/peers_table.py --quick     # every question, small; `make test`
    .venv/bin/python benchmarks/peers_table.py --plot-dir docs --json-dir /tmp
    .venv/bin/python benchmarks/peers_table.py --question 4          # one question only
    make bench-mosaic    # build .venv-mosaic, then every question with Mosaic's rows too

Each question runs in a process of its own, every peer that can answer it side by side in
that process, alternating which goes first; a peer whose package is missing gets a
"not installed" cell and a line saying what to install. Every table header gives the load
average at its start and end: the machine is shared, read ratios and orders of magnitude.

1. (``questions/q1_index.py``) Index throughput per rank, N = 1e6, batch 32, W in
   {1, 8, 64, 1024}: indices only, no data.
2. (``q2_resume.py``) Time to the first batch after resuming mid-epoch 3 through each
   peer's own state API, N = 1e6 and 1e8 (where the state can be reached); Mosaic's over
   MDS shards (links to one real shard).
3. (``q3_memory.py``) The memory of a shuffle of N = 1e8 records (Mosaic: each of its
   ``get_shuffle`` algorithms).
4. (``q4_shards.py``) Local shard streaming: 100k tiny samples written as webdataset tar
   (ours, also read over loopback HTTP), MDS (Mosaic) and litdata's optimized format;
   samples/s over an epoch with 0 and 2 workers, batch 64, and the time to resume mid-epoch 3.
5. (``q5_capability.py``) Does a resume on another num_workers, or another world size (1 to
   2 ranks and 2 to 1), reproduce the exact remaining stream? Checked by running, yes or no;
   litdata and Mosaic on real ranks (torch.distributed.run).

The peers are adapters in ``benchmarks/peers/``, one module each. mosaicml-streaming and
datasets cannot be installed together (huggingface_hub), so the `compare` extra has
datasets and Mosaic has a venv of its own, ``.venv-mosaic`` (``make mosaic``; ``make
bench-mosaic`` builds it and runs this script). When it exists, each question runs Mosaic's
peers there, in a process of their own after the others, and puts their figures in the same
table; when it does not, Mosaic's cells say so and the rest runs as before.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.cli import Run, parser, run
from peers import all_peers, versions
from questions.common import measure_only

QUESTIONS = {
    1: "questions.q1_index",
    2: "questions.q2_resume",
    3: "questions.q3_memory",
    4: "questions.q4_shards",
    5: "questions.q5_capability",
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    cli = parser(
        "Benchmark detsamplers against grain, Mosaic streaming, litdata and HF datasets.",
        "small sizes and short caps (about a minute in all)",
    )
    cli.add_argument(
        "--question", type=int, choices=sorted(QUESTIONS), help="run this question only, here"
    )
    cli.add_argument("--plot-dir", type=Path, help="with no --question: peers-qN.png here")
    cli.add_argument("--json-dir", type=Path, help="with no --question: peers-qN.json here")
    cli.add_argument(
        "--suffix", default="", help="appended to the plot and JSON names (e.g. -mosaic)"
    )
    cli.add_argument(
        "--peer", action="append", default=[], help=argparse.SUPPRESS
    )  # with --results: what questions.common.gather asks of a peer's own venv
    cli.add_argument("--results", type=Path, help=argparse.SUPPRESS)
    return cli.parse_args(argv)


def one(args: argparse.Namespace) -> int:
    module = importlib.import_module(QUESTIONS[args.question])
    if args.results:
        measure_only(args.question, module.measure, args.peer, args.results, args.quick)
        return 0

    def body(out: Run) -> None:
        module.run(out, args.quick)

    return run(args, versions(all_peers()), body, module.plot, {"quick": args.quick})


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.question is not None:
        return one(args)
    failed = []
    for number in QUESTIONS:
        command = [sys.executable, __file__, "--question", str(number)]
        if args.quick:
            command.append("--quick")
        if args.plot_dir:
            command += ["--plot", str(args.plot_dir / f"peers-q{number}{args.suffix}.png")]
        if args.json_dir:
            command += ["--json", str(args.json_dir / f"peers-q{number}{args.suffix}.json")]
        print(f"== question {number}", flush=True)
        if subprocess.run(command, check=False).returncode:
            failed.append(number)
    if failed:
        print(f"questions {failed} failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
