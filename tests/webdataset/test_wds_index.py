"""The shard index: webdataset's grouping, the on-disk cache, and no silent loss."""

from __future__ import annotations

import io
import json
import os
import pickle
import tarfile
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds
from hypothesis import given, settings
from hypothesis import strategies as st
from wds_helpers import COUNTS, ids, make, png_bytes, write_shards

from detsamplers.__main__ import main
from detsamplers.loader._wds.index import _index_shards as _shard_index
from detsamplers.loader._wds.index import _scan_shard as _shard_scan
from detsamplers.loader._wds.index._index_shards import index_shards, scan_shard
from detsamplers.loader._wds.read import _shard_reader
from detsamplers.loader._wds.read._block_reader import ShardReaders
from detsamplers.loader._wds.read._shard_reader import ShardReader
from detsamplers.loader._wds.remote._urls import expand_urls

SHARD_BYTES: dict[str, bytes] = {}


def tricky_shard(path: Path) -> None:
    """A tar with the names webdataset treats specially, written with tarfile directly."""
    names = [
        "__meta__",  # top-level metadata: skipped
        "a.cls",
        "a.PNG",  # suffix lower-cased
        "dir/b.c.seg.png",  # key "dir/b", suffix "c.seg.png"
        "dir/b.cls",
        "README",  # no dot: ignored
        "a.txt",  # the key "a" again, not consecutive: a new sample
        "__dir__/x.cls",  # metadata folder: skipped
    ]
    with tarfile.open(path, "w") as tar:
        for i, name in enumerate(names):
            data = png_bytes(i) if "png" in name.lower() else str(i).encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        folder = tarfile.TarInfo("dir")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)


def test_samples_are_grouped_and_read_exactly_as_webdataset_yields_them(tmp_path: Path) -> None:
    tricky_shard(tmp_path / "t.tar")
    pattern = write_shards(tmp_path / "w", [3, 4])
    for urls in (str(tmp_path / "t.tar"), pattern):
        theirs = list(wds.WebDataset(urls, shardshuffle=False))
        source = make(
            urls, decode=None, map=None, collate_fn=list, repeat=False, shuffle_shards=False
        )
        ours = [sample for batch in source for sample in batch]
        assert ours == theirs
    keys = [s["__key__"] for s in ours]
    assert len(keys) == 7


def test_the_tricky_shard_has_the_keys_webdataset_gives_it(tmp_path: Path) -> None:
    tricky_shard(tmp_path / "t.tar")
    keys, members = scan_shard(str(tmp_path / "t.tar"))
    assert keys == ("a", "dir/b", "a")
    assert [[m[0] for m in sample] for sample in members] == [
        ["cls", "png"],
        ["c.seg.png", "cls"],
        ["txt"],
    ]


def test_an_index_file_is_written_next_to_each_shard_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pattern = write_shards(tmp_path, [3, 4])
    first = index_shards(expand_urls(pattern))
    assert sorted(p.name for p in tmp_path.glob("*.index.npz")) == [
        "data-000000.tar.index.npz",
        "data-000001.tar.index.npz",
    ]

    def fail(path: str) -> None:
        raise AssertionError(f"scanned {path} again")

    monkeypatch.setattr(_shard_index, "scan_shard", fail)
    assert index_shards(expand_urls(pattern)) == first


def test_a_shard_rewritten_since_it_was_indexed_is_scanned_again(tmp_path: Path) -> None:
    pattern = write_shards(tmp_path, [3, 4])
    assert [len(s) for s in index_shards(expand_urls(pattern))] == [3, 4]
    write_shards(tmp_path, [5, 4])
    os.utime(tmp_path / "data-000000.tar", ns=(1, 1))  # a distinct mtime even on coarse clocks
    assert [len(s) for s in index_shards(expand_urls(pattern))] == [5, 4]


def test_an_unwritable_shard_folder_falls_back_to_the_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pattern = write_shards(tmp_path / "shards", [3])
    # A directory where the index file would go makes writing there fail, even as root.
    (tmp_path / "shards" / "data-000000.tar.index.npz").mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    index_shards(expand_urls(pattern))
    cached = list((tmp_path / "cache" / "detsamplers" / "shard-index").glob("*.index.npz"))
    assert len(cached) == 1

    def fail(path: str) -> None:
        raise AssertionError("scanned again")

    monkeypatch.setattr(_shard_index, "scan_shard", fail)
    assert [len(s) for s in index_shards(expand_urls(pattern))] == [3]


def test_index_dir_puts_the_index_files_there_and_not_next_to_the_shards(tmp_path: Path) -> None:
    pattern = write_shards(tmp_path / "shards", [3, 2])
    source = make(pattern, index_dir=str(tmp_path / "idx"))
    assert source.num_samples == 5
    assert len(list((tmp_path / "idx").glob("*.index.npz"))) == 2
    assert not list((tmp_path / "shards").glob("*.index.npz"))


def original(factory: pytest.TempPathFactory) -> tuple[Path, bytes, tuple[str, ...]]:
    """A 20-sample shard's bytes and keys (built once), and a scratch folder."""
    if not SHARD_BYTES:
        folder = factory.mktemp("original")
        write_shards(folder, [COUNTS[1]])
        SHARD_BYTES["data"] = (folder / "data-000000.tar").read_bytes()
        SHARD_BYTES["folder"] = str(folder).encode()
    data = SHARD_BYTES["data"]
    folder = Path(SHARD_BYTES["folder"].decode())
    (folder / "copy.tar").write_bytes(data)
    return folder, data, scan_shard(str(folder / "copy.tar"))[0]


@settings(max_examples=80)
@given(cut=st.integers(min_value=0, max_value=60_000))
def test_a_truncated_shard_is_refused_by_name_or_read_whole_never_shortened(
    tmp_path_factory: pytest.TempPathFactory, cut: int
) -> None:
    folder, data, keys = original(tmp_path_factory)
    shard = folder / "cut.tar"
    shard.write_bytes(data[: min(cut, len(data))])
    try:
        got = scan_shard(str(shard))[0]
    except ValueError as exn:
        assert str(shard) in str(exn)
    else:
        assert got == keys


@settings(max_examples=80)
@given(where=st.floats(min_value=0, max_value=1, exclude_max=True), flip=st.integers(1, 255))
def test_a_shard_with_a_corrupt_byte_is_refused_by_name_or_keeps_its_samples(
    tmp_path_factory: pytest.TempPathFactory, where: float, flip: int
) -> None:
    folder, data, keys = original(tmp_path_factory)
    damaged = bytearray(data)
    damaged[int(where * len(data))] ^= flip
    shard = folder / "flip.tar"
    shard.write_bytes(bytes(damaged))
    try:
        got = scan_shard(str(shard))[0]
    except ValueError as exn:
        assert str(shard) in str(exn)
    else:
        assert got == keys  # a data byte: tar has no data checksum, the structure is intact


def test_a_shard_cut_inside_a_header_is_refused_with_its_name(tmp_path: Path) -> None:
    pattern = write_shards(tmp_path, [4, 5])
    path = tmp_path / "data-000001.tar"
    path.write_bytes(path.read_bytes()[: 3 * 1536 + 100])
    with pytest.raises(ValueError, match=r"shard '.*data-000001\.tar' is truncated or corrupt"):
        make(pattern)


def test_a_corrupt_shard_s_error_points_to_our_shard_writer_which_writes_its_index(
    tmp_path: Path,
) -> None:
    pattern = write_shards(tmp_path, [4])
    path = tmp_path / "data-000000.tar"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(
        ValueError, match=r"with detsamplers.loader.ShardWriter, which also"
    ) as info:
        make(pattern)
    assert "webdataset.ShardWriter" not in str(info.value)


def test_a_shard_without_its_end_of_archive_block_is_refused(tmp_path: Path) -> None:
    pattern = write_shards(tmp_path, [4])
    path = tmp_path / "data-000000.tar"
    path.write_bytes(path.read_bytes()[: 4 * 1536])  # exactly at a member boundary
    with pytest.raises(ValueError, match="without tar's end-of-archive block"):
        make(pattern)


def test_a_compressed_or_piped_shard_is_refused_with_the_fix(tmp_path: Path) -> None:
    expected = r"urls should name uncompressed \.tar files by path or fsspec URL"
    with pytest.raises(ValueError, match=expected + r".*s3://\.\.\. with s3fs"):
        make("pipe:curl -s https://host/data-{000..001}.tar")
    with pytest.raises(ValueError, match=expected + r".*decompress \.tar\.gz shards"):
        make(str(tmp_path / "a.tar.gz"))
    (tmp_path / "a.tar").write_bytes(b"\x1f\x8b" + b"x" * 2000)
    with pytest.raises(ValueError, match=r"shard '.*a\.tar' is compressed; .* decompress it"):
        make(str(tmp_path / "a.tar"))


def test_a_missing_shard_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"shard '.*nope\.tar' .* does not exist"):
        make(str(tmp_path / "nope.tar"))


def test_a_repeated_suffix_within_a_sample_is_refused_as_webdataset_does(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "d.tar", "w") as tar:
        for name in ("a.cls", "a.CLS"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"1"))
    with pytest.raises(ValueError, match=r"duplicate file name 'a\.CLS' in sample 'a'"):
        make(str(tmp_path / "d.tar"))


def test_urls_of_only_empty_shards_are_refused(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "e.tar", "w"):
        pass
    with pytest.raises(ValueError, match="urls should name shards with samples"):
        make(str(tmp_path / "e.tar"))


def test_an_old_json_index_cache_is_converted_once_without_a_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pattern = write_shards(tmp_path, [3, 4])
    first = index_shards(expand_urls(pattern))
    for info in first:  # what detsamplers wrote before .index.npz
        stat = os.stat(info.path)
        entry = {
            "version": 1,
            "path": info.path,
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "keys": list(info.keys),
            "members": list(info.members),
        }
        Path(info.path + ".index.json").write_text(json.dumps(entry))
        os.remove(info.path + ".index.npz")

    def fail(path: str) -> None:
        raise AssertionError(f"scanned {path} again")

    monkeypatch.setattr(_shard_index, "scan_shard", fail)
    assert index_shards(expand_urls(pattern)) == first
    assert len(list(tmp_path.glob("*.index.npz"))) == 2


def test_a_stale_old_json_index_cache_is_ignored_and_rebuilt(tmp_path: Path) -> None:
    pattern = write_shards(tmp_path, [3])
    shard = tmp_path / "data-000000.tar"
    stat = os.stat(shard)
    entry = {"version": 1, "path": str(shard), "size": stat.st_size, "mtime_ns": 1}
    entry |= {"keys": ["x", "y", "z"], "members": [[["cls", 0, 1]]] * 3}
    Path(str(shard) + ".index.json").write_text(json.dumps(entry))
    [info] = index_shards(expand_urls(pattern))
    assert list(info.keys) != ["x", "y", "z"] and len(info) == 3


def test_building_a_source_decodes_only_the_headers_of_its_index_files(tmp_path: Path) -> None:
    pattern = write_shards(tmp_path, [3, 4, 5])
    expected = [
        list(zip(s.keys, s.members, strict=True)) for s in index_shards(expand_urls(pattern))
    ]
    shards = index_shards(expand_urls(pattern))
    lazies = [info.keys.owner for info in shards]  # type: ignore[attr-defined]
    assert [len(s) for s in shards] == [3, 4, 5]
    assert not any(lazy.decoded for lazy in lazies)
    reader = ShardReader(shards)
    reader.read(1, 2)
    reader.close()
    assert [lazy.decoded for lazy in lazies] == [False, True, False]
    revived = pickle.loads(pickle.dumps(shards))  # as sent to DataLoader workers
    assert [list(zip(s.keys, s.members, strict=True)) for s in revived] == expected


def test_reading_an_index_file_allocates_its_size_not_the_bound(tmp_path: Path) -> None:
    pattern = write_shards(tmp_path, [3])
    shard = expand_urls(pattern)[0]
    index_shards([shard])
    file = shard + _shard_index.INDEX_SUFFIX
    tracemalloc.start()
    try:
        data = _shard_index._read_bounded(file, shard, 1 << 30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert data == Path(file).read_bytes()
    assert peak < 1 << 20  # read(bound + 1) allocated the whole gibibyte first
    assert _shard_index._read_bounded(file, shard, len(data) - 1) is None


def test_the_index_command_writes_files_local_sources_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pattern = write_shards(tmp_path, [3, 4])
    assert main(["index", pattern]) == 0
    assert len(list(tmp_path.glob("*.index.npz"))) == 2

    def fail(path: str) -> None:
        raise AssertionError(f"scanned {path}")

    monkeypatch.setattr(_shard_index, "scan_shard", fail)
    assert [len(s) for s in index_shards(expand_urls(pattern))] == [3, 4]


def listed_by_tarfile(path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    with monkeypatch.context() as patched:
        patched.setattr(_shard_scan, "_read_headers", lambda buffer, size: None)
        return scan_shard(str(path))


@pytest.mark.parametrize("kind", ["webdataset", "tricky", "long-names", "prefix"])
def test_the_header_walk_lists_shards_exactly_as_tarfile_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    path = tmp_path / "s.tar"
    if kind == "webdataset":
        write_shards(tmp_path, [6])
        path = tmp_path / "data-000000.tar"
    elif kind == "tricky":
        tricky_shard(path)
    else:
        fmt = tarfile.PAX_FORMAT if kind == "long-names" else tarfile.USTAR_FORMAT
        with tarfile.open(path, "w", format=fmt) as tar:
            for i in range(4):
                stem = ("d" * 120 + f"/k{i}") if kind == "prefix" else ("é" * 90 + f"k{i}")
                for suffix in ("cls", "txt"):
                    info = tarfile.TarInfo(f"{stem}.{suffix}")
                    info.size = i + 1
                    tar.addfile(info, io.BytesIO(b"x" * (i + 1)))
    with open(path, "rb") as handle:
        data = handle.read()
    walked = _shard_scan._read_headers(data, len(data))
    assert walked is not None  # the header walk handled it, without tarfile
    vectorised = _shard_scan._walk_headers(data, len(data))
    if kind in ("webdataset", "tricky", "prefix"):  # pax path records: header by header
        assert vectorised == walked
    else:
        assert vectorised is None
    assert scan_shard(str(path)) == listed_by_tarfile(path, monkeypatch)


def walks(data: bytes) -> tuple[object, object]:
    return _shard_scan._walk_headers(data, len(data)), _shard_scan._read_headers(data, len(data))


@settings(max_examples=60, deadline=None)
@given(
    members=st.lists(
        st.tuples(
            st.from_regex(r"[a-zA-Z_/.é]{1,12}", fullmatch=True),
            st.binary(max_size=1100),
            st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE]),
        ),
        min_size=1,
        max_size=6,
    ),
    fmt=st.sampled_from([tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT]),
    mtime=st.sampled_from([0, 1_700_000_000, 1_700_000_000.25]),
    flip=st.integers(0, 1 << 16),
)
def test_the_numpy_walk_lists_any_tar_as_the_header_walk_does_or_declines(
    members: list[tuple[str, bytes, bytes]], fmt: int, mtime: float, flip: int
) -> None:
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode="w", format=fmt) as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.type, info.mtime = kind, mtime
            info.size = len(data) if kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    data = stream.getvalue()
    vectorised, walked = walks(data)
    assert vectorised is None or vectorised == walked
    damaged = bytearray(data)  # one flipped byte: a checksum, a size, a name, a magic
    damaged[flip % len(damaged)] ^= 0x41
    vectorised, walked = walks(bytes(damaged))
    assert vectorised is None or vectorised == walked


def test_a_tar_inside_a_shard_does_not_fool_the_numpy_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as tar:
        info = tarfile.TarInfo("x.cls")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"1"))
    path = tmp_path / "s.tar"
    with tarfile.open(path, "w") as tar:
        for key, payload in (("a", inner.getvalue()), ("b", b"2")):
            info = tarfile.TarInfo(f"{key}.tar")  # member data holding ustar headers
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    data = path.read_bytes()
    assert _shard_scan._walk_headers(data, len(data)) is None  # the guess fails its check
    assert scan_shard(str(path)) == listed_by_tarfile(path, monkeypatch)
    assert scan_shard(str(path))[0] == ("a", "b")


@settings(max_examples=40, deadline=None)
@given(
    requests=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40)), min_size=1, max_size=30),
    gap=st.sampled_from([0, 600, 1 << 16]),
    run=st.sampled_from([1, 3000, 8 << 20]),
)
def test_reading_many_samples_gives_what_reading_each_gives(
    tmp_path_factory: pytest.TempPathFactory,
    requests: list[tuple[int, int]],
    gap: int,
    run: int,
) -> None:
    if "many" not in SHARD_BYTES:
        folder = tmp_path_factory.mktemp("many")
        SHARD_BYTES["many"] = write_shards(folder, [5, 41, 17]).encode()
    shards = index_shards(expand_urls(SHARD_BYTES["many"].decode()))
    requests = [(s, i % len(shards[s])) for s, i in requests]
    one, many = ShardReader(shards), ShardReader(shards)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(_shard_reader, "RUN_GAP", gap)
        patched.setattr(_shard_reader, "RUN_BYTES", run)
        got = many.read_many([s for s, _ in requests], [i for _, i in requests])
        pooled = ShardReaders(shards, capacity=2)  # the block shuffle's readers
        from_pool = pooled.read_many([s for s, _ in requests], [i for _, i in requests])
    assert got == from_pool == [one.read(s, i) for s, i in requests]
    one.close()
    many.close()
    pooled.close()


def test_reading_many_samples_refuses_an_index_out_of_range(tmp_path: Path) -> None:
    shards = index_shards(expand_urls(write_shards(tmp_path, [3])))
    with pytest.raises(IndexError, match="sample 3 of 3"):
        ShardReader(shards).read_many([0], [3])


class _Trickle:
    """A file whose reads return at most 5 bytes, as a raw read may."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def seek(self, offset: int) -> int:
        return int(self.handle.seek(offset))

    def read(self, size: int) -> bytes:
        return bytes(self.handle.read(min(size, 5)))

    def close(self) -> None:
        self.handle.close()


def test_a_local_read_that_returns_less_is_completed(tmp_path: Path) -> None:
    shards = index_shards(expand_urls(write_shards(tmp_path, [4])))
    whole = ShardReader(shards)
    expected = [whole.read(0, i) for i in range(4)]
    trickle = ShardReader(shards)
    trickle.read(0, 0)  # opens the shard
    assert trickle.handle is not None
    trickle.handle = _Trickle(trickle.handle)  # type: ignore[assignment]
    assert [trickle.read(0, i) for i in range(4)] == expected
    assert trickle.read_many([0, 0], [3, 1]) == [expected[3], expected[1]]
    whole.close()
    trickle.close()


def test_pathlib_paths_are_accepted_wherever_a_local_shard_path_or_folder_is(
    tmp_path: Path,
) -> None:
    pattern = write_shards(tmp_path / "shards", [4, 5, 3])
    paths = sorted((tmp_path / "shards").glob("data-*.tar"))
    as_text = make(pattern, shuffle_shards=True, index_dir=str(tmp_path / "i1"), repeat=False)
    expected = [ids(b) for b in as_text]
    for urls in (Path(pattern), paths, [str(paths[0]), *paths[1:]]):
        source = make(urls, shuffle_shards=True, index_dir=tmp_path / "i2", repeat=False)  # type: ignore[arg-type]
        assert [ids(b) for b in source] == expected
        assert source.state_dict() == as_text.state_dict()
    assert sorted(os.listdir(tmp_path / "i2")) == sorted(os.listdir(tmp_path / "i1"))
    with pytest.raises(TypeError, match=r"index_dir should be a str, an os.PathLike or None, but"):
        make(pattern, index_dir=b"/tmp")
    with pytest.raises(TypeError, match=r"urls should be a string .*, an os.PathLike or a seq"):
        make([paths[0], 3])  # type: ignore[list-item]


def _claiming(folder: Path, kind: str, claim: int) -> Path:
    """A 3-sample shard whose first header's size field claims ``claim`` bytes."""
    buffer = io.BytesIO()
    form = tarfile.GNU_FORMAT if kind == "gnu" else tarfile.PAX_FORMAT
    with tarfile.open(fileobj=buffer, mode="w", format=form) as tar:
        for i in range(3):
            long = "x" * 120 if kind in ("pax", "gnu") else ""  # a pax or GNU record first
            info = tarfile.TarInfo(f"k{i}{long}.cls")
            info.size = 1
            tar.addfile(info, io.BytesIO(b"%d" % i))
    data = bytearray(buffer.getvalue())
    data[124:136] = b"%011o\0" % claim
    data[148:156] = b" " * 8
    data[148:156] = b"%06o\0 " % sum(data[:512])
    path = folder / f"{kind}-{claim}.tar"
    path.write_bytes(bytes(data))
    return path


@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from(["pax", "gnu", "plain"]), claim=st.integers(1 << 20, 8**11 - 1))
def test_a_header_claiming_more_than_the_shard_holds_is_refused_allocating_nothing_of_it(
    tmp_path_factory: pytest.TempPathFactory, kind: str, claim: int
) -> None:
    path = _claiming(tmp_path_factory.mktemp("claims"), kind, claim)
    said = {
        "pax": rf"the pax header at byte 0 \(member '\./\./@PaxHeader'\) claims {claim} bytes",
        "gnu": rf"the GNU long-name header at byte 0 \(member '\./\./@LongLink'\) claims {claim}",
        "plain": r"member 'k0\.cls' runs past the end of the file",
    }[kind]
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=rf"^shard '{path}' is truncated or corrupt: {said}"):
            scan_shard(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20 <= claim  # the claim was never allocated (7 GiB before the fix)
