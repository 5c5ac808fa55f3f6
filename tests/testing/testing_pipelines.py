"""Pipelines with planted resume faults, and their fixed twins (module-level so that
worker processes can pickle them)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
import torch.utils.data as tud

from detsamplers import make_batch_sampler
from detsamplers.loader import DataLoader

RECORDS = 40
BATCH = 4
SEED = 3


class Augmented(tud.Dataset[dict[str, Any]]):
    """Each record: its index, a random crop offset (numpy) and a flip (torch), a name."""

    def __init__(self, length: int = RECORDS) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        offset = float(np.random.rand())
        flip = float(torch.rand(()).item())
        return {
            "x": torch.tensor([float(index), offset, flip], dtype=torch.float64),
            "name": f"r{index}",
        }


class Plain(tud.Dataset[dict[str, Any]]):
    """Each record is a function of its index alone."""

    def __init__(self, length: int = RECORDS) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"x": torch.tensor([float(index), index * 0.5]), "name": f"r{index}"}


class Counting(Plain):
    """A stateful dataset: each record carries how many records this copy has served."""

    def __init__(self, length: int = RECORDS) -> None:
        super().__init__(length)
        self.served = 0

    def __getitem__(self, index: int) -> dict[str, Any]:
        self.served += 1
        record = super().__getitem__(index)
        record["x"] = record["x"] + self.served
        return record


def reseed_workers(worker_id: int) -> None:
    """The classic bug: every worker of every run restarts numpy at its id."""
    np.random.seed(worker_id)
    torch.manual_seed(worker_id)
    random.seed(worker_id)


class OwnRngCollate:
    """Mixup-style collate that draws from a generator of its own."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def __call__(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        batch = tud.default_collate(records)
        batch["lam"] = torch.tensor(self.rng.beta(0.4, 0.4))
        return batch


def global_rng_collate(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mixup-style collate that draws from numpy's global RNG."""
    batch = tud.default_collate(records)
    batch["lam"] = torch.tensor(np.random.beta(0.4, 0.4))
    return batch


def _torch_loader(dataset: Any, rank: int, world_size: int, num_workers: int,
                  batch_size: int = BATCH, **kwargs: Any) -> tud.DataLoader[Any]:  # fmt: skip
    sampler = make_batch_sampler(dataset, "training", SEED, world_size, rank, batch_size)
    return tud.DataLoader(dataset, batch_sampler=sampler, num_workers=num_workers, **kwargs)


# -- global RNG in __getitem__ ------------------------------------------------------------


def global_rng_in_getitem(rank: int, world_size: int, num_workers: int) -> Any:
    return _torch_loader(Augmented(), rank, world_size, num_workers)


def global_rng_in_getitem_fixed(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(Augmented(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers)  # fmt: skip


def per_batch_draws(rank: int, world_size: int, num_workers: int, batch_size: int = BATCH) -> Any:
    return DataLoader(Augmented(), batch_size=batch_size, shuffle=True, seed=SEED,
                      num_workers=num_workers)  # fmt: skip


def per_record_draws(rank: int, world_size: int, num_workers: int, batch_size: int = BATCH) -> Any:
    return DataLoader(Augmented(), batch_size=batch_size, shuffle=True, seed=SEED,
                      num_workers=num_workers, seeding="record")  # fmt: skip


# -- a worker_init_fn that reseeds -------------------------------------------------------


def reseeding_worker_init(rank: int, world_size: int, num_workers: int) -> Any:
    return _torch_loader(Augmented(), rank, world_size, num_workers,
                         worker_init_fn=reseed_workers)  # fmt: skip


def reseeding_worker_init_fixed(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(Augmented(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers, worker_init_fn=reseed_workers)  # fmt: skip


# -- a shuffle outside the chain ---------------------------------------------------------


def shuffle_outside_chain(rank: int, world_size: int, num_workers: int) -> Any:
    order = torch.randperm(RECORDS).tolist()  # drawn anew by every fresh process
    return DataLoader(tud.Subset(Plain(), order), batch_size=BATCH, num_workers=num_workers)


def shuffle_outside_chain_fixed(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(Plain(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers)  # fmt: skip


def torch_random_sampler(rank: int, world_size: int, num_workers: int) -> Any:
    sampler = tud.BatchSampler(tud.RandomSampler(Plain()), BATCH, drop_last=False)
    return tud.DataLoader(Plain(), batch_sampler=_Stateful(sampler), num_workers=num_workers)


class _Stateful(tud.Sampler[list[int]]):
    """A batch sampler that saves how many batches it yielded, and replays that many."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.position = 0
        self.skip = 0

    def __iter__(self) -> Any:
        while True:
            for k, batch in enumerate(self.inner):
                if self.skip:
                    self.skip -= 1
                    continue
                self.position += 1
                yield batch
                del k

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = self.skip = state["position"]


# -- a collate that draws randomness -----------------------------------------------------


def collate_own_rng(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(Plain(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers, collate_fn=OwnRngCollate())  # fmt: skip


def collate_global_rng(rank: int, world_size: int, num_workers: int) -> Any:
    return _torch_loader(Plain(), rank, world_size, num_workers, collate_fn=global_rng_collate)


def collate_fixed(rank: int, world_size: int, num_workers: int) -> Any:
    # Under detsamplers' loader the collate runs right after the seeded fetch, in the
    # same process: its global draws follow from the batch's key.
    return DataLoader(Plain(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers, collate_fn=global_rng_collate)  # fmt: skip


# -- a stateful dataset ------------------------------------------------------------------


def stateful_dataset(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(Counting(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers)  # fmt: skip


def stateful_dataset_fixed(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(Plain(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers)  # fmt: skip


# -- state the probe has to look for: a warm-up, a class attribute, a module global ------


class WarmUp(Plain):
    """A warm-up: records are scaled down during this copy's first ``warm`` calls."""

    def __init__(self, warm: int = 5, length: int = RECORDS) -> None:
        super().__init__(length)
        self.warm = warm
        self.calls = 0

    def __getitem__(self, index: int) -> dict[str, Any]:
        self.calls += 1
        record = super().__getitem__(index)
        record["x"] = record["x"] * (0.5 if self.calls <= self.warm else 1.0)
        return record


class ClassWarmUp(Plain):
    """The same warm-up counted on the class: the first loader of a process uses it up."""

    calls = 0

    def __getitem__(self, index: int) -> dict[str, Any]:
        ClassWarmUp.calls += 1
        record = super().__getitem__(index)
        record["x"] = record["x"] * (0.5 if ClassWarmUp.calls <= 5 else 1.0)
        return record


FETCHED = 0


class GlobalWarmUp(Plain):
    """The same warm-up counted in a module global."""

    def __getitem__(self, index: int) -> dict[str, Any]:
        global FETCHED
        FETCHED += 1
        record = super().__getitem__(index)
        record["x"] = record["x"] * (0.5 if FETCHED <= 5 else 1.0)
        return record


class WarmCollate:
    """A collate that scales its first two batches (a warm-up of its own)."""

    def __init__(self) -> None:
        self.batches = 0

    def __call__(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        self.batches += 1
        batch = tud.default_collate(records)
        batch["x"] = batch["x"] * (0.5 if self.batches <= 2 else 1.0)
        return batch


def warm_up(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(WarmUp(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers)  # fmt: skip


def class_warm_up(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(ClassWarmUp(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers)  # fmt: skip


def global_warm_up(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(GlobalWarmUp(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers)  # fmt: skip


def warm_collate(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(Plain(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers, collate_fn=WarmCollate())  # fmt: skip


# -- values the kit cannot compare -------------------------------------------------------


class Box:
    """A record type with no ``__eq__``: two equal boxes are two different objects."""

    def __init__(self, label: str) -> None:
        self.label = label


def box_records(records: list[dict[str, Any]]) -> list[Box]:
    return [Box(record["name"]) for record in records]


def boxes(rank: int, world_size: int, num_workers: int) -> Any:
    return DataLoader(Plain(), batch_size=BATCH, shuffle=True, seed=SEED,
                      num_workers=num_workers, collate_fn=box_records)  # fmt: skip
