"""Preemption figures: signal-to-exit time, and what the ranks' stop agreement costs a batch.

Run ``python benchmarks/preemption_table.py`` (or ``--quick`` for CI). Both parts launch
2 ranks with torchrun (gloo on 127.0.0.1, ``OMP_NUM_THREADS=1``).

1. **Signal to exit.** A trial with a 10 MB model (``Linear(1600, 1600)``, 2.56 M float32
   parameters, plain SGD) trains on random data with ``fit``'s defaults. Once rank 1 has
   trained 20 batches the script sends it SIGTERM (``kill`` on its pid) and times until
   torchrun exits, that is until every rank has finished its batch, the ranks have agreed,
   the checkpoint is written and the processes are gone. The table gives the median over
   runs, with the batches trained between the signal and the stop, and the checkpoint's
   write time and size; seconds count from the signal to ``fit`` returning on both ranks
   (the process group closed), to rank 1's process exiting (interpreter teardown with
   torch loaded) and to torchrun's exit.
2. **Agreement cost.** Each rank runs a loop of 1 ms steps (``time.sleep(0.001)``, as a
   GPU step leaves the CPU free) and times it three ways, alternated per round: without
   checks, with a check after every batch (``stop_check_period=Batch(1)``), and with the
   default spacing. The cost a batch is the difference from the loop without checks;
   medians over rounds, rank 0's timings.

Figures are noisy on a shared machine: the table prints the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch
import torch.distributed as dist
from _common import load_average, usable_cpus

HERE = os.path.abspath(__file__)
MODEL = 1600  # Linear(1600, 1600): 2.56 M parameters, 10.2 MB of float32
SIGNAL_AFTER = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(args: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
        "--master_addr=127.0.0.1", f"--master_port={free_port()}", HERE, *args,
    ]  # fmt: skip


# Workers (run by torchrun).


def train_worker(folder: str) -> None:
    """One rank of the 10 MB trial; writes its pid and a line per batch."""
    from detsamplers.loader import DataLoader
    from detsamplers.trial import Batch, Trainer, Trial, init

    class Big(Trial):
        def __init__(self, context: Any) -> None:
            super().__init__(context)
            self.model = context.wrap_model(torch.nn.Linear(MODEL, MODEL))
            self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), 0.01))

        def build_training_data_loader(self) -> DataLoader:
            data = torch.randn(256, MODEL, generator=torch.Generator().manual_seed(0))
            return DataLoader(data, batch_size=self.context.get_per_slot_batch_size())

        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            loss = self.model(batch).pow(2).mean()
            self.context.backward(loss)
            self.context.step_optimizer(self.opt)
            with open(os.path.join(folder, f"batches-{rank}"), "a") as f:
                f.write(f"{batch_idx}\n")
            return {"loss": loss}

    rank = int(os.environ["RANK"])
    with open(os.path.join(folder, f"pid-{rank}"), "w") as f:
        f.write(str(os.getpid()))
    with init(hparams={"global_batch_size": 16}) as context:
        Trainer(Big(context), context).fit(Batch(100_000), checkpoint_dir=folder)
    with open(os.path.join(folder, f"returned-{rank}"), "w") as f:
        f.write(str(time.time()))  # fit returned, the process group is closed


def agreement_worker(batches: int, rounds: int, out: str) -> None:
    """Time ``batches`` 1 ms steps without checks, with a check a batch, and spaced."""
    from detsamplers.trial import DistributedContext
    from detsamplers.trial._preemption import StopAgreement

    dist.init_process_group("gloo")
    ranks = DistributedContext.from_torch_distributed()
    modes = ("none", "every batch", "spaced (default)")
    timings: dict[str, list[float]] = {}
    for _ in range(rounds):
        for mode in modes:
            period = 1 if mode == "every batch" else None
            agreement = StopAgreement(ranks, start=0, period=period)
            dist.barrier()
            started = time.perf_counter()
            for b in range(1, batches + 1):
                time.sleep(0.001)
                if mode != "none" and agreement.due(b):
                    agreement.agree(b, 0)
            seconds = (time.perf_counter() - started) / batches
            timings.setdefault(mode, []).append(seconds)
            timings.setdefault(mode + " checks", []).append(agreement.checks)
    if ranks.is_chief:
        with open(out, "w") as f:
            json.dump(timings, f)
    dist.destroy_process_group()


# The driver.


def _lines(path: str) -> int:
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def signal_to_exit(runs: int) -> list[dict[str, float]]:
    """Runs of part 1: seconds from SIGTERM to torchrun's exit, and what happened."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as folder:
            command = torchrun(["--train", folder])
            log = open(os.path.join(folder, "log"), "w")  # noqa: SIM115
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
            progress = os.path.join(folder, "batches-1")
            while process.poll() is None and _lines(progress) < SIGNAL_AFTER:
                time.sleep(0.002)
            with open(os.path.join(folder, "pid-1")) as f:
                pid = int(f.read())
            signalled_at = _lines(progress)
            sent, sent_wall = time.perf_counter(), time.time()
            os.kill(pid, signal.SIGTERM)
            while _alive(pid):
                time.sleep(0.002)
            gone = time.perf_counter() - sent
            code = process.wait()
            seconds = time.perf_counter() - sent
            returned = []
            for rank in (0, 1):
                with open(os.path.join(folder, f"returned-{rank}")) as f:
                    returned.append(float(f.read()) - sent_wall)
            log.close()
            if code != 0:
                with open(os.path.join(folder, "log")) as f:
                    raise RuntimeError(f"torchrun exited with {code}:\n{f.read()[-3000:]}")
            with open(os.path.join(folder, "metrics.jsonl")) as f:
                stop = [json.loads(line) for line in f if '"stop"' in line][-1]
            ckpt = os.path.join(folder, f"batch-{stop['batches_trained']:06d}")
            size = sum(os.path.getsize(os.path.join(ckpt, n)) for n in os.listdir(ckpt))
            results.append(
                {
                    "returned": max(returned),
                    "gone": gone,
                    "seconds": seconds,
                    "batches": stop["batches_trained"] - signalled_at,
                    "checkpoint": stop["metrics"]["checkpoint_seconds"],
                    "megabytes": size / 1e6,
                }
            )
    return results


def agreement_cost(batches: int, rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "timings.json")
        command = torchrun(["--agreement", str(batches), str(rounds), out])
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(command, env=env, check=True, capture_output=True)
        with open(out) as f:
            timings: dict[str, list[float]] = json.load(f)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one run, short loops (CI)")
    parser.add_argument("--train", help=argparse.SUPPRESS)
    parser.add_argument("--agreement", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train:
        return train_worker(args.train)
    if args.agreement:
        batches, rounds, out = args.agreement
        return agreement_worker(int(batches), int(rounds), out)

    runs, batches, rounds = (1, 300, 3) if args.quick else (5, 2000, 7)
    print(f"load average {load_average()} before, {usable_cpus()} usable CPUs, 2 ranks (gloo)")
    results = signal_to_exit(runs)
    median = {key: statistics.median(r[key] for r in results) for key in results[0]}
    print(f"\nSIGTERM to rank 1 of 2, {MODEL}x{MODEL} linear model, median of {runs} run(s)")
    print(
        "fit returned (s)  rank 1 exited (s)  torchrun exited (s)  batches after the signal  "
        "checkpoint write (s)  checkpoint (MB)"
    )
    print(
        f"{median['returned']:>16.2f}  {median['gone']:>17.2f}  {median['seconds']:>19.2f}  "
        f"{median['batches']:>24.0f}  {median['checkpoint']:>20.3f}  {median['megabytes']:>15.1f}"
    )

    timings = agreement_cost(batches, rounds)
    base = statistics.median(timings["none"])
    print(f"\nstop agreement, {batches} steps of 1 ms (sleep) x {rounds} rounds, median")
    print("checks                time a batch (ms)  cost a batch (us)  share of the step  checks")
    for mode in ("none", "every batch", "spaced (default)"):
        step = statistics.median(timings[mode])
        cost = (step - base) * 1e6
        checks = statistics.median(timings[mode + " checks"]) if mode != "none" else 0
        print(
            f"{mode:<20}  {step * 1e3:>17.3f}  {cost:>17.1f}  {cost / (base * 1e6):>17.2%}  "
            f"{checks:>6.0f}"
        )
    print(f"load average {load_average()} after")


if __name__ == "__main__":
    main()
