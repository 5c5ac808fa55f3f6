"""ShardWriter(pack_small=n): small fields in one member (NOTE [ packed small fields ])."""

from __future__ import annotations

import io
import itertools
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detsamplers.loader import ShardWriter, WebDatasetSource
from detsamplers.loader._wds.shard._small_fields import PACKED_SUFFIX, pack_fields

_META = ("__url__", "__local_path__")


def _write(folder: Path, samples: list[dict[str, Any]], **kw: Any) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    with ShardWriter(str(folder / "s-%d.tar"), maxcount=3, verbose=0, mtime=1e9, **kw) as sink:
        for sample in samples:
            sink.write(dict(sample))
    count = len(list(folder.glob("s-*.tar")))
    return str(folder / f"s-{{0..{count - 1}}}.tar")


def _read(urls: str, **kw: Any) -> list[list[tuple[str, Any]]]:
    source = WebDatasetSource(urls, seed=3, batch_size=2, repeat=False, collate_fn=list, **kw)
    return [[(k, v) for k, v in s.items() if k not in _META] for b in source for s in b]


def _samples(count: int) -> list[dict[str, Any]]:
    return [
        {"__key__": f"k{i:03d}", "cls": i, "txt": "x" * (i * 37 % 900), "png": bytes([i]) * 3000}
        for i in range(count)
    ]


_names = st.text(alphabet="abcdefghij.", min_size=1, max_size=6).filter(
    lambda n: not n.startswith(".")
)
_fields = st.dictionaries(_names, st.binary(max_size=1500), min_size=1, max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    samples=st.lists(_fields, min_size=1, max_size=7),
    pack_small=st.integers(min_value=0, max_value=2000),
)
def test_the_source_reads_packed_shards_as_the_same_sample_dicts_in_the_same_order(
    samples: list[dict[str, bytes]], pack_small: int
) -> None:
    items = [{"__key__": f"k{i}", **fields} for i, fields in enumerate(samples)]
    with tempfile.TemporaryDirectory() as folder:
        plain = _write(Path(folder, "plain"), items)
        packed = _write(Path(folder, "packed"), items, pack_small=pack_small)
        assert _read(packed) == _read(plain)
        assert len(_read(packed)) == len(items)


def test_a_packed_shard_holds_one_member_for_the_small_fields_and_takes_fewer_bytes(
    tmp_path: Path,
) -> None:
    items = _samples(12)
    _write(tmp_path / "plain", items)
    _write(tmp_path / "packed", items, pack_small=1024)
    with tarfile.open(tmp_path / "packed" / "s-0.tar") as tar:
        names = tar.getnames()
    assert names[:2] == ["k000.packed_fields.msgpack", "k000.png"]  # cls and txt: one member
    assert len(names) == 2 * 3

    def occupied(folder: Path) -> int:  # headers, data and padding; not tar's end records
        total = 0
        for shard in folder.glob("*.tar"):
            with tarfile.open(shard) as tar:
                last = tar.getmembers()[-1]
                total += last.offset_data + -(-last.size // 512) * 512
        return total

    # Each sample saves at least the 512-byte header of one of its two small fields.
    assert occupied(tmp_path / "plain") - occupied(tmp_path / "packed") >= 12 * 512


def test_plain_webdataset_reads_every_packed_sample_and_unpack_fields_gives_its_fields(
    tmp_path: Path,
) -> None:
    items = _samples(10)
    plain = _write(tmp_path / "plain", items)
    packed = _write(tmp_path / "packed", items, pack_small=1024)
    as_read = list(wds.WebDataset(packed, shardshuffle=False).decode())
    assert [s["__key__"] for s in as_read] == [s["__key__"] for s in items]
    assert {k for s in as_read for k in s if k[:2] != "__"} == {PACKED_SUFFIX, "png"}
    assert all(isinstance(s[PACKED_SUFFIX], bytes) for s in as_read)

    def fields(urls: str, *stages: Any) -> list[list[tuple[str, Any]]]:
        dataset = wds.WebDataset(urls, shardshuffle=False)
        for stage in stages:
            dataset = dataset.map(stage)
        return [[(k, v) for k, v in s.items() if k not in _META] for s in dataset.decode()]

    assert fields(packed, ShardWriter.unpack_fields) == fields(plain)


def test_msgpack_reads_a_packed_member_as_the_map_of_its_fields(tmp_path: Path) -> None:
    msgpack = pytest.importorskip("msgpack")
    packed = _write(tmp_path, _samples(3), pack_small=1024)
    sample = next(iter(wds.WebDataset(packed, shardshuffle=False)))
    assert msgpack.unpackb(sample[PACKED_SUFFIX]) == {"cls": b"0", "txt": b""}
    assert msgpack.packb({"cls": b"0", "txt": b""}) == sample[PACKED_SUFFIX]


def test_a_packed_source_resumes_from_its_state_exactly(tmp_path: Path) -> None:
    packed = _write(tmp_path, _samples(20), pack_small=1024)

    def source() -> WebDatasetSource:
        return WebDatasetSource(packed, seed=5, batch_size=3, collate_fn=list, decode=())

    first = source()
    stream = iter(first)
    head = [next(stream) for _ in range(4)]
    state = first.state_dict()
    after = [next(stream) for _ in range(5)]
    again = source()
    again.load_state_dict(state)
    assert list(itertools.islice(iter(again), 5)) == after
    assert head[0][0]["cls"] in range(20)


def _hostile(tmp_path: Path, data: bytes) -> str:
    shard = tmp_path / "bad-0.tar"
    with wds.TarWriter(str(shard)) as sink:
        sink.write({"__key__": "k0", PACKED_SUFFIX: data, "png": b"p"})
    return str(shard)


_GOOD = pack_fields({"cls": b"7", "txt": b"hello"})


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (_GOOD[:-2], "claims 5 bytes, past the member's end"),  # truncated
        (_GOOD.replace(b"\xc4\x05hello", b"\xc4\xffhello"), "claims 255 bytes"),  # lying length
        (_GOOD + b"\0", "1 bytes follow the last field"),
        (b"\xdf\xff\xff\xff\xff" + _GOOD[1:], "claims 4294967295 fields"),
        (b"\x82\xa3cls\xa17" + _GOOD[8:], "does not start field 'cls'"),
        (b"\x82\xa3cls\xc4\x017\xa3cls\xc4\x018", "repeated"),
        (b"", "the member is empty"),
        (b"\xc6\x00", "does not start a MessagePack map"),
        (pack_fields({"png": b"1", "cls": b"2"}), "both packed and a member of its own"),
    ],
)
def test_a_hostile_packed_member_is_an_error_naming_the_shard(
    tmp_path: Path, data: bytes, what: str
) -> None:
    shard = _hostile(tmp_path, data)
    with pytest.raises(ValueError, match=rf"shard '{shard}'.*packed member.*sample 'k0'"):
        _read(shard)
    with pytest.raises(ValueError, match=what):
        _read(shard)


def test_shard_writer_refuses_a_negative_pack_small_and_the_reserved_field_name(
    tmp_path: Path,
) -> None:
    pattern = str(tmp_path / "s-%d.tar")
    with pytest.raises(ValueError, match="pack_small should be a non-negative integer value"):
        ShardWriter(pattern, verbose=0, pack_small=-1)
    with pytest.raises(TypeError, match="pack_small should be an integer value, but got"):
        ShardWriter(pattern, verbose=0, pack_small=1.5)
    sink = ShardWriter(pattern, verbose=0)
    with sink, pytest.raises(ValueError, match=r"should not be .packed_fields\.msgpack."):
        sink.write({"__key__": "k", PACKED_SUFFIX: b"x"})


def test_fields_that_would_not_read_back_by_name_stay_members_of_their_own(
    tmp_path: Path,
) -> None:
    packed = _write(tmp_path, [{"__key__": "k", "CLS": b"1", "a": b"2", "b": b"3"}], pack_small=9)
    with tarfile.open(os.path.join(tmp_path, "s-0.tar")) as tar:
        names = tar.getnames()
        member = tar.extractfile(f"k.{PACKED_SUFFIX}")
        assert member is not None
        data = io.BytesIO(member.read()).getvalue()
    assert names == ["k.CLS", f"k.{PACKED_SUFFIX}"]
    assert data == pack_fields({"a": b"2", "b": b"3"})
    assert _read(packed) == [[("__key__", "k"), ("a", b"2"), ("b", b"3"), ("cls", b"1")]]
