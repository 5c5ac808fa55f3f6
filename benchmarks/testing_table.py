"""How long ``detsamplers.testing.check_resume`` takes on a typical pipeline.

The pipeline: 1,000 records, each a 3x32x32 image with a random crop offset and flip
drawn from numpy and torch in ``__getitem__`` (``seeding="record"``, so that it resumes on
any world size), 8 records a batch per rank. The check: the run pauses on 2 ranks with
2 workers at 3 pause points and resumes on 1 and 2 ranks with 0 and 2 workers (4
configurations, 12 resumes), over 40 global batches.

    python benchmarks/testing_table.py            # 3 repetitions, the median
    python benchmarks/testing_table.py --quick    # 1 repetition
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud
from _common import load_average, usable_cpus

from detsamplers.loader import DataLoader
from detsamplers.testing import Config, check_resume

RECORDS = 1000


class Images(tud.Dataset[dict[str, Any]]):
    def __len__(self) -> int:
        return RECORDS

    def __getitem__(self, index: int) -> dict[str, Any]:
        image = torch.full((3, 32, 32), float(index))
        offset = int(np.random.randint(0, 4))
        flip = bool(torch.rand(()) < 0.5)
        image = torch.roll(image, offset, dims=2)
        return {"image": image.flip(2) if flip else image, "label": index % 10}


def factory(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(
        Images(), batch_size=8, shuffle=True, seed=5, num_workers=num_workers, seeding="record"
    )


def one() -> tuple[float, int]:
    started = time.perf_counter()
    report = check_resume(
        factory,
        pauses=[5, 17, 33],
        batches=40,
        run=Config(world_size=2, num_workers=2),
        resume=[Config(w, n) for w in (1, 2) for n in (0, 2)],
    )
    return time.perf_counter() - started, report.batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    times, batches = [], 0
    for _ in range(repeats):
        seconds, batches = one()
        times.append(seconds)
    print(
        f"check_resume, typical pipeline ({RECORDS} records, 3 pauses, 0 and 2 workers, "
        f"world sizes 1 and 2): {batches} batches compared"
    )
    print(
        f"  wall time: median {statistics.median(times):.2f} s of {repeats} "
        f"({', '.join(f'{t:.2f}' for t in times)}); {usable_cpus()} cpus, "
        f"load average {load_average()}"
    )


if __name__ == "__main__":
    main()
