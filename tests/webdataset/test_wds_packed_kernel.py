"""A sample's packed small fields split in C (``_kernel.unpack_fields``) against the reference.

``_small_fields.unpack_fields`` is the reference and the path without the kernel (NOTE [ packed
small fields ]). The kernel must give the same dict, key order included, for every member it
takes, take every well-formed member with ASCII names, and hand back (``None``) everything
else, so that the reference raises its error naming the shard: random members, members cut,
grown and with bytes changed, lengths that lie, and other types.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from detsamplers._native import kernel
from detsamplers.loader._wds.shard import _small_fields
from detsamplers.loader._wds.shard._small_fields import (
    PACKED_SUFFIX,
    pack_fields,
    unpack_fields,
    unpack_samples,
)

pytestmark = pytest.mark.skipif(kernel is None, reason="the compiled kernel is not built")

ASCII_NAMES = st.text("abcXYZ.09-", min_size=1, max_size=12).filter(lambda n: n[0] != "_")
NAMES = ASCII_NAMES | st.text(min_size=1, max_size=6)
MEMBERS = st.dictionaries(st.sampled_from(["png", "jpg", "Other", "é.txt"]), st.binary(max_size=40))
META = st.dictionaries(st.sampled_from(["__key__", "__url__", "__local_path__"]), st.text())


def reference(sample: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """What the Python function gives (a dict, or the error it raises)."""
    with monkeypatch.context() as patch:
        patch.setattr(_small_fields, "kernel", None)
        try:
            return list(unpack_fields(sample).items())
        except (ValueError, TypeError) as error:
            return error


def compiled(sample: dict[str, Any]) -> Any:
    got = kernel.unpack_fields(sample, PACKED_SUFFIX)
    return None if got is None else list(got.items())


@st.composite
def samples(draw: st.DrawFn, names: st.SearchStrategy[str] = NAMES) -> dict[str, Any]:
    """A sample: meta keys, members and a packed member, in a drawn order."""
    fields = draw(st.dictionaries(names, st.binary(max_size=300), min_size=1, max_size=6))
    items = [*draw(META).items(), *draw(MEMBERS).items(), (PACKED_SUFFIX, pack_fields(fields))]
    order = draw(st.permutations(items))
    return dict(order)


@given(sample=samples())
def test_the_kernel_gives_what_the_reference_gives(sample: dict[str, Any]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        want = reference(sample, monkeypatch)
    got = compiled(sample)
    if got is not None:
        assert got == want
    else:  # handed back: a name out of ASCII, or one the reference refuses too
        assert isinstance(want, Exception) or not all(n.isascii() for n in _fields_of(sample))


def _fields_of(sample: dict[str, Any]) -> list[str]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(_small_fields, "kernel", None)
        return list(_small_fields._split(sample[PACKED_SUFFIX], sample))


@given(sample=samples(ASCII_NAMES))
def test_the_kernel_takes_every_well_formed_member_of_ascii_names(sample: dict[str, Any]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        want = reference(sample, monkeypatch)
    if not isinstance(want, Exception):
        assert compiled(sample) == want
    else:  # two names equal once lower-cased, or a name the sample has as a member
        assert compiled(sample) is None


@given(
    sample=samples(),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 10_000),
    extra=st.binary(max_size=3),
)
def test_a_damaged_member_is_handed_back_or_read_as_the_reference_reads_it(
    sample: dict[str, Any], edits: list[tuple[int, int]], cut: int, extra: bytes
) -> None:
    data = bytearray(sample[PACKED_SUFFIX])
    for at, byte in edits:
        data[at % len(data)] = byte
    sample[PACKED_SUFFIX] = bytes(data[: cut % (len(data) + 1)]) + extra
    with pytest.MonkeyPatch.context() as monkeypatch:
        want = reference(sample, monkeypatch)
    got = compiled(sample)
    if isinstance(want, Exception):
        assert got is None
        with pytest.raises(type(want), match="packed member"):  # the error, with the kernel on
            unpack_fields(sample)
    elif got is not None:
        assert got == want


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x80",  # an empty map
        b"\xdf\xff\xff\xff\xff" + b"\xa1a\xc4\x00",  # 2**32 - 1 entries claimed
        b"\x81\xdb\xff\xff\xff\xff" + b"a",  # a name of 2**32 - 1 bytes claimed
        b"\x81\xa1a\xc6\xff\xff\xff\xff" + b"xy",  # a value of 2**32 - 1 bytes claimed
        b"\x81\xa1a\xc4\x01",  # a value cut short
        b"\x81\xa1a\xc4\x00\x00",  # a byte after the last value
        b"\x81\xa1_\xc4\x00",  # a meta name
        b"\x81\xa3a/b\xc4\x00",  # a name with "/"
        b"\x81\xa2a\x00\xc4\x00",  # a name with NUL
        b"\x82\xa1a\xc4\x00\xa1A\xc4\x00",  # a name repeated once lower-cased
        b"\x81\xa1a\x01",  # an int where the bin should be
        b"\x81\x01\xc4\x00",  # an int where the name should be
        b"\x91\xa1a",  # an array, not a map
    ],
)
def test_members_that_lie_or_break_the_form_are_handed_back(
    data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    sample = {"__key__": "k", "__url__": "s3://b/s-0.tar", PACKED_SUFFIX: data}
    assert kernel.unpack_fields(sample, PACKED_SUFFIX) is None
    with pytest.raises(ValueError, match=r"shard 's3://b/s-0\.tar'.*sample 'k'"):
        unpack_fields(sample)


def test_what_the_kernel_does_not_take_goes_to_the_reference() -> None:
    packed = pack_fields({"cls": b"7"})
    assert kernel.unpack_fields({"__key__": "k"}, PACKED_SUFFIX) is None  # no packed member
    assert kernel.unpack_fields({PACKED_SUFFIX: bytearray(packed)}, PACKED_SUFFIX) is None
    assert kernel.unpack_fields({PACKED_SUFFIX: packed, 3: b"x"}, PACKED_SUFFIX) is None
    assert kernel.unpack_fields({PACKED_SUFFIX: packed, "cls": b"8"}, PACKED_SUFFIX) is None
    # and the public function still reads them, or says why
    assert unpack_fields({PACKED_SUFFIX: bytearray(packed)}) == {"cls": b"7"}
    with pytest.raises(ValueError, match="both packed and a member"):
        unpack_fields({"__key__": "k", PACKED_SUFFIX: packed, "cls": b"8"})
    with pytest.raises(TypeError):
        kernel.unpack_fields("not a dict", PACKED_SUFFIX)
    with pytest.raises(TypeError):
        kernel.unpack_fields({}, b"not a str")


def test_a_large_member_with_many_fields() -> None:
    fields = {f"f{i:05d}": struct.pack("<I", i) * (i % 7) for i in range(20_000)}
    sample = {"__key__": "k", PACKED_SUFFIX: pack_fields(fields), "png": b"x"}
    got = kernel.unpack_fields(sample, PACKED_SUFFIX)
    assert list(got) == ["__key__", *sorted([*fields, "png"])]
    assert got["f00013"] == struct.pack("<I", 13) * 6


PLAIN = st.just({"__key__": "plain", "png": b"x"})


@given(batch=st.lists(samples() | PLAIN, max_size=8))
def test_a_batch_is_unpacked_in_place_as_the_reference_unpacks_it(
    batch: list[dict[str, Any]],
) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        want = [reference(dict(sample), monkeypatch) for sample in batch]
    if any(isinstance(each, Exception) for each in want):
        with pytest.raises(ValueError, match="packed member"):
            unpack_samples([dict(sample) for sample in batch])
        return
    got = unpack_samples([dict(sample) for sample in batch])
    assert [list(sample.items()) for sample in got] == want


def test_the_batch_loop_stops_where_the_reference_takes_over() -> None:
    good = {"__key__": "a", PACKED_SUFFIX: pack_fields({"cls": b"1"})}
    accented = {"__key__": "b", PACKED_SUFFIX: pack_fields({"é": b"2"})}
    batch: list[Any] = [dict(good), {"__key__": "c"}, dict(accented), dict(good)]
    assert kernel.unpack_samples(batch, PACKED_SUFFIX) == 2  # the third: a name out of ASCII
    assert batch[0] == {"__key__": "a", "cls": b"1"} and batch[2] == accented
    assert unpack_samples(batch) == [
        {"__key__": "a", "cls": b"1"},
        {"__key__": "c"},
        {"__key__": "b", "é": b"2"},
        {"__key__": "a", "cls": b"1"},
    ]
    other = [OrderedDict(good)]  # not a dict itself: handed back at once
    assert kernel.unpack_samples(other, PACKED_SUFFIX) == 0
    assert unpack_samples(other) == [{"__key__": "a", "cls": b"1"}]
    assert kernel.unpack_samples([dict(good)], PACKED_SUFFIX) == -1
    with pytest.raises(TypeError):
        kernel.unpack_samples((good,), PACKED_SUFFIX)
