"""The loader's torch DataLoader subclass: torch's behaviour, minus the idle profiler span."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.utils.data as tud
from loader_helpers import Noisy, take
from torch.utils.data import dataloader as torch_loader

from detsamplers.loader import DataLoader, _lean
from detsamplers.loader._lean import LeanDataLoader

SPAN = "enumerate(DataLoader)"


def spans(loader: Any, batches: int) -> list[str]:
    with torch.profiler.profile() as prof:
        take(loader, batches)
    return [e.name for e in prof.events() if e.name.startswith(SPAN)]


def test_get_data_loader_builds_a_torch_dataloader_subclass_unless_told_otherwise() -> None:
    loader = DataLoader(range(8), batch_size=2)
    lean = loader.get_data_loader()
    assert isinstance(lean, tud.DataLoader) and type(lean) is LeanDataLoader
    assert type(loader.get_data_loader(loader_class=tud.DataLoader)) is tud.DataLoader


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("repeat", [False, True])
def test_the_batches_are_those_of_torchs_own_class(num_workers: int, repeat: bool) -> None:
    loader = DataLoader(Noisy(11), batch_size=3, shuffle=True, num_workers=num_workers, seed=5)
    ours = loader.get_data_loader(repeat=repeat)
    theirs = loader.get_data_loader(repeat=repeat, loader_class=tud.DataLoader)
    assert take(ours, 9) == take(theirs, 9)
    assert len(ours) == len(theirs)


@pytest.mark.workers
@pytest.mark.parametrize("persistent", [False, True])
def test_passes_end_and_start_again_as_with_torch(persistent: bool) -> None:
    options: dict[str, Any] = {"batch_size": 4, "num_workers": 1, "persistent_workers": persistent}
    ours = LeanDataLoader(range(10), **options)
    theirs = tud.DataLoader(range(10), **options)
    for _ in range(2):
        assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]
    assert [b.tolist() for b in LeanDataLoader(range(5), batch_size=2)] == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_running_profiler_still_sees_a_span_per_batch(num_workers: int) -> None:
    loader = DataLoader(range(12), batch_size=2, num_workers=num_workers).get_data_loader(True)
    assert len(spans(loader, 4)) == 4


def test_without_a_profiler_no_span_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    entered: list[str] = []
    real = torch.autograd.profiler.record_function.__enter__

    def spy(self: Any) -> Any:
        entered.append(self.name)
        return real(self)

    monkeypatch.setattr(torch.autograd.profiler.record_function, "__enter__", spy)
    take(LeanDataLoader(range(6), batch_size=2), 3)
    assert entered == []
    take(tud.DataLoader(range(6), batch_size=2), 3)
    assert len(entered) == 3  # the control: torch's own class enters one per batch


def test_a_torch_without_the_internals_gets_torchs_iterators(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_lean, "_SUPPORTED", False)
    loader = LeanDataLoader(range(6), batch_size=2)
    iterator = iter(loader)
    assert type(iterator) is torch_loader._SingleProcessDataLoaderIter
    assert [b.tolist() for b in iterator] == [[0, 1], [2, 3], [4, 5]]
