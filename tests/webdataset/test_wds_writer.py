"""ShardWriter: webdataset's tars, byte for byte, with the index our scan would build."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wds_helpers import make, png_bytes

from detsamplers.loader import ShardWriter
from detsamplers.loader._wds.index import _index_shards as _shard_index
from detsamplers.loader._wds.index import _scan_shard as _shard_scan
from detsamplers.loader._wds.index._index_shards import scan_shard
from detsamplers.loader._wds.index._shard_index_file import decode_index, read_header


def samples(count: int) -> list[dict[str, Any]]:
    return [
        {"__key__": f"k{i:04d}", "png": png_bytes(i), "cls": i, "txt": "x" * (i % 700)}
        for i in range(count)
    ]


def write(writer: Any, pattern: str, items: list[dict[str, Any]], **kw: Any) -> None:
    with writer(pattern, verbose=0, mtime=1_700_000_000.5, **kw) as sink:
        for sample in items:
            sink.write(dict(sample))


def written_index(shard: Path) -> tuple[Any, ...]:
    data = (shard.parent / (shard.name + ".index.npz")).read_bytes()
    header, count = read_header(data, str(shard))
    keys, members, size, etag = decode_index(data, str(shard))
    stat = shard.stat()
    assert (header["size"], header["mtime_ns"], count) == (
        stat.st_size,
        stat.st_mtime_ns,
        len(keys),
    )
    return keys, list(members), size, etag


@pytest.mark.parametrize("tar_format", [None, "PAX_FORMAT", "GNU_FORMAT"])
def test_the_shards_are_webdatasets_bytes_and_the_index_is_the_scans(
    tmp_path: Path, tar_format: str | None
) -> None:
    items = samples(23)
    items[4] = {"__key__": "dir/" + "long" * 30, "cls": 4, "Seg.PNG": b"\x01"}  # prefix, case
    items[5] = {"__key__": "naïve", "cls": 5, "empty": b""}  # non-ASCII, an empty member
    extra = {} if tar_format is None else {"format": tar_format}
    if tar_format == "GNU_FORMAT":
        items[4]["__key__"] = "x" * 300  # a GNU long name
    write(wds.ShardWriter, str(tmp_path / "theirs-%02d.tar"), items, maxcount=10, **extra)
    write(ShardWriter, str(tmp_path / "ours-%02d.tar"), items, maxcount=10, **extra)
    for shard in range(3):
        theirs = tmp_path / f"theirs-{shard:02d}.tar"
        ours = tmp_path / f"ours-{shard:02d}.tar"
        assert ours.read_bytes() == theirs.read_bytes()
        assert not (tmp_path / f"theirs-{shard:02d}.tar.index.npz").exists()
        keys, members, size, etag = written_index(ours)
        assert (keys, members) == scan_shard(str(ours))
        assert (size, etag) == (ours.stat().st_size, None)
    assert sorted(p.name for p in tmp_path.glob("ours-*")) == [
        f"ours-{s:02d}.tar{x}" for s in range(3) for x in ("", ".index.npz")
    ]


names = st.text(st.characters(codec="utf-8", exclude_characters="\0/."), min_size=1, max_size=8)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keys=st.lists(st.tuples(names, st.booleans()), min_size=0, max_size=12),
    suffixes=st.lists(  # webdataset's metadata entries start with _: not members
        names.filter(lambda s: not s.startswith("_")), min_size=1, max_size=3, unique_by=str.lower
    ),
    sizes=st.lists(st.integers(0, 1100), min_size=1, max_size=3),
    maxsize=st.sampled_from([1, 2000, 3e9]),
)
def test_any_samples_get_the_index_a_scan_of_the_shard_gives(
    tmp_path_factory: pytest.TempPathFactory,
    keys: list[tuple[str, bool]],
    suffixes: list[str],
    sizes: list[int],
    maxsize: float,
) -> None:
    folder = tmp_path_factory.mktemp("w")
    items = []
    for i, (key, nested) in enumerate(keys):
        sample: dict[str, Any] = {"__key__": f"{i}/{key}" if nested else f"{key}{i}"}
        for j, suffix in enumerate(suffixes):
            sample[suffix] = bytes(sizes[j % len(sizes)])
        items.append(sample)
    write(ShardWriter, str(folder / "d-%03d.tar"), items, maxcount=5, maxsize=maxsize)
    shards = sorted(folder.glob("d-*.tar"))
    assert shards
    for shard in shards:
        keys_found, members, _, _ = written_index(shard)
        assert (keys_found, members) == scan_shard(str(shard))


def test_a_source_opens_written_shards_without_a_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = [{"__key__": f"s{i:03d}", "png": png_bytes(i), "cls": i} for i in range(37)]
    posted: list[str] = []
    pattern = str(tmp_path / "data-%06d.tar")
    with ShardWriter(pattern, maxcount=10, verbose=0, post=posted.append) as sink:
        for sample in items:
            sink.write(sample)
    assert [Path(p).name for p in posted] == [f"data-{s:06d}.tar" for s in range(4)]

    def fail(*args: object) -> None:
        raise AssertionError(f"scanned {args[0]}")

    monkeypatch.setattr(_shard_index, "scan_shard", fail)
    monkeypatch.setattr(_shard_scan, "_walk_headers", fail)
    monkeypatch.setattr(_shard_scan, "_tarfile_members", fail)
    urls = str(tmp_path / "data-{000000..000003}.tar")
    source = make(
        urls,
        batch_size=4,
        repeat=False,
        shuffle_shards=False,
        decode=None,
        map=None,
        collate_fn=list,
    )
    ours = [sample for batch in source for sample in batch]
    assert ours == list(wds.WebDataset(urls, shardshuffle=False))
    assert len(ours) == 37


def test_the_post_callback_runs_after_the_index_file_is_written(tmp_path: Path) -> None:
    seen: list[bool] = []
    pattern = str(tmp_path / "d-%d.tar")
    with ShardWriter(
        pattern, verbose=0, post=lambda f: seen.append(Path(f + ".index.npz").exists())
    ) as sink:
        sink.write({"__key__": "a", "cls": 1})
    assert seen == [True]


def test_a_key_or_field_with_a_nul_byte_is_refused_not_dropped(tmp_path: Path) -> None:
    # A tar member's name ends at its first NUL: "a\0b.cls" would read back as "a", a name
    # with no field, which every reader (webdataset's too) drops without a word.
    with ShardWriter(str(tmp_path / "d-%d.tar"), verbose=0) as sink:
        with pytest.raises(ValueError, match=r"should not hold a NUL byte, but got 'a\\x00b'"):
            sink.write({"__key__": "a\0b", "cls": 1})
        with pytest.raises(ValueError, match=r"should not hold '/' or a NUL byte, .* 'c\\x00x'"):
            sink.write({"__key__": "k", "c\0x": 1})
        sink.write({"__key__": "c", "cls": 2})
    shard = tmp_path / "d-0.tar"
    keys, members, _, _ = written_index(shard)
    assert (keys, members) == scan_shard(str(shard))
    assert keys == ("c",)  # the refused samples left nothing behind


def test_an_empty_writer_leaves_an_empty_shard_with_its_index(tmp_path: Path) -> None:
    write(ShardWriter, str(tmp_path / "d-%d.tar"), [])
    keys, members, _, _ = written_index(tmp_path / "d-0.tar")
    assert (keys, members) == scan_shard(str(tmp_path / "d-0.tar")) == ((), [])


def test_bad_arguments_are_refused_with_the_fix(tmp_path: Path) -> None:
    local = str(tmp_path / "d-%d.tar")
    with pytest.raises(ValueError, match=r"local shards only \(got pattern='s3://b/d-%d.tar'\)"):
        ShardWriter("s3://b/d-%d.tar")
    with pytest.raises(
        ValueError, match=r"local shards only \(got pattern='pipe:cat > d-%d.tar'\)"
    ):
        ShardWriter("pipe:cat > d-%d.tar")
    with pytest.raises(ValueError, match=r"uncompressed tars \(got pattern=.*, compress=True\)"):
        ShardWriter(local, compress=True)
    with pytest.raises(ValueError, match=r"uncompressed tars \(got pattern=.*d-%d.tar.gz'"):
        ShardWriter(local + ".gz")
    with pytest.raises(TypeError, match="does not take opener"):
        ShardWriter(local, opener=open)
    with pytest.raises(TypeError, match=r"pattern should be a str or os.PathLike .* type int"):
        ShardWriter(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="post must be a callable or None, not 3"):
        ShardWriter(local, post=3)
    assert list(tmp_path.iterdir()) == []
    with (
        ShardWriter(local, verbose=0) as sink,
        pytest.raises(ValueError, match="must contain a __key__"),
    ):
        sink.write({"cls": 1})  # webdataset's own error


def test_a_pathlib_pattern_writes_the_shards_a_string_pattern_writes(tmp_path: Path) -> None:
    for folder, pattern in (
        ("s", str(tmp_path / "s" / "d-%d.tar")),
        ("p", tmp_path / "p" / "d-%d.tar"),
    ):
        (tmp_path / folder).mkdir()
        with ShardWriter(pattern, maxcount=2, verbose=0) as sink:
            for i in range(3):
                sink.write({"__key__": f"k{i}", "cls": i})
    names = ["d-0.tar", "d-0.tar.index.npz", "d-1.tar", "d-1.tar.index.npz"]
    assert sorted(os.listdir(tmp_path / "p")) == sorted(os.listdir(tmp_path / "s")) == names
    for shard in ("d-0.tar", "d-1.tar"):
        written = decode_index((tmp_path / "p" / (shard + ".index.npz")).read_bytes(), shard)
        assert written[:2] == scan_shard(str(tmp_path / "s" / shard))


def test_a_key_repeated_back_to_back_is_refused_as_the_scan_would(tmp_path: Path) -> None:
    sink = ShardWriter(str(tmp_path / "d-%d.tar"), verbose=0)
    sink.write({"__key__": "a", "cls": 1})
    sink.write({"__key__": "a", "cls": 2})  # webdataset merges these into one sample on reading
    with pytest.raises(ValueError, match=r"duplicate file name 'a.cls' in sample 'a'"):
        sink.close()
    with pytest.raises(ValueError, match=r"duplicate file name 'a.cls' in sample 'a'"):
        scan_shard(str(tmp_path / "d-0.tar"))
    assert not (tmp_path / "d-0.tar.index.npz").exists()
