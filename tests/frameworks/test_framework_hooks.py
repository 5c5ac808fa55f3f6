"""The loader as frameworks see it: already split, and set_epoch never moves a stream."""

from itertools import islice

import pytest
import torch
import torch.utils.data as tud
from hypothesis import given
from hypothesis import strategies as st

from detsamplers.loader import DataLoader


def _train(world: int, rank: int, **kwargs: object) -> tud.DataLoader:
    loader = DataLoader(range(24), batch_size=2, shuffle=True, seed=7, **kwargs)  # type: ignore[arg-type]
    return loader.get_data_loader(repeat=True, num_replicas=world, rank=rank)


def test_the_loader_sampler_is_a_distributed_sampler_describing_this_rank() -> None:
    train = _train(3, 2)
    assert isinstance(train.sampler, tud.DistributedSampler)
    assert train.batch_sampler.sampler is train.sampler
    assert (train.sampler.num_replicas, train.sampler.rank, train.sampler.seed) == (3, 2, 7)
    assert train.sampler.shuffle and len(train.sampler) == 8
    with pytest.raises(TypeError, match=r"is not iterated: iterate loader\.batch_sampler"):
        iter(train.sampler)


@given(st.lists(st.integers(0, 50), max_size=6))
def test_set_epoch_on_a_training_stream_never_changes_its_batches(epochs: list[int]) -> None:
    plain = [b.tolist() for b in islice(_train(2, 1), 20)]
    train = _train(2, 1)
    got = []
    for epoch in [*epochs, 0]:
        train.sampler.set_epoch(epoch)
        train.batch_sampler.set_epoch(epoch)
        got.append(next(iter(train)).tolist())
    got += [b.tolist() for b in islice(train, 20 - len(got))]
    assert got == plain


def test_set_epoch_on_a_validation_loader_selects_the_pass() -> None:
    loader = DataLoader(range(10), batch_size=5, shuffle=True, seed=1)
    val = loader.get_data_loader(num_replicas=2, rank=0)
    passes = [[b.tolist() for b in val] for _ in range(3)]
    val.sampler.set_epoch(1)
    assert [b.tolist() for b in val] == passes[1]
    val.sampler.set_epoch(0)
    assert [b.tolist() for b in val] == passes[0]


def test_set_epoch_refuses_a_negative_epoch() -> None:
    with pytest.raises(ValueError, match="epoch"):
        _train(1, 0).sampler.set_epoch(-1)


def test_the_view_keeps_the_generator_accelerate_gives_it_and_the_order_ignores_it() -> None:
    train = _train(2, 0)
    expected = [b.tolist() for b in islice(_train(2, 0), 4)]
    view = train.sampler
    assert view.generator is None
    generator = torch.Generator()
    view.generator = generator  # what Accelerate's multi-process prepare does first
    assert view.generator is generator
    generator.manual_seed(123)
    assert [b.tolist() for b in islice(train, 4)] == expected
    with pytest.raises(TypeError, match=r"generator should be a torch.Generator or None.*int"):
        view.generator = 7


# In the frameworks tier: importing lightning imports matplotlib, whose first import in a fresh
# cache runs `fc-list` (a process), and costs seconds of CPU the fast tier does not spend.
@pytest.mark.frameworks
def test_lightning_sees_the_loader_as_split_and_resumable_and_its_set_epoch_moves_nothing() -> None:
    pytest.importorskip("lightning")
    from lightning.fabric.utilities.data import _set_sampler_epoch
    from lightning.fabric.utilities.types import _Stateful

    train = _train(2, 1)
    assert isinstance(train, _Stateful)
    batches = iter(train)
    next(batches)
    before = train.state_dict()
    _set_sampler_epoch(train, 3)  # what Lightning's fit loop calls each epoch
    assert train.state_dict() == before
    assert train.sampler.epoch == 3


def test_accelerate_single_process_loader_calls_set_epoch_on_each_iter_without_error() -> None:
    pytest.importorskip("accelerate")
    from accelerate.data_loader import prepare_data_loader

    train = _train(1, 0)
    expected = [b.tolist() for b in islice(_train(1, 0), 3)]
    prepared = prepare_data_loader(train, num_processes=1, process_index=0)
    assert [b.tolist() for b in islice(prepared, 3)] == expected  # set_epoch(0) was called
