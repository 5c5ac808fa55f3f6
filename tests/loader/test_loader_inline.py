"""Batches come back from workers by value when small, in one shared storage when large.

NOTE [ inline batches ]; what cannot be packed travels torch's way.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
import torch
import torch.multiprocessing.reductions as reductions
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st
from loader_helpers import Noisy, take

from detsamplers.loader import DataLoader
from detsamplers.loader._inline import (
    INLINE_BYTES,
    InlineBatch,
    InlineCollate,
    SharedBatch,
    _map_leaves,
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
    assert large["x"].is_shared()  # default_collate's: already shared, sent torch's way
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


class Rows(tud.Dataset[Any]):
    """Records of several numpy arrays, as token sequences are: a collate builds the tensors."""

    def __init__(self, length: int, width: int) -> None:
        self.length, self.width = length, width

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = np.arange(self.width, dtype=np.int64) + index
        return {"a": row, "b": row * 2, "c": (row % 7).astype(np.int32), "n": index}


def stack_rows(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack with numpy, as collate_tokens does: the tensors are not in shared memory."""
    out: dict[str, Any] = {k: torch.from_numpy(np.stack([s[k] for s in samples])) for k in "abc"}
    out["n"] = [s["n"] for s in samples]
    return out


@pytest.mark.workers
def test_a_large_batch_of_several_tensors_crosses_in_one_storage_and_one_descriptor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    width = INLINE_BYTES // (4 * 8) // 2  # four rows of a, b and c: above INLINE_BYTES
    received: list[int] = []
    rebuild = reductions.rebuild_storage_fd

    def counted(*args: Any) -> Any:
        received.append(1)
        return rebuild(*args)

    loader = DataLoader(Rows(12, width), batch_size=4, num_workers=2, collate_fn=stack_rows)
    stream = iter(loader.get_data_loader(repeat=True))  # the workers start here, unpatched
    monkeypatch.setattr(reductions, "rebuild_storage_fd", counted)  # the main process counts
    got = [next(stream) for _ in range(5)]
    expected = batches(0, Rows(12, width), 5, collate_fn=stack_rows)
    assert same(got, [b for _, b in expected])
    # At most one descriptor a batch the main process unpickled: the 5 taken, and up to the 4
    # in flight (2 workers x prefetch 2) that a loaded machine may deliver ahead of their turn
    # (the iterator keeps them for later). Below 10, two descriptors a batch; torch's way: 15.
    assert len(received) <= 5 + 2 * 2, received
    for batch in got:
        pointers = {batch[k].untyped_storage().data_ptr() for k in "abc"}
        assert len(pointers) == 1 and batch["a"].is_shared() and batch["c"].dtype == torch.int32


_DTYPES = [torch.bool, torch.uint8, torch.int16, torch.int32, torch.int64, torch.float16,
           torch.bfloat16, torch.float32, torch.float64, torch.complex128]  # fmt: skip


@st.composite
def tensors(draw: st.DrawFn) -> torch.Tensor:
    dtype = draw(st.sampled_from(_DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
    values = torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(shape)
    tensor = (values * 1.5 - 3).to(dtype)
    if tensor.ndim >= 2 and draw(st.booleans()):
        tensor = tensor.transpose(0, 1)  # not contiguous
    return tensor


trees = st.recursive(
    tensors() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=8,
)


def count_tensors(tree: Any) -> int:
    if isinstance(tree, torch.Tensor):
        return 1
    if isinstance(tree, (list, tuple)):
        return sum(map(count_tensors, tree))
    if isinstance(tree, dict):
        return sum(map(count_tensors, tree.values()))
    return 0


@settings(max_examples=40, deadline=None)
@given(trees)
def test_a_packed_batch_unpickles_to_the_same_tree_in_one_shared_storage(tree: Any) -> None:
    if count_tensors(tree) < 2:
        with pytest.raises(_NotInlineError):
            SharedBatch(tree)
        return
    packed = SharedBatch(tree)
    assert packed.storage.is_shared()
    back = pickle.loads(pickle.dumps(packed))  # in-process: the storage by value
    assert same(back, tree)
    storages = set()
    for part in _leaves(back):
        assert part.is_contiguous()
        storages.add(part.untyped_storage().data_ptr())
        assert part.storage_offset() * part.element_size() % 64 == 0
    assert len(storages) == 1


def _leaves(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _leaves(item)]
    if isinstance(tree, dict):
        return [t for value in tree.values() for t in _leaves(value)]
    return []


def test_tensors_already_shared_or_needing_grad_are_left_to_torch() -> None:
    shared = torch.zeros(3).share_memory_()
    needs_grad = torch.ones(2, requires_grad=True)
    with pytest.raises(_NotInlineError):  # one loose tensor: nothing to gain
        SharedBatch([shared, needs_grad, torch.arange(2)])
    packed = SharedBatch({"s": shared, "g": needs_grad, "a": torch.arange(2), "b": torch.ones(1)})
    back = pickle.loads(pickle.dumps(packed))
    assert back["s"].untyped_storage().data_ptr() != back["a"].untyped_storage().data_ptr()
    assert back["g"].requires_grad and torch.equal(back["b"], torch.ones(1))
    assert back["a"].untyped_storage().data_ptr() == back["b"].untyped_storage().data_ptr()


@settings(max_examples=40, deadline=None)
@given(trees)
def test_a_small_batch_unpickles_by_value_to_the_same_tree(tree: Any) -> None:
    if any(part.dtype == torch.bfloat16 for part in _leaves(tree)):  # numpy has no bfloat16
        with pytest.raises(_NotInlineError):
            InlineBatch(tree)
        return
    back = pickle.loads(pickle.dumps(InlineBatch(tree)))
    assert same(back, tree)
    assert not any(part.is_shared() for part in _leaves(back))


def test_the_walk_visits_leaves_in_order_and_keeps_only_plain_containers_as_containers() -> None:
    from collections import OrderedDict, namedtuple

    pair = namedtuple("pair", "a b")
    ordered = OrderedDict(z=1)
    tree = {"b": [1, (2, pair(3, 4))], "a": ordered, "c": "s"}
    seen: list[Any] = []
    back = _map_leaves(tree, lambda leaf: seen.append(leaf) or len(seen))
    assert seen == [1, 2, pair(3, 4), ordered, "s"]  # insertion order, depth first
    assert back == {"b": [1, (2, 3)], "a": 4, "c": 5}
    assert type(back["b"]) is list and type(back["b"][1]) is tuple
