"""One rank over S3, epoch by epoch, in alternating fresh processes: CPU time and wall time.

Run from the repository root::

    .venv/bin/python benchmarks/s3_epoch_pair.py --rounds 4 --litdata
    .venv/bin/python benchmarks/s3_epoch_pair.py --tree before=../main --rounds 4  # + before

The data and the server are ``s3_peers_table.py``'s (8,192 samples of 2-8 KB in 32 webdataset
tars, indexed on S3 by ``python -m detsamplers index``, and as litdata chunks; moto's S3 on
127.0.0.1 behind the tests' counting proxy, in this process), and so are the sides (ours:
``parts=720``, the node cache, tar order, ``decode=()``, ``default_collate``; litdata on its
obstore path with ``allow_http`` patched in), ``num_workers=0``, batch 64. Each round starts
one process per side (ours from this checkout, each ``--tree``, and litdata), in alternating
order, with an empty cache folder: it builds its loader and reads ``--epochs`` epochs (epoch 1
downloads, the others read the warm cache), each timed with ``time.process_time`` (every
thread of the process: the downloads' too) and ``perf_counter``, plus the time to its first
batch. The driver adds the CPU time its own process spent meanwhile (the server's). Prints
each round and the median (and range) of each side's samples/s and CPU milliseconds;
``--profile DIR`` writes a cProfile of each epoch's reading thread there.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests" / "webdataset"
TOTAL, SHARDS = 8192, 32


def child(spec: dict[str, Any]) -> None:
    """One side: build the loader, read the epochs, print a JSON line of their times."""
    sys.path.insert(0, str(Path(spec["tree"]) / "benchmarks"))
    table = importlib.import_module("s3_peers_table")
    build, count = {"ours": table._ours, "litdata": table._litdata}[spec["peer"]](spec)
    loader = build()
    out: dict[str, Any] = {}
    for epoch in range(1, spec["epochs"] + 1):
        profile = cProfile.Profile() if spec["profile"] else None
        seen, cpu, wall = 0, time.process_time(), time.perf_counter()
        if profile is not None:
            profile.enable()
        for batch in loader:
            seen += count(batch)
            out.setdefault(f"first{epoch}", time.perf_counter() - wall)
        if profile is not None:
            profile.disable()
            profile.dump_stats(f"{spec['profile']}/{spec['name']}-epoch{epoch}.prof")
        out[f"wall{epoch}"] = time.perf_counter() - wall
        out[f"cpu{epoch}"] = time.process_time() - cpu
        out[f"samples{epoch}"] = seen
    print(json.dumps(out), flush=True)
    os._exit(0)  # leave prefetch threads and litdata's background downloads behind


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH: ours from there")
    parser.add_argument("--litdata", action="store_true", help="litdata's obstore path too")
    parser.add_argument("--profile", default="", help="a folder for cProfile files")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    sides = [("ours", "ours", str(HERE.parent))]
    sides += [(name, "ours", path) for name, path in (t.split("=", 1) for t in args.tree)]
    if args.litdata:
        sides.append(("litdata", "litdata", str(HERE.parent)))
    sys.path[:0] = [str(HERE), str(TESTS)]
    table = importlib.import_module("s3_peers_table")
    server = importlib.import_module("s3_server").S3Server()
    folder = Path(tempfile.mkdtemp(prefix="s3-epoch-pair-"))
    try:
        server.create_bucket(table.BUCKET)
        data = table.samples(TOTAL)
        table.write_tar(folder / "ours", data, SHARDS)
        table.upload(server, folder / "ours", "ours")
        if args.litdata:
            table.write_litdata(folder / "litdata", data, SHARDS)
            table.upload(server, folder / "litdata", "litdata")
        urls = f"s3://{table.BUCKET}/ours/d-{{000..{SHARDS - 1:03d}}}.tar"
        cli = ["-m", "detsamplers", "index", urls, "--endpoint-url", server.endpoint]
        cli += ["--storage-option", "key=testing", "--storage-option", "secret=testing"]
        subprocess.run([sys.executable, *cli], check=True, stdout=subprocess.DEVNULL)
        options = {"key": "testing", "secret": "testing"}
        endpoint = {"endpoint_url": server.endpoint, "region_name": "us-east-1"}
        litdata_options = {
            "endpoint_url": server.endpoint,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "region_name": "us-east-1",
        }
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "OMP_NUM_THREADS": "1",
            "PYTHONWARNINGS": "ignore",
        }
        results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in sides}
        for round_ in range(args.rounds):
            for name, peer, tree in sides if round_ % 2 == 0 else sides[::-1]:
                spec = {
                    "peer": peer,
                    "tree": tree,
                    "name": f"{name}-{round_}",
                    "config": {"parts": 720} if peer == "ours" else {"obstore": True},
                    "urls": urls,
                    "remote": f"s3://{table.BUCKET}/litdata",
                    "cache": str(folder / f"cache-{name}-{round_}"),
                    "index_dir": str(folder / f"index-{name}-{round_}"),
                    "storage_options": {**options, "client_kwargs": endpoint},
                    "litdata_options": litdata_options,
                    "world": 1,
                    "rank": 0,
                    "epochs": args.epochs,
                    "profile": args.profile,
                }
                load, server_cpu = os.getloadavg()[0], _cpu()
                done = subprocess.run(
                    [sys.executable, __file__, "--child", json.dumps(spec)],
                    capture_output=True,
                    text=True,
                    env={**env, "PYTHONPATH": tree},
                    cwd=tempfile.gettempdir(),
                    check=False,
                )
                lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
                if not lines:
                    raise RuntimeError(f"{name} failed: {done.stderr[-2000:]}")
                got = {**json.loads(lines[-1]), "load": load, "server": _cpu() - server_cpu}
                results[name].append(got)
                shutil.rmtree(spec["cache"], ignore_errors=True)
                cells = " | ".join(
                    f"epoch {e} {got[f'samples{e}'] / got[f'wall{e}']:,.0f}/s "
                    f"cpu {1000 * got[f'cpu{e}']:.0f} ms"
                    for e in range(1, args.epochs + 1)
                )
                print(
                    f"round {round_} {name}: load {load:.1f} | {cells} | first batch "
                    f"{1000 * got['first1']:.0f} ms | server cpu {1000 * got['server']:.0f} ms",
                    flush=True,
                )
        print("# median [range] of samples/s and CPU ms per epoch")
        for name, runs in results.items():
            parts = []
            for e in range(1, args.epochs + 1):
                rates = sorted(r[f"samples{e}"] / r[f"wall{e}"] for r in runs)
                cpus = sorted(1000 * r[f"cpu{e}"] for r in runs)
                rate, cpu = statistics.median(rates), statistics.median(cpus)
                parts.append(
                    f"epoch {e} {rate:,.0f}/s [{rates[0]:,.0f}-{rates[-1]:,.0f}] "
                    f"cpu {cpu:.0f} ms [{cpus[0]:.0f}-{cpus[-1]:.0f}]"
                )
            print(f"{name}: " + " | ".join(parts))
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
