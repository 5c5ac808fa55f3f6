"""A run of samples cut out of a span (``cut_samples``): the compiled kernel against its loop.

``_kernel.cut_samples`` builds each sample's dict in C; the Python loop of ``cut_samples`` is
its reference and the path without the kernel (NOTE [ one way to read a sample ]). Both are
run on random layouts and runs, and must give equal dicts with equal key orders; the kernel
refuses what the loop would cut short. ``read_samples`` (a cached shard's samples read by
``pread``, NOTE [ cached reads ]) likewise: the same dicts from the same ``pread`` calls.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import webdataset as wds
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers._native import kernel
from detsamplers.loader import WebDatasetSource
from detsamplers.loader._wds.read import _sample_span, _shard_reader
from detsamplers.loader._wds.read._sample_span import (
    Columns,
    cut_samples,
    gather_members,
    read_samples,
)
from detsamplers.loader._wds.shard._packed_members import PackedMembers
from detsamplers.loader._wds.shard._tar_check import HeaderTable

needs_kernel = pytest.mark.skipif(kernel is None, reason="the compiled kernel is not built")

SUFFIXES = st.sampled_from(["cls", "png", "txt", "json", "jpg", "__x__", "é.txt"])


@st.composite
def layouts(draw: st.DrawFn) -> tuple[bytes, int, tuple[str, ...], PackedMembers]:
    """A span from ``base`` and a shard's columns whose members all lie inside it."""
    length = draw(st.integers(0, 300))
    data = bytes(draw(st.lists(st.integers(0, 255), min_size=length, max_size=length)))
    base = draw(st.integers(0, 10_000))
    counts = draw(st.lists(st.integers(0, 4), min_size=1, max_size=12))
    suffixes, offsets, sizes, starts = [], [], [], [0]
    for count in counts:
        for _ in range(count):
            at = draw(st.integers(0, length))
            suffixes.append(draw(SUFFIXES))
            offsets.append(base + at)
            sizes.append(draw(st.integers(0, length - at)))
        starts.append(len(suffixes))
    keys = tuple(f"k{i:03d}" for i in range(len(counts)))
    return data, base, keys, PackedMembers(suffixes, offsets, sizes, starts)


def run_both(
    layout: tuple[bytes, int, tuple[str, ...], PackedMembers], indexes: list[int], slots: list[int]
) -> tuple[list[Any], list[Any]]:
    data, base, keys, packed = layout
    compiled: list[Any] = [None] * len(indexes)
    reference: list[Any] = [None] * len(indexes)
    cut_samples(data, base, arrays(keys, packed), keys, "u", "/p/u", indexes, slots, compiled)
    cut_samples(data, base, lists(packed), keys, "u", "/p/u", indexes, slots, reference)
    return compiled, reference


def lists(packed: PackedMembers) -> Columns:
    """The index's own columns: the Python loop cuts with them."""
    return Columns(packed.starts, packed.offsets, packed.sizes, packed.suffixes)


def arrays(keys: tuple[str, ...], packed: PackedMembers) -> Columns:
    """The header table's int64 columns: the kernel cuts with them."""
    table = HeaderTable(keys, packed)
    return Columns(table.starts, table.offsets, table.sizes, packed.suffixes)


@needs_kernel
@settings(max_examples=200, deadline=None)
@given(layout=layouts(), data=st.data())
def test_the_compiled_cut_gives_the_samples_of_the_python_loop_in_the_same_key_order(
    layout: tuple[bytes, int, tuple[str, ...], PackedMembers], data: st.DataObject
) -> None:
    count = len(layout[2])
    indexes = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=20))
    slots = data.draw(st.lists(st.integers(0, len(indexes) - 1), max_size=len(indexes)))
    compiled, reference = run_both(layout, indexes, slots)
    assert compiled == reference
    assert [list(s) for s in compiled if s] == [list(s) for s in reference if s]
    for i, sample in enumerate(compiled):
        if sample is not None:
            assert all(type(v) is bytes for k, v in sample.items() if k[:2] != "__")
            assert sample["__key__"] == layout[2][indexes[i]]


@needs_kernel
def test_the_compiled_cut_refuses_a_member_outside_the_span_where_the_loop_cuts_it_short() -> None:
    packed = PackedMembers(["cls", "png"], [100, 104], [2, 9], [0, 2])
    out: list[Any] = [None]
    cut_samples(b"abcdefgh", 100, lists(packed), ("k0",), "u", "p", [0], [0], out)
    assert out[0]["png"] == b"efgh"  # sliced short, as Python slices
    with pytest.raises(ValueError, match=r"member 1 \(9 bytes at byte 104\) lies outside the 8"):
        cut_samples(b"abcdefgh", 100, arrays(("k0",), packed), ("k0",), "u", "p", [0], [0], out)


@needs_kernel
@pytest.mark.parametrize("index", [-1, 2])
def test_both_cuts_refuse_a_sample_outside_the_shard(index: int) -> None:
    packed, keys = PackedMembers(["cls", "cls"], [100, 102], [1, 1], [0, 1, 2]), ("k0", "k1")
    for columns in (arrays(keys, packed), lists(packed)):
        with pytest.raises(IndexError, match=rf"sample {index} of 2"):
            cut_samples(b"abcd", 100, columns, keys, "u", "p", [index], [0], [None])


@needs_kernel
def test_the_kernel_refuses_arguments_of_the_wrong_kind() -> None:
    assert kernel is not None
    starts, offsets = np.array([0, 1], dtype=np.int64), np.array([0], dtype=np.int64)
    args: list[Any] = [b"ab", 0, starts, offsets, offsets, ("k",), ["cls"], "u", "p", [0], [0]]
    with pytest.raises(TypeError, match="out should be a list"):
        kernel.cut_samples(*args, (None,))
    with pytest.raises(ValueError, match="sizes should hold int64 items"):
        kernel.cut_samples(*args[:4], offsets.astype(np.float64), *args[5:], [None])
    with pytest.raises(ValueError, match="keys should hold one item per sample"):
        kernel.cut_samples(*args[:5], ("k", "j"), *args[6:], [None])
    with pytest.raises(IndexError, match="slot 3 lies outside"):
        kernel.cut_samples(*args[:10], [3], [None])


@needs_kernel
@settings(max_examples=100, deadline=None)
@given(layout=layouts(), data=st.data())
def test_the_compiled_gather_copies_what_the_python_loop_copies(
    layout: tuple[bytes, int, tuple[str, ...], PackedMembers], data: st.DataObject
) -> None:
    span, base, keys, packed = layout
    table = HeaderTable(keys, packed)
    members = len(packed.offsets)
    first = data.draw(st.integers(0, members))
    stop = data.draw(st.integers(first, members))
    total = sum(packed.sizes[first:stop])
    got = []
    for offsets, sizes in ((table.offsets, table.sizes), (packed.offsets, packed.sizes)):
        out, positions = bytearray(total), np.full(members, -1, dtype=np.int64)
        end = gather_members(span, base, offsets, sizes, first, stop, out, 0, positions)
        got.append((end, bytes(out), positions.tolist()))
    assert got[0] == got[1]
    assert got[0][1] == b"".join(
        span[o - base : o - base + n]
        for o, n in zip(packed.offsets[first:stop], packed.sizes[first:stop], strict=True)
    )


@needs_kernel
def test_the_compiled_gather_refuses_a_member_outside_the_span_or_past_the_output() -> None:
    offsets, sizes = np.array([100, 104], dtype=np.int64), np.array([2, 9], dtype=np.int64)
    positions = np.full(2, -1, dtype=np.int64)
    with pytest.raises(ValueError, match=r"member 1 \(9 bytes at byte 104\) lies outside"):
        gather_members(b"abcdefgh", 100, offsets, sizes, 0, 2, bytearray(11), 0, positions)
    with pytest.raises(ValueError, match="past the end of out"):
        gather_members(b"abcdefgh", 100, offsets, sizes, 0, 1, bytearray(1), 0, positions)


def test_an_epoch_of_kept_windows_is_the_same_with_and_without_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with wds.ShardWriter(str(tmp_path / "s-%02d.tar"), maxcount=50, verbose=0) as sink:
        for i in range(120):
            sink.write({"__key__": f"{i:04d}", "png": bytes([i]) * (i % 7), "cls": i})
    pattern = str(tmp_path / "s-{00..02}.tar")

    def epoch() -> list[Any]:
        source = WebDatasetSource(
            pattern, seed=3, batch_size=16, repeat=False, shuffle_window=20, collate_fn=list
        )
        return [sample for batch in source for sample in batch]

    compiled = epoch()
    monkeypatch.setattr(_shard_reader, "PIECE_BYTES", 3000)  # windows read in several pieces
    assert epoch() == compiled
    monkeypatch.setattr(_sample_span, "kernel", None)
    monkeypatch.setattr(_shard_reader, "kernel", None)
    assert epoch() == compiled
    assert sorted(int(s["cls"]) for s in compiled) == list(range(120))


@st.composite
def tar_layouts(draw: st.DrawFn) -> tuple[bytes, int, tuple[str, ...], PackedMembers]:
    """A file's bytes and a shard's columns whose members lie in it in order, as in a tar."""
    base = draw(st.integers(0, 40))
    counts = draw(st.lists(st.integers(0, 3), min_size=1, max_size=12))
    suffixes, offsets, sizes, starts, at = [], [], [], [0], base
    for count in counts:
        for _ in range(count):
            at += draw(st.integers(0, 9))  # a header's worth of bytes between members, or none
            suffixes.append(draw(SUFFIXES))
            offsets.append(at)
            sizes.append(draw(st.integers(0, 20)))
            at += sizes[-1]
        starts.append(len(suffixes))
    length = at + draw(st.integers(0, 5))
    data = bytes(draw(st.lists(st.integers(0, 255), min_size=length, max_size=length)))
    keys = tuple(f"k{i:03d}" for i in range(len(counts)))
    return data, base, keys, PackedMembers(suffixes, offsets, sizes, starts)


def read_both(
    tmp_path: Path,
    layout: tuple[bytes, int, tuple[str, ...], PackedMembers],
    indexes: list[int],
    slots: list[int],
    run_bytes: int,
) -> list[tuple[int, list[Any], list[tuple[int, int]]]]:
    """``read_samples`` with the kernel and with its loop: what each returned, filled and read."""
    data, base, keys, packed = layout
    path = tmp_path / "shard.bin"
    path.write_bytes(data[base:])  # the file holds the shard from byte ``base``
    got = []
    fd = os.open(path, os.O_RDONLY)
    try:
        for columns in (arrays(keys, packed), lists(packed)):
            calls: list[tuple[int, int]] = []

            def pread(handle: int, size: int, offset: int, calls: list[Any] = calls) -> bytes:
                calls.append((size, offset))
                return os.pread(handle, size, offset)

            out: list[Any] = [None] * len(indexes)
            short = read_samples(
                pread, fd, base, columns, keys, "u", indexes, slots, out, run_bytes
            )
            got.append((short, out, calls))
    finally:
        os.close(fd)
    return got


@needs_kernel
@settings(max_examples=200, deadline=None)
@given(layout=tar_layouts(), data=st.data())
def test_the_compiled_cached_read_makes_the_python_loops_reads_and_gives_its_samples(
    tmp_path_factory: pytest.TempPathFactory,
    layout: tuple[bytes, int, tuple[str, ...], PackedMembers],
    data: st.DataObject,
) -> None:
    count = len(layout[2])
    first = data.draw(st.integers(0, count - 1))  # runs of neighbours, and jumps
    steps = data.draw(st.lists(st.sampled_from([1, 1, 1, -2, 3, 0]), max_size=20))
    indexes = [first]
    for step in steps:
        indexes.append(min(count - 1, max(0, indexes[-1] + step)))
    slots = data.draw(
        st.lists(st.integers(0, len(indexes) - 1), max_size=len(indexes), unique=True).map(
            lambda drawn: sorted(drawn) if len(drawn) % 2 else drawn
        )
    )
    run_bytes = data.draw(st.sampled_from([0, 15, 40, 1 << 20]))
    compiled, reference = read_both(tmp_path_factory.mktemp("r"), layout, indexes, slots, run_bytes)
    assert compiled[0] == reference[0] == -1
    assert compiled[2] == reference[2]  # the same preads, in the same order
    assert compiled[1] == reference[1]
    assert [list(s) for s in compiled[1] if s] == [list(s) for s in reference[1] if s]
    span, _, keys, packed = layout
    for i in slots:  # each sample as cut alone from the file
        alone: list[Any] = [None] * len(indexes)
        cut_samples(span, 0, lists(packed), keys, "u", "", indexes, [i], alone)
        want = {k: v for k, v in alone[i].items() if k != "__local_path__"}
        assert compiled[1][i] == want
        assert all(type(v) is bytes for k, v in compiled[1][i].items() if k[:2] != "__")
    assert len(compiled[2]) <= len(slots)  # a sample, or a run of them, is one read


@needs_kernel
@settings(max_examples=100, deadline=None)
@given(layout=tar_layouts(), data=st.data())
def test_a_short_file_stops_both_cached_reads_at_the_same_slot(
    tmp_path_factory: pytest.TempPathFactory,
    layout: tuple[bytes, int, tuple[str, ...], PackedMembers],
    data: st.DataObject,
) -> None:
    span, base, keys, packed = layout
    cut = data.draw(st.integers(base, len(span)))
    layout = (span[:cut], base, keys, packed)  # truncated
    count = len(keys)
    indexes = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=10))
    slots = list(range(len(indexes)))
    compiled, reference = read_both(tmp_path_factory.mktemp("r"), layout, indexes, slots, 1 << 20)
    assert compiled == reference
    if compiled[0] >= 0:  # the first read that came back short, named by its slot
        assert compiled[1][compiled[0]] is None


@needs_kernel
@pytest.mark.parametrize("index", [-1, 2])
def test_both_cached_reads_refuse_a_sample_outside_the_shard_naming_it(
    tmp_path: Path, index: int
) -> None:
    packed, keys = PackedMembers(["cls", "cls"], [0, 1], [1, 1], [0, 1, 2]), ("k0", "k1")
    (tmp_path / "shard.bin").write_bytes(b"ab")
    fd = os.open(tmp_path / "shard.bin", os.O_RDONLY)
    try:
        for columns in (arrays(keys, packed), lists(packed)):
            out: list[Any] = [None, None]
            with pytest.raises(IndexError, match=rf"sample {index} of 2 in shard 'u'"):
                read_samples(os.pread, fd, 0, columns, keys, "u", [0, index], [0, 1], out, 64)
            assert out[0] == {"__key__": "k0", "__url__": "u", "cls": b"a"}
    finally:
        os.close(fd)
