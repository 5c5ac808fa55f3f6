"""The compiled mixture kernel against the numpy code (NOTE [ compiled mixture kernel ])."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from itertools import islice
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import detsamplers as ds
from detsamplers import MixSampler, _mix, _native

kernel = _native.kernel
needs_kernel = pytest.mark.skipif(kernel is None, reason=_native.kernel_status())


def test_the_kernel_is_built_where_the_tests_run() -> None:
    # `make install` builds it (a C compiler is part of the development set-up), so a test
    # run without it would compare nothing; DETSAMPLERS_NO_KERNEL=1 is the deliberate way.
    if os.environ.get("DETSAMPLERS_NO_KERNEL", "") not in ("", "0"):
        pytest.skip("DETSAMPLERS_NO_KERNEL is set")
    assert _native.kernel_status() == "compiled"


def numpy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_native, "kernel", None)


def kernel_records(mix: MixSampler, positions: np.ndarray) -> np.ndarray | None:
    """What ``records`` computes in the kernel, or None where it takes the numpy path."""
    found = mix._progression(positions)
    return None if found is None else mix._kernel_records(positions, *found)


# Lengths: tiny domains (eight Feistel rounds, cycle walking from 64), a single record, and
# domains past 2**16 (four rounds), so that every branch of the network is compared.
LENGTH = st.one_of(
    st.integers(1, 70), st.integers(71, 5000), st.integers(2**16, 2**22), st.integers(2**40, 2**62)
)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(LENGTH, min_size=1, max_size=4),
    seed=st.integers(0, 2**62),
    first=st.one_of(st.integers(0, 5000), st.integers(0, 2**50)),
    stride=st.one_of(st.integers(1, 9), st.integers(10, 300)),
    count=st.integers(_mix.KERNEL_MIN_POSITIONS, _mix.KERNEL_MIN_POSITIONS + 3000),
    data=st.data(),
)
@needs_kernel
def test_the_kernel_gives_the_numpy_records_and_locations(
    lengths: list[int], seed: int, first: int, stride: int, count: int, data: st.DataObject
) -> None:
    # A mixture numbers its records as one int64 range (refused beyond: test_mix.py).
    assume(sum(lengths) < 2**63)
    weights = data.draw(st.lists(st.integers(1, 9), min_size=len(lengths), max_size=len(lengths)))
    window = data.draw(st.one_of(st.none(), st.integers(len(lengths) * 9, 600)))
    # A curriculum moves the second segment's bases off zero; the block starts inside it.
    start = data.draw(st.one_of(st.none(), st.integers(1, 10**6)))
    plan = [] if start is None else [(start, weights[::-1])]
    if start is not None:
        first += start
    samplers = [ds.ReproducibleShuffleSampler(range(n), seed + i) for i, n in enumerate(lengths)]
    mix = MixSampler(samplers, weights, seed, window=window, curriculum=plan)
    positions = first + stride * np.arange(count, dtype=np.int64)
    segment = mix._segments[-1] if plan else mix._segments[0]
    local = first - segment.start

    compiled = mix.records(positions)
    located = segment.locate_stride(local, stride, count)
    with pytest.MonkeyPatch.context() as patch:
        numpy_path(patch)
        assert kernel_records(mix, positions) is None
        expected = mix.records(positions)
        expected_located = segment.locate_stride(local, stride, count)
    assert compiled.tolist() == expected.tolist()
    assert located[0].tolist() == expected_located[0].tolist()
    assert located[1].tolist() == expected_located[1].tolist()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**40), start=st.integers(1, 10**5), data=st.data())
@needs_kernel
def test_the_kernel_gives_the_numpy_records_before_and_after_a_component_is_added(
    seed: int, start: int, data: st.DataObject
) -> None:
    # The segment before the switch names two of the three components (NOTE [ adding a
    # component ]); a block on each side of it, in the kernel and in numpy.
    lengths = [data.draw(st.integers(1, 3000)) for _ in range(3)]
    samplers = [ds.ReproducibleShuffleSampler(range(n), seed + i) for i, n in enumerate(lengths)]
    mix = MixSampler(samplers, [3, 1], seed, curriculum=[(start, [2, 1, 1])])
    stride = data.draw(st.integers(1, 70))
    count = _mix.KERNEL_MIN_POSITIONS
    for first in (max(0, start - stride * count - 5), start + data.draw(st.integers(0, 10**6))):
        positions = first + stride * np.arange(count, dtype=np.int64)
        if first < start <= int(positions[-1]):
            continue  # across the switch: numpy only (tested above)
        compiled = kernel_records(mix, positions)
        assert compiled is not None
        with pytest.MonkeyPatch.context() as patch:
            numpy_path(patch)
            expected = mix.records(positions)
        assert compiled.tolist() == expected.tolist()


@needs_kernel
def test_a_block_crossing_a_curriculum_switch_or_with_gaps_takes_the_numpy_path() -> None:
    mix = MixSampler(
        [ds.ReproducibleShuffleSampler(range(n), i) for i, n in enumerate([5000, 700])],
        [3, 1],
        seed=7,
        curriculum=[(10_000, [1, 1])],
    )
    across = np.arange(8_000, 12_000, dtype=np.int64)
    assert kernel_records(mix, across) is None
    gaps = np.arange(0, 9_000, 3, dtype=np.int64)
    gaps[-1] += 1
    assert kernel_records(mix, gaps) is None
    inside = np.arange(12_000, 16_000, dtype=np.int64)
    assert kernel_records(mix, inside) is not None


@needs_kernel
def test_components_that_are_not_feistel_shuffles_keep_the_numpy_gather() -> None:
    # A plain range component has no permutation for the kernel: records() gathers in
    # numpy, while locating still runs compiled; the stream is the same either way.
    mix = MixSampler([range(3000), ds.ReproducibleShuffleSampler(range(900), 1)], [2, 1], 3)
    positions = 5 + 8 * np.arange(4096, dtype=np.int64)
    assert kernel_records(mix, positions) is None
    with pytest.MonkeyPatch.context() as patch:
        numpy_path(patch)
        expected = mix.records(positions)
    assert mix.records(positions).tolist() == expected.tolist()


@needs_kernel
def test_a_mixture_of_many_components_is_located_in_the_kernel_and_shuffled_in_numpy() -> None:
    count = _mix.KERNEL_MAX_COMPONENTS + 1
    samplers = [ds.ReproducibleShuffleSampler(range(50 + i), i) for i in range(count)]
    mix = MixSampler(samplers, [1] * count, 9)
    positions = 3 + 2 * np.arange(4096, dtype=np.int64)
    assert kernel_records(mix, positions) is None
    got = mix.records(positions)
    with pytest.MonkeyPatch.context() as patch:
        numpy_path(patch)
        expected = mix.records(positions)
    assert got.tolist() == expected.tolist()
    assert kernel is not None
    segment = mix._segments[0]
    params = _mix._kernel_params(mix._perms or [], mix._offsets)
    with pytest.raises(ValueError, match="at most 64 components, not 65"):
        kernel.records_stride(*segment.kernel_args(), 0, 1, 10, params, np.zeros(10, np.int64))


@needs_kernel
def test_short_blocks_build_only_the_arrangements_they_touch() -> None:
    # A seek's first batch must not pay for the whole table (the 5 ms target of the seek).
    mix = MixSampler(
        [ds.ReproducibleShuffleSampler(range(n), i) for i, n in enumerate([10**9] * 3)],
        [0.6, 0.25, 0.15],
        seed=0,
    )
    segment = mix._segments[0]
    mix.records(10**12 + np.arange(32, dtype=np.int64))
    assert 0 < int(segment._built.sum()) < segment.arrangements
    mix.records(10**12 + np.arange(_mix.KERNEL_MIN_POSITIONS, dtype=np.int64))
    assert bool(segment._built.all())


@needs_kernel
def test_a_pickled_mixture_rebuilds_the_kernel_tables_and_gives_the_same_records() -> None:
    samplers = [ds.ReproducibleShuffleSampler(range(n), i) for i, n in enumerate([7000, 800])]
    mix = MixSampler(samplers, [3, 1], 4)
    positions = 11 + 5 * np.arange(4096, dtype=np.int64)
    expected = mix.records(positions)
    assert mix._segments[0]._kernel_tables is not None
    copy = pickle.loads(pickle.dumps(mix))
    assert copy._segments[0]._kernel_tables is None
    assert copy.records(positions).tolist() == expected.tolist()


def test_windows_too_wide_for_the_compact_table_stay_in_numpy() -> None:
    samplers = [ds.ReproducibleShuffleSampler(range(n), i) for i, n in enumerate([900, 90])]
    mix = MixSampler(samplers, [3, 1], 2, window=_mix.KERNEL_MAX_WINDOW + 4)
    positions = np.arange(4096, dtype=np.int64)
    assert kernel_records(mix, positions) is None
    assert not mix._segments[0].kernel_ready(4096)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"codes": np.zeros(3, dtype=np.uint32)}, "codes should hold"),
        ({"codes": "int64"}, "codes should hold .* 4-byte items"),
        ({"prefix": np.zeros(3, dtype=np.uint16)}, "prefix should hold"),
        ({"bases": np.zeros(1, dtype=np.int64)}, "bases should hold"),
        ({"counts": np.zeros(2, dtype=np.int32)}, "counts should hold"),
        ({"out": np.zeros(3, dtype=np.int64)}, "out should hold"),
        ({"out": np.zeros(100, dtype=np.int32)}, "out should hold"),
        ({"params": np.zeros((1, 3), dtype=np.uint64)}, "params should hold"),
        ({"arrangements": 3}, "bad table shape"),
        ({"window": 2**15 + 1}, "bad table shape"),
        ({"first": -1}, "non-negative positions"),
        ({"stride": 0}, "non-negative positions"),
    ],
)
@needs_kernel
def test_the_kernel_refuses_buffers_of_the_wrong_size(change: dict[str, Any], message: str) -> None:
    assert kernel is not None
    samplers = [ds.ReproducibleShuffleSampler(range(n), i) for i, n in enumerate([50, 9])]
    mix = MixSampler(samplers, [1, 1], 0)
    segment = mix._segments[0]
    assert segment.kernel_ready(_mix.KERNEL_MIN_POSITIONS)
    (codes, prefix, bases, counts), key, window, arrangements, k = segment.kernel_args()
    args: dict[str, Any] = {
        "codes": codes,
        "prefix": prefix,
        "bases": bases,
        "counts": counts,
        "window": window,
        "arrangements": arrangements,
        "first": 0,
        "stride": 1,
        "params": _mix._kernel_params(mix._perms or [], mix._offsets),
        "out": np.zeros(100, dtype=np.int64),
    }
    args.update(change)
    if isinstance(args["codes"], str):
        args["codes"] = codes.astype(np.int64)
    tables = (args["codes"], args["prefix"], args["bases"], args["counts"])
    with pytest.raises(ValueError, match=message):
        kernel.records_stride(
            tables, key, args["window"], args["arrangements"], k,
            args["first"], args["stride"], 100, args["params"], args["out"],
        )  # fmt: skip
    good, short = np.zeros(100, dtype=np.int64), np.zeros(3, dtype=np.int64)
    whole = (codes, prefix, bases, counts)
    with pytest.raises(ValueError, match="position_out should hold 100 8-byte items"):
        kernel.locate_stride(whole, key, window, arrangements, k, 0, 1, 100, good, short)
    with pytest.raises(BufferError):
        kernel.locate_stride(whole, key, window, arrangements, k, 0, 1, 3, b"x" * 24, short)
    with pytest.raises(TypeError):
        kernel.locate_stride(whole[:3], key, window, arrangements, k, 0, 1, 3, good, short)


@pytest.mark.subprocess
def test_turning_the_kernel_off_gives_the_same_stream() -> None:
    # A whole batch sampler in a fresh interpreter with DETSAMPLERS_NO_KERNEL=1: the stream,
    # blocks of 16,384 positions included, is the one this process computes.
    script = (
        "import detsamplers as ds, detsamplers._native as n, itertools, json\n"
        "chain = ds.make_mixed_batch_sampler([range(50_000), range(7_000), range(300)], "
        "[0.6, 0.25, 0.15], 5, 4, 1, 32)\n"
        "print(json.dumps([n.kernel_status(), list(itertools.islice(chain, 1500))]))\n"
    )
    env = dict(os.environ, DETSAMPLERS_NO_KERNEL="1")
    off = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    status, batches = json.loads(off.stdout)
    assert status == "numpy (DETSAMPLERS_NO_KERNEL is set)"
    chain = ds.make_mixed_batch_sampler(
        [range(50_000), range(7_000), range(300)], [0.6, 0.25, 0.15], 5, 4, 1, 32
    )
    assert list(islice(chain, 1500)) == batches
