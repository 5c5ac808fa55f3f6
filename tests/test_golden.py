"""Golden orders: these exact values are the contract for fixed seeds.

If one of these changes, every saved checkpoint resumes onto different data. Change them
only with a new state format version and a CHANGELOG entry that says so.
"""

from __future__ import annotations

import detsamplers as ds
from tests.helpers import take


def test_the_training_chain_yields_these_batches_for_seed_0() -> None:
    chain = ds.make_batch_sampler(range(1000), "training", 0, 1, 0, 8, 0)
    assert take(chain, 3) == [
        [995, 354, 926, 731, 657, 780, 30, 897],
        [348, 231, 412, 59, 156, 333, 669, 997],
        [202, 478, 368, 166, 924, 766, 442, 879],
    ]


def test_a_billion_records_rank_3_of_4_after_a_million_batches_yields_these() -> None:
    chain = ds.make_batch_sampler(range(10**9), "training", 42, 4, 3, 4, 10**6)
    assert take(chain, 2) == [
        [919582767, 326306488, 761837232, 717652452],
        [474132662, 805970816, 95233601, 359578316],
    ]


def test_the_feistel_shuffle_of_ten_records_yields_these_passes() -> None:
    sampler = ds.ReproducibleShuffleSampler(range(10), 0)
    assert list(sampler) == [7, 1, 2, 8, 6, 5, 9, 0, 3, 4]
    assert list(sampler) == [2, 4, 9, 3, 1, 0, 6, 5, 8, 7]


def test_the_exact_shuffle_of_ten_records_yields_these_passes() -> None:
    sampler = ds.ReproducibleShuffleSampler(range(10), 0, permutation="exact")
    assert list(sampler) == [1, 6, 8, 0, 7, 3, 5, 9, 4, 2]
    assert list(sampler) == [8, 1, 2, 5, 9, 3, 0, 4, 6, 7]
