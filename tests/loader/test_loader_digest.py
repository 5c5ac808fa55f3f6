"""The divergence digest of a stream (detsamplers/loader/_digest.py, NOTE [ divergence digest ]).

Laws: the digest at position ``p`` is a pure function of the fingerprint, the fields, ``p``
and the batches at positions ``0`` and ``p - 1`` (the records at the probes, for the sample
digest); batches handed in as ``known`` are a cache, never a different answer. So two
chains of one configuration agree everywhere, and a changed content under an unchanged
fingerprint shows at every position past 0. A chain that cannot be addressed is digested
without probes.
"""

from __future__ import annotations

import re

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st
from torch.utils.data import BatchSampler

from detsamplers import RepeatSampler, ReproducibleShuffleSampler, SkipBatchSampler
from detsamplers.loader._digest import (
    probe_positions,
    sample_digest,
    sample_probes,
    stream_digest,
)
from tests.helpers import ForeignSampler

HEX16 = re.compile(r"^[0-9a-f]{16}$")


def chain(length: int, seed: int, batch: int) -> SkipBatchSampler:
    """A batch chain of an addressable, shuffled, endless stream."""
    stream = RepeatSampler(ReproducibleShuffleSampler(range(length), seed=seed))
    return SkipBatchSampler(BatchSampler(stream, batch, False), 0)


@given(position=st.integers(-5, 10**12))
def test_the_probes_are_the_first_batch_and_the_last_one_consumed(position: int) -> None:
    probes = probe_positions(position)
    if position <= 0:
        assert probes == []
    else:
        assert probes == sorted({0, position - 1})
        assert all(0 <= p < position for p in probes)


@given(samples=st.integers(-3, 10**9), world=st.integers(1, 64), data=st.data())
def test_the_sample_probes_are_sample_0_and_the_saving_ranks_record_of_the_last_batch(
    samples: int, world: int, data: st.DataObject
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    probes = sample_probes(samples, world, rank)
    if samples <= 0:
        assert probes == []
        return
    assert probes == sorted({0, max(0, samples - world + rank)})
    assert all(0 <= p < samples for p in probes)


params = {
    "length": st.integers(1, 20),
    "seed": st.integers(0, 2**32),
    "batch": st.integers(1, 5),
    "position": st.integers(0, 200),
}


@given(**params)
def test_the_stream_digest_is_a_pure_function_and_known_batches_change_nothing(
    length: int, seed: int, batch: int, position: int
) -> None:
    fields = {"seed": seed, "ranks": 1}
    one, two = chain(length, seed, batch), chain(length, seed, batch)
    digest = stream_digest(one, position, "fp", fields)
    assert HEX16.match(digest)
    assert stream_digest(two, position, "fp", fields) == digest
    truth = {p: list(b) for p, b in zip(range(position), iter(two), strict=False)}
    known = {p: truth[p] for p in probe_positions(position)}
    assert stream_digest(one, position, "fp", fields, known=known) == digest
    for p in probe_positions(position):  # one of the two handed in, the other looked up
        assert stream_digest(one, position, "fp", fields, known={p: truth[p]}) == digest


@given(**params, other=st.integers(0, 2**32))
def test_the_stream_digest_changes_with_position_fingerprint_fields_and_probed_batches(
    length: int, seed: int, batch: int, position: int, other: int
) -> None:
    node = chain(length, seed, batch)
    digest = stream_digest(node, position, "fp", {"seed": seed})
    assert stream_digest(node, position + 1, "fp", {"seed": seed}) != digest
    assert stream_digest(node, position, "fp2", {"seed": seed}) != digest
    assert stream_digest(node, position, "fp", {"seed": seed, "ranks": 2}) != digest
    changed = chain(length, other, batch)  # the same fingerprint and fields, other batches
    probes = probe_positions(position)
    differs = any(
        list(a) != list(b)
        for a, b in zip(
            node.batches(np.asarray(probes, dtype=np.int64)),
            changed.batches(np.asarray(probes, dtype=np.int64)),
            strict=True,
        )
    )
    assert (stream_digest(changed, position, "fp", {"seed": seed}) != digest) == differs


def test_a_chain_that_cannot_be_addressed_is_digested_without_probes() -> None:
    foreign = SkipBatchSampler(BatchSampler(ForeignSampler([4, 3, 2, 1]), 2, False), 0)
    other = SkipBatchSampler(BatchSampler(ForeignSampler([1, 2, 3, 4]), 2, False), 0)
    assert not foreign.indexable
    assert stream_digest(foreign, 5, "fp", {}) == stream_digest(other, 5, "fp", {})
    assert stream_digest(foreign, 5, "fp", {}) != stream_digest(foreign, 6, "fp", {})


@given(
    length=st.integers(1, 20),
    seed=st.integers(0, 2**32),
    samples=st.integers(1, 300),
    world=st.integers(1, 8),
    data=st.data(),
)
def test_the_sample_digest_is_pure_and_known_records_are_a_cache(
    length: int, seed: int, samples: int, world: int, data: st.DataObject
) -> None:
    stream = RepeatSampler(ReproducibleShuffleSampler(range(length), seed=seed))
    probes = sample_probes(samples, world, data.draw(st.integers(0, world - 1)))
    digest = sample_digest(stream, samples, "fp", {"seed": seed}, probes)
    assert HEX16.match(digest)
    records = stream.records(np.asarray(probes, dtype=np.int64)).tolist()
    known = dict(zip(probes, records, strict=True))
    assert sample_digest(stream, samples, "fp", {"seed": seed}, probes, known=known) == digest
    assert sample_digest(stream, samples + 1, "fp", {"seed": seed}, probes) != digest
    assert sample_digest(stream, samples, "fp", {"seed": seed + 1}, probes) != digest
    wrong = {p: r + 1 for p, r in known.items()}
    assume(probes)
    assert sample_digest(stream, samples, "fp", {"seed": seed}, probes, known=wrong) != digest
