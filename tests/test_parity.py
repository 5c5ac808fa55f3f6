"""The seeds' helper, and foreign against addressable sources.

The parity with Determined itself, outputs and ``len()`` of every stage of every unshuffled
chain, is tests/test_determined_parity.py, which builds each chain with the installed
``determined.pytorch.samplers``; the rule-based copies of those checks that lived here were
replaced by it.
"""

from __future__ import annotations

from typing import Any

import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

import detsamplers as ds
from tests.helpers import ForeignSampler, take

worlds = st.integers(min_value=1, max_value=5)


def test_seed_helper_validation_mode_shards_without_repeat_or_padding() -> None:
    assert list(ds.make_batch_sampler(range(7), "validation", 0, 3, 0, 2)) == [[0, 3], [6]]
    assert list(ds.make_batch_sampler(range(7), "validation", 0, 3, 2, 2)) == [[2, 5]]


def test_seed_helper_accepts_a_map_style_dataset() -> None:
    dataset = tud.TensorDataset(__import__("torch").arange(6))
    batches = ds.make_batch_sampler(dataset, "validation", 0, 1, 0, 4)
    assert list(batches) == [[0, 1, 2, 3], [4, 5]]


@settings(max_examples=30)
@given(n=st.integers(1, 20), world=worlds, data=st.data())
def test_foreign_and_addressable_sources_give_the_same_shuffled_stream(
    n: int, world: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    seed = data.draw(st.integers(0, 2**32))

    def chain(source: Any) -> Any:
        shuffle = ds.ReproducibleShuffleSampler(source, seed)
        return ds.DistributedSampler(ds.RepeatSampler(shuffle), num_workers=world, rank=rank)

    assert take(chain(range(n)), 3 * n) == take(chain(ForeignSampler(range(n))), 3 * n)
