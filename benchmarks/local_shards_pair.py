"""Question 4's equal-work epoch against litdata, each epoch in a fresh process, paired.

Run from the repository root::

    .venv/bin/python benchmarks/local_shards_pair.py --folder /tmp/q4 --rounds 7
    .venv/bin/python benchmarks/local_shards_pair.py --folder /tmp/q4 --tree ../main  # + before

The first run writes 100,000 samples (a 71-byte PNG and an integer label) as 50 webdataset
tars of 2,000 (``peers.ours.write_tar``) and as litdata chunks of 2,000
(``peers.litdata_streaming.write``) into ``--folder``; later runs reuse them. Each round
starts one process per side, in alternating order: it reads one epoch (a warm-up: imports,
index files) and then times a second with ``time.process_time`` and ``perf_counter``,
checking every label comes once. The sides are question 4's: ``peers.ours.shard_epoch``
(``shuffle_window=2000``, ``num_workers=0``, batch 64) and ``peers.litdata_streaming.epoch``
(its defaults); each ``--tree`` adds ours from another checkout (its compiled kernel built).
Prints the median and min CPU and wall seconds of each side and, per round, litdata's time
over each side's (above 1: faster than litdata), with the load average after each round.
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

HERE = Path(__file__).resolve().parent
TOTAL, PER_SHARD, BATCH = 100_000, 2_000, 64


def child(who: str, folder: Path) -> None:
    """One warm-up epoch, then one timed: a JSON line of CPU and wall seconds."""
    sys.path[:0] = [str(HERE), str(HERE / "peers")]
    from peers import litdata_streaming, ours

    urls = str(folder / f"wds-{{000000..{TOTAL // PER_SHARD - 1:06d}}}.tar")
    for _ in range(2):  # the first epoch warms up; the second is timed
        cpu, wall = time.process_time(), time.perf_counter()
        if who == "ours":
            epoch = ours.shard_epoch(urls, 0, BATCH)
        else:
            epoch = litdata_streaming.epoch(str(folder / "litdata"), 0, BATCH)
        seen = [label for labels in epoch for label in labels]
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if sorted(seen) != list(range(TOTAL)):
            raise RuntimeError(f"{who}: an epoch yielded {len(seen)} samples, not each once")
    print(json.dumps({"cpu": cpu, "wall": wall}))


def write(folder: Path) -> None:
    sys.path[:0] = [str(HERE), str(HERE / "peers")]
    from peers import litdata_streaming, ours

    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "wds-000000.tar").exists():
        ours.write_tar(str(folder), TOTAL, PER_SHARD)
    if not (folder / "litdata" / "index.json").exists():
        litdata_streaming.write(str(folder), TOTAL, PER_SHARD)


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_argument("--folder", type=Path, required=True, help="the shards, written once")
    cli.add_argument("--rounds", type=int, default=7)
    cli.add_argument("--tree", action="append", default=[], help="ours from this checkout too")
    cli.add_argument("--child", help=argparse.SUPPRESS)
    args = cli.parse_args()
    if args.child:
        child(args.child, args.folder)
        return 0
    write(args.folder)
    root = HERE.parent
    sides = [("ours", root), *((f"ours@{t}", Path(t).resolve()) for t in args.tree)]
    sides.append(("litdata", root))
    times: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
    for number in range(args.rounds):
        for name, tree in sides if number % 2 == 0 else sides[::-1]:
            env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'benchmarks'}"}
            who = "litdata" if name == "litdata" else "ours"
            script = tree / "benchmarks" / Path(__file__).name
            if not script.exists():
                script = Path(__file__)
            command = [sys.executable, str(script), "--folder", str(args.folder)]
            done = subprocess.run(
                [*command, "--child", who], cwd=tree, env=env, capture_output=True, text=True
            )
            if done.returncode:
                raise RuntimeError(f"{name} failed:\n{done.stderr}")
            times[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"round {number + 1}: load {os.getloadavg()[0]:.1f}", flush=True)
    lit = times["litdata"]
    for name, _ in sides:
        cpu = [t["cpu"] for t in times[name]]
        wall = [t["wall"] for t in times[name]]
        line = (
            f"{name}: CPU {statistics.median(cpu):.3f} s (min {min(cpu):.3f}), "
            f"{TOTAL / statistics.median(cpu):,.0f} samples/s; wall {statistics.median(wall):.3f}"
            f" s (min {min(wall):.3f})"
        )
        if name != "litdata":
            for kind in ("cpu", "wall"):
                ratio = [b[kind] / a[kind] for a, b in zip(times[name], lit, strict=True)]
                line += (
                    f"; vs litdata {kind} {statistics.median(ratio):.3f}x "
                    f"({min(ratio):.3f}x-{max(ratio):.3f}x)"
                )
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
