"""A preempted job's resume, as it meets it: a fresh process, the state from a file.

How to run (from the repository root, on a corpus written by ``benchmarks/tokens_peers.py``)::

    .venv/bin/python benchmarks/tokens_fresh_resume.py --folder /tmp/tokbench/docs1000000
    .venv/bin/python benchmarks/tokens_fresh_resume.py --folder F --tree A=/src/a --tree B=/src/b

One process per tree and mode makes the loader's and the sequences' state after 1e10
tokens (``--resume-tokens``) and writes it to a JSON file, as a checkpoint does. Then, for
``--rounds`` rounds, a fresh process per tree and mode imports ``detsamplers.tokens`` and
``detsamplers.loader`` (untimed) and times each phase up to the first batch, CPU
(``process_time``) and wall (``perf_counter``) milliseconds:

- ``load``: read the state file and parse it;
- ``open``: ``TokenCorpus`` over the ``.bin`` and its lengths sidecar;
- ``sequences`` and ``seq_state``: ``TokenSequences(...)`` and its ``load_state_dict``;
- ``loader`` and ``loader_state``: ``DataLoader(...).get_data_loader`` and its
  ``load_state_dict``;
- ``batch``: ``next(iter(...))``, the first batch.

With several ``--tree NAME=PATH`` the trees alternate inside each round (the first tree
of a round rotates), each worker importing ``detsamplers`` from its ``PATH``
(``PYTHONPATH``). The table gives medians and ranges; the load average is read before
and after. Speed is reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PHASES = ("load", "open", "sequences", "seq_state", "loader", "loader_state", "batch")
OUTPUTS = ("input_ids", "labels", "position_ids", "document_ids", "cu_seqlens")


def _sequences(folder: Path, seq_len: int, mode: str) -> Any:
    from detsamplers.tokens import TokenCorpus, TokenSequences

    corpus = TokenCorpus(folder / "corpus.bin", dtype="uint16",
                         lengths=[folder / "corpus.lengths.npy"], progress=False)  # fmt: skip
    return corpus, TokenSequences(corpus, seq_len, mode=mode, seed=0, outputs=OUTPUTS)


def _loader(sequences: Any, batch: int) -> Any:
    from detsamplers.loader import DataLoader
    from detsamplers.tokens import collate_tokens

    loader = DataLoader(sequences, batch_size=batch, shuffle=True, seed=0, num_workers=0,
                        collate_fn=collate_tokens)  # fmt: skip
    return loader


def save(args: argparse.Namespace) -> dict[str, Any]:
    """Make the state after ``--samples`` sequences and write it to ``--state``."""
    _, sequences = _sequences(args.folder, args.seq_len, args.mode)
    train = _loader(sequences, args.batch).get_data_loader(repeat=True, skip_samples=args.samples)
    state = {"loader": train.state_dict(), "tokens": sequences.state_dict()}
    args.state.write_text(json.dumps(state))
    return {"bytes": args.state.stat().st_size}


def fresh(args: argparse.Namespace) -> dict[str, Any]:
    """Time each phase of one resume from ``--state`` in this (fresh) process."""
    import detsamplers.loader
    import detsamplers.tokens  # noqa: F401  (imports are never timed)
    from detsamplers.tokens import TokenCorpus, TokenSequences

    cpu, wall = [time.process_time()], [time.perf_counter()]

    def mark() -> None:
        cpu.append(time.process_time())
        wall.append(time.perf_counter())

    saved = json.loads(args.state.read_text())
    mark()
    corpus = TokenCorpus(args.folder / "corpus.bin", dtype="uint16",
                         lengths=[args.folder / "corpus.lengths.npy"], progress=False)  # fmt: skip
    mark()
    sequences = TokenSequences(corpus, args.seq_len, mode=args.mode, seed=0, outputs=OUTPUTS)
    mark()
    sequences.load_state_dict(saved["tokens"])
    mark()
    train = _loader(sequences, args.batch).get_data_loader(repeat=True)
    mark()
    train.load_state_dict(saved["loader"])
    mark()
    batch = next(iter(train))["input_ids"]
    mark()
    got: dict[str, Any] = {
        "cpu": {p: 1000 * (cpu[i + 1] - cpu[i]) for i, p in enumerate(PHASES)},
        "wall": {p: 1000 * (wall[i + 1] - wall[i]) for i, p in enumerate(PHASES)},
        "check": int(batch.sum()),
    }
    got["cpu"]["total"] = 1000 * (cpu[-1] - cpu[0])
    got["wall"]["total"] = 1000 * (wall[-1] - wall[0])
    return got


def run(tree: str, kind: str, mode: str, state: Path, args: argparse.Namespace) -> Any:
    """``save`` or ``fresh`` in a new process importing ``detsamplers`` from ``tree``."""
    env = dict(os.environ, PYTHONPATH=tree)
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--mode", mode,
               "--state", str(state), "--folder", str(args.folder), "--seq-len",
               str(args.seq_len), "--batch", str(args.batch),
               "--samples", str(args.samples)]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"worker {kind} {mode} in {tree} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def load_average() -> str:
    """The one-minute load average."""
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--folder", type=Path, required=True)
    cli.add_argument("--seq-len", type=int, default=2048)
    cli.add_argument("--batch", type=int, default=8)
    cli.add_argument("--resume-tokens", type=float, default=1e10)
    cli.add_argument("--modes", nargs="+", default=["chunk", "concat", "pack"])
    cli.add_argument("--rounds", type=int, default=3)
    cli.add_argument("--tree", action="append", default=[], help="NAME=PATH, repeatable")
    cli.add_argument("--states", type=Path, default=Path("/tmp/tokens-fresh-states"))
    cli.add_argument("--json", type=Path, help="also write every run here")
    cli.add_argument("--worker", choices=["save", "fresh"], help=argparse.SUPPRESS)
    cli.add_argument("--mode", default="chunk", help=argparse.SUPPRESS)
    cli.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    cli.add_argument("--samples", type=int, default=0, help=argparse.SUPPRESS)
    args = cli.parse_args()
    if args.worker:
        print(json.dumps(save(args) if args.worker == "save" else fresh(args)))
        return
    args.samples = int(args.resume_tokens) // (args.seq_len + 1)
    root = str(Path(__file__).resolve().parents[1])
    trees = dict(t.split("=", 1) for t in args.tree) or {"this": root}
    args.states.mkdir(parents=True, exist_ok=True)
    states = {}
    for name, path in trees.items():
        for mode in args.modes:
            states[name, mode] = args.states / f"{name}-{mode}.json"
            made = run(path, "save", mode, states[name, mode], args)
            print(f"state {name} {mode}: {made['bytes']} B")
    loads = [load_average()]
    runs: dict[tuple[str, str], list[Any]] = {key: [] for key in states}
    names = list(trees)
    for round_ in range(args.rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for mode in args.modes:
            for name in order:
                runs[name, mode].append(run(trees[name], "fresh", mode, states[name, mode], args))
    loads.append(load_average())
    print(f"fresh processes, {args.rounds} rounds, CPU / wall ms, medians (range); "
          f"load {loads[0]} before, {loads[1]} after")  # fmt: skip
    for mode in args.modes:
        for name in names:
            got = runs[name, mode]
            checks = sorted({g["check"] for g in got})
            print(f"{mode:6} {name}  (input_ids summed: {checks})")
            for phase in (*PHASES, "total"):
                cells = []
                for clock in ("cpu", "wall"):
                    values = [g[clock][phase] for g in got]
                    cells.append(f"{statistics.median(values):7.2f} "
                                 f"({min(values):.2f} to {max(values):.2f})")  # fmt: skip
                print(f"    {phase:13} {cells[0]:26} {cells[1]}")
    if args.json:
        args.json.write_text(json.dumps({f"{n} {m}": v for (n, m), v in runs.items()}))


if __name__ == "__main__":
    main()
