"""Small batches come back from workers by value (NOTE [ inline batches ]); the rest torch's way."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch
import torch.utils.data as tud
from loader_helpers import Noisy, take

from detsamplers.loader import DataLoader
from detsamplers.loader._inline import (
    INLINE_BYTES,
    InlineBatch,
    InlineCollate,
    _NotInlineError,
)


class Records(tud.Dataset[Any]):
    """Each record a dict of a tensor, an int, a float, a string and a nested tuple."""

    def __init__(self, length: int, width: int = 3, dtype: torch.dtype = torch.float32) -> None:
        self.length, self.width, self.dtype = length, width, dtype

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        pixels = torch.full((self.width,), float(index), dtype=self.dtype)
        return {"x": pixels, "i": index, "f": index / 2, "name": f"r{index}", "t": (index, [index])}


def batches(num_workers: int, dataset: Any, count: int, **kwargs: Any) -> list[Any]:
    loader = DataLoader(dataset, batch_size=4, num_workers=num_workers, **kwargs)
    return list(zip(range(count), loader.get_data_loader(repeat=True), strict=False))


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


@pytest.mark.workers
@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.bool, torch.bfloat16])
def test_batches_from_workers_equal_the_main_processs(dtype: torch.dtype) -> None:
    expected = batches(0, Records(10, dtype=dtype), 6)
    assert same(batches(2, Records(10, dtype=dtype), 6), expected)


@pytest.mark.workers
def test_small_batches_arrive_by_value_and_large_ones_through_shared_memory() -> None:
    small = batches(1, Records(8), 2)[0][1]
    assert not small["x"].is_shared() and not small["i"].is_shared()
    wide = INLINE_BYTES // 16  # four records of float32 hold INLINE_BYTES: too many
    large = batches(1, Records(8, width=wide), 2)[0][1]
    assert large["x"].is_shared()
    odd = batches(1, Records(8, dtype=torch.bfloat16), 2)[0][1]  # numpy has no bfloat16
    assert odd["x"].is_shared() and odd["x"].dtype == torch.bfloat16


@pytest.mark.workers
def test_draws_made_in_workers_survive_the_trip() -> None:
    assert take(DataLoader(Noisy(9), batch_size=2, num_workers=2).get_data_loader(True), 5) == (
        take(DataLoader(Noisy(9), batch_size=2).get_data_loader(True), 5)
    )


def test_an_inline_batch_unpickles_to_the_plain_tree() -> None:
    tree = {"a": torch.arange(4), "b": (torch.zeros(2, 2), [torch.tensor(True), "s", 3])}
    back = pickle.loads(pickle.dumps(InlineBatch(tree)))
    assert same(back, tree)
    back["a"] += 1  # writable, like a batch torch hands out
    assert back["a"].tolist() == [1, 2, 3, 4]


def test_what_cannot_travel_by_value_is_refused_and_the_collate_returns_it_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    needs_grad = [torch.ones(2, requires_grad=True)]
    too_big = [torch.zeros(INLINE_BYTES // 8, dtype=torch.float64)]
    for tree in (needs_grad, too_big):
        with pytest.raises(_NotInlineError):
            InlineBatch(tree)
    assert isinstance(InlineBatch([torch.zeros(INLINE_BYTES // 8 - 1)]), InlineBatch)
    monkeypatch.setattr(tud, "get_worker_info", lambda: object())
    collate = InlineCollate(lambda batch: needs_grad)
    assert collate([0]) is needs_grad
    assert isinstance(InlineCollate(tud.default_collate)([1, 2]), InlineBatch)


@pytest.mark.workers
def test_the_users_collate_still_runs_once_per_batch() -> None:
    def collate(batch: list[int]) -> dict[str, Any]:
        return {"ids": torch.tensor(batch), "n": len(batch)}

    loader = DataLoader(range(6), batch_size=3, num_workers=2, collate_fn=collate)
    out = [(b["ids"].tolist(), b["n"]) for b in loader]
    assert out == [([0, 1, 2], 3), ([3, 4, 5], 3)]


@pytest.mark.workers
def test_spawned_workers_get_the_wrapped_collate_and_send_batches_back_by_value() -> None:
    loader = DataLoader(Noisy(6), batch_size=2, num_workers=1, multiprocessing_context="spawn")
    got = [batch for _, batch in zip(range(3), loader.get_data_loader(repeat=True), strict=False)]
    assert not any(batch.is_shared() for batch in got)
    assert [b.tolist() for b in got] == take(
        DataLoader(Noisy(6), batch_size=2).get_data_loader(True), 3
    )
