"""Shards on S3 (moto's server on 127.0.0.1): pinned versions, retries, index.

The server is the ``s3`` fixture (s3_server.py): moto behind a proxy that counts what it
sends and injects dropped connections, 503 ``SlowDown`` answers and stalls. Every test runs
twice, once for each client that reads (NOTE [ S3 reads through obstore ]): obstore, which
the server's options as given select, and s3fs, which a botocore setting obstore has no
counterpart for selects (``max_pool_connections`` at botocore's default).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server
from wds_helpers import COUNTS, PATTERN, TOTAL, make, simulate

from detsamplers.__main__ import main
from detsamplers.loader import WebDataLoader, WebDatasetSource
from detsamplers.loader._wds.remote._obstore_s3 import store_for
from detsamplers.loader._wds.remote._remote_reads import RemoteOptions, ShardChangedError, remote_fs

_buckets = itertools.count()


@pytest.fixture(autouse=True, params=["obstore", "s3fs"])
def client(request: pytest.FixtureRequest, s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """The client the test's reads go through (see the module's docstring)."""
    if request.param == "s3fs":
        options = {**s3.options, "config_kwargs": {"max_pool_connections": 10}}
        monkeypatch.setattr(s3, "options", options)
    fs, _ = remote_fs("s3://b/k", RemoteOptions(storage_options=s3.options))
    assert (store_for(fs, "s3://b/k") is None) == (request.param == "s3fs")
    return str(request.param)


def upload(s3: S3Server, shards: str, *, versioned: bool = False) -> str:
    """A new bucket holding a copy of the session's shards under ``s/``; its URL pattern."""
    bucket = f"shards-{next(_buckets)}"
    s3.create_bucket(bucket, versioned=versioned)
    for i in range(len(COUNTS)):
        name = f"data-{i:06d}.tar"
        s3.put(bucket, f"s/{name}", (Path(shards).parent / name).read_bytes())
    return f"s3://{bucket}/s/{PATTERN}"


def on_s3(s3: S3Server, url: str, tmp_path: Path, **kwargs: Any) -> WebDatasetSource:
    return make(url, index_dir=str(tmp_path / "cache"), storage_options=s3.options, **kwargs)


def tampered(data: bytes) -> bytes:
    """The same shard with one byte of the last member's data changed (same size)."""
    at = len(data) - 1024 - 512 - 3  # inside the last member, before the tar's end blocks
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def test_every_sample_on_s3_is_read_once_per_epoch_in_the_order_of_the_local_run(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    source = on_s3(s3, upload(s3, shards), tmp_path, batch_size=3)
    assert simulate(source, 0, 2 * TOTAL // 3) == simulate(
        make(shards, batch_size=3), 0, 2 * TOTAL // 3
    )


def test_a_shard_rewritten_on_s3_mid_run_with_the_same_size_is_refused_by_name(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    url = upload(s3, shards)
    bucket = url.split("/")[2]
    source = on_s3(s3, url, tmp_path, batch_size=1, shuffle_shards=False, read_ahead=2048)
    batches = iter(source)
    for _ in range(COUNTS[0] + 2):  # into shard 1, whose later samples are not fetched yet
        next(batches)
    original = (Path(shards).parent / "data-000001.tar").read_bytes()
    s3.put(bucket, "s/data-000001.tar", tampered(original))
    with pytest.raises(
        ShardChangedError, match=rf"shard 's3://{bucket}/s/data-000001\.tar' changed"
    ):
        for _ in range(COUNTS[1]):
            next(batches)
    assert ("GET", "s/data-000001.tar", 412) in s3.served.statuses


def test_a_shard_rewritten_in_a_versioned_bucket_is_still_read_at_the_version_indexed(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    url = upload(s3, shards, versioned=True)
    bucket = url.split("/")[2]
    source = on_s3(s3, url, tmp_path, batch_size=1, shuffle_shards=False, read_ahead=2048)
    assert "?versionId=" in str(source.shards[1].version)
    local = simulate(make(shards, batch_size=1, shuffle_shards=False), 0, TOTAL)
    batches = iter(source)
    got = [[int(x) for x in next(batches)] for _ in range(COUNTS[0] + 2)]
    original = (Path(shards).parent / "data-000001.tar").read_bytes()
    s3.put(bucket, "s/data-000001.tar", tampered(original))
    got += [[int(x) for x in next(batches)] for _ in range(TOTAL - len(got))]
    assert got == local


def test_dropped_connections_503s_and_a_stall_on_s3_are_survived_losing_nothing(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    source = on_s3(s3, upload(s3, shards), tmp_path, batch_size=5, retries=3, timeout=1.0)
    s3.reset()
    s3.drop["s/data-000001.tar"] = 1  # 20 samples: cut halfway, resumed at the first byte missing
    s3.fail_503["s/data-000005.tar"] = 2
    s3.stall["s/data-000003.tar"] = 1
    steps = 2 * TOTAL // 5
    assert simulate(source, 0, steps) == simulate(make(shards, batch_size=5), 0, steps)
    first, resumed, *_ = s3.served.ranges["s/data-000001.tar"]
    start, stop = (int(x) for x in first.removeprefix("bytes=").split("-"))
    again, stop_again = (int(x) for x in resumed.removeprefix("bytes=").split("-"))
    assert start < again <= start + (stop - start + 1) // 2 and stop_again == stop
    assert [s for s in s3.served.statuses if s[1] == "s/data-000005.tar"].count(
        ("GET", "s/data-000005.tar", 503)
    ) == 2
    assert len(s3.served.ranges["s/data-000003.tar"]) >= 2  # stalled once, then read


def test_an_endpoint_that_refuses_connections_is_retried_then_named(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    url = upload(s3, shards)
    source = on_s3(s3, url, tmp_path, batch_size=1, shuffle_shards=False, retries=2)
    import socket

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    options = {**s3.options, "client_kwargs": {**s3.options["client_kwargs"]}}
    options["client_kwargs"]["endpoint_url"] = f"http://127.0.0.1:{port}"
    unreachable = source.for_rank(world_size=1, rank=0)
    unreachable.remote = type(source.remote)(0.5, 2, source.remote.read_ahead, options)
    with pytest.raises(OSError, match=r"reading shard 's3://.*/s/data-000000\.tar' failed 3 times"):
        next(iter(unreachable))


def test_the_index_command_takes_an_endpoint_and_a_build_then_sends_one_request(
    s3: S3Server, shards: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = upload(s3, shards)
    argv = ["index", url, "--endpoint-url", s3.endpoint]
    argv += ["--storage-option", "key=testing", "--storage-option", "secret=testing"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.count(" samples\n") == len(COUNTS)
    assert f"detsamplers-set.index.npz: the set index of {len(COUNTS)} shards" in printed
    s3.reset()
    source = on_s3(s3, url, tmp_path, batch_size=4)
    assert [len(s) for s in source.shards] == COUNTS
    assert sum(s3.served.requests.values()) == 1  # the set index, for all 7 shards
    assert not (tmp_path / "cache").exists()  # nothing scanned, nothing cached
    steps = TOTAL // 4
    assert simulate(source, 0, steps) == simulate(make(shards, batch_size=4), 0, steps)
    index_files = [k for k in s3.served.requests if k.endswith(".tar.index.npz")]
    assert index_files == []  # embedded in the set index: a read asks for shards only
    shard_gets = [k for k in s3.served.requests if k.endswith(".tar")]
    assert sum(s3.served.requests.values()) == 1 + sum(s3.served.requests[k] for k in shard_gets)


def _set_file(s3: S3Server, url: str) -> tuple[str, bytes]:
    """The set index the index command wrote for ``url``'s folder: its key and bytes."""
    bucket = url.split("/")[2]
    key = "s/detsamplers-set.index.npz"
    return key, s3.client().get_object(Bucket=bucket, Key=key)["Body"].read()


def _version_1_set(entries: list[tuple[str, int, str | None, int]]) -> bytes:
    """A set index as version 1 of the format wrote it (no embedded index files)."""
    import io
    import json

    import numpy as np

    def joined(strings: list[str]) -> np.ndarray:
        return np.frombuffer("".join(s + "\0" for s in strings).encode(), dtype=np.uint8)

    header = {"format": "detsamplers-set-index", "version": 1, "shards": len(entries)}
    buffer = io.BytesIO()
    np.savez(
        buffer,
        header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
        names=joined([e[0] for e in entries]),
        versions=joined([e[2] or "" for e in entries]),
        sizes=np.array([e[1] for e in entries], dtype=np.int64),
        counts=np.array([e[3] for e in entries], dtype=np.int64),
    )
    return buffer.getvalue()


def test_an_older_set_index_without_embedded_index_files_still_loads(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    from detsamplers.loader._wds.index._set_index_file import decode_set_indexes

    url = upload(s3, shards)
    argv = ["index", url, "--endpoint-url", s3.endpoint, "--storage-option", "key=testing"]
    assert main([*argv, "--storage-option", "secret=testing"]) == 0
    key, data = _set_file(s3, url)
    entries, embedded = decode_set_indexes(data, "s3://b/s/")
    assert embedded is not None and len(embedded) == len(COUNTS)
    old = _version_1_set(entries)
    s3.put(url.split("/")[2], key, old)
    assert decode_set_indexes(old, "s3://b/s/") == (entries, None)
    s3.reset()
    source = on_s3(s3, url, tmp_path, batch_size=4)
    steps = TOTAL // 4
    assert simulate(source, 0, steps) == simulate(make(shards, batch_size=4), 0, steps)
    index_files = [k for k in s3.served.requests if k.endswith(".tar.index.npz")]
    assert len(index_files) == len(COUNTS)  # each fetched once, when its shard was opened


def test_a_set_index_whose_embedded_index_file_lies_is_refused_naming_it(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    from detsamplers.loader._wds.index._set_index_file import decode_set_indexes, encode_set
    from detsamplers.loader._wds.index._shard_index_file import encode_index

    url = upload(s3, shards)
    bucket = url.split("/")[2]
    argv = ["index", url, "--endpoint-url", s3.endpoint, "--storage-option", "key=testing"]
    assert main([*argv, "--storage-option", "secret=testing"]) == 0
    key, data = _set_file(s3, url)
    entries, embedded = decode_set_indexes(data, "s3://b/s/")
    assert embedded is not None
    name, size, version, count = entries[1]
    members = [[["cls", 512 + 1024 * i, 1]] for i in range(count)]
    keys = tuple(f"x{i}" for i in range(count))
    # A well-formed index file of another size: the entry and the file disagree.
    liars = [
        encode_index(keys, members, size + 512, version),
        encode_index(keys, members, size, '"other"'),
    ]
    for liar in liars:
        s3.put(bucket, key, encode_set(entries, [*embedded[:1], liar, *embedded[2:]]))
        s3.reset()
        source = on_s3(s3, url, tmp_path, batch_size=1, shuffle_shards=False, repeat=False)
        with pytest.raises(
            ValueError,
            match=rf"the set index 's3://{bucket}/s/detsamplers-set\.index\.npz' is wrong "
            rf"about shard '{name}': the index file it embeds records",
        ):
            list(source)
    # An embedded file that describes no tar of its size: the shard-file checks refuse it.
    overlapping = [[["cls", 512, size]] for _ in range(count)]
    s3.put(
        bucket,
        key,
        encode_set(
            entries, [*embedded[:1], encode_index(keys, overlapping, size, version), *embedded[2:]]
        ),
    )
    source = on_s3(s3, url, tmp_path, batch_size=1, shuffle_shards=False, repeat=False)
    with pytest.raises(
        ValueError, match=rf"wrong about shard '{name}': the index file it embeds is refused"
    ):
        list(source)


def test_a_shard_rewritten_after_its_set_index_was_written_is_refused_by_name(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    url = upload(s3, shards)
    bucket = url.split("/")[2]
    assert (
        main(
            [
                "index",
                url,
                "--endpoint-url",
                s3.endpoint,
                "--storage-option",
                "key=testing",
                "--storage-option",
                "secret=testing",
            ]
        )
        == 0
    )
    original = (Path(shards).parent / "data-000002.tar").read_bytes()
    s3.put(bucket, "s/data-000002.tar", tampered(original))
    source = on_s3(s3, url, tmp_path, batch_size=1, shuffle_shards=False, repeat=False)
    with pytest.raises(
        ShardChangedError, match=rf"shard 's3://{bucket}/s/data-000002\.tar' changed"
    ):
        list(source)


def test_the_index_command_refuses_a_storage_option_without_a_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["index", "s3://b/a.tar", "--storage-option", "anon"])
    assert "--storage-option should be KEY=VALUE, but got 'anon'" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_dataloader_workers_read_set_indexed_s3_shards_as_the_main_process_does(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    url = upload(s3, shards)
    argv = ["index", url, "--endpoint-url", s3.endpoint, "--storage-option", "key=testing"]
    assert main([*argv, "--storage-option", "secret=testing"]) == 0
    source = on_s3(s3, url, tmp_path, batch_size=3, shuffle_window=4)
    got = [
        [int(x) for x in batch]
        for _, batch in zip(range(30), WebDataLoader(source, 2), strict=False)
    ]
    assert got == simulate(make(shards, batch_size=3, shuffle_window=4), 0, 30)


def test_a_damaged_set_index_is_refused_naming_the_file(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    url = upload(s3, shards)
    bucket = url.split("/")[2]
    s3.put(bucket, "s/detsamplers-set.index.npz", b"PK\x03\x04 not a zip")
    with pytest.raises(
        ValueError, match=rf"the set index 's3://{bucket}/s/detsamplers-set\.index\.npz' is not"
    ):
        on_s3(s3, url, tmp_path)


def test_a_compressed_set_index_is_refused_before_anything_is_inflated() -> None:
    import io
    import zipfile

    from detsamplers.loader._wds.index._set_index_file import decode_set, encode_set

    buffer = io.BytesIO()
    plain = zipfile.ZipFile(io.BytesIO(encode_set([("a.tar", 10, '"e"', 1)])))
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive, plain:
        for entry in plain.infolist():
            archive.writestr(entry.filename, plain.read(entry))
    with pytest.raises(
        ValueError, match=r"'s3://b/detsamplers-set\.index\.npz' is not .* compressed"
    ):
        decode_set(buffer.getvalue(), "s3://b/")


def test_index_files_that_s3_forbids_as_it_does_missing_keys_are_treated_as_absent(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    url = upload(s3, shards)
    s3.forbidden = {"s/detsamplers-set.index.npz"} | {
        f"s/data-{i:06d}.tar.index.npz" for i in range(len(COUNTS))
    }
    source = on_s3(s3, url, tmp_path, batch_size=4)  # scans the shards instead
    assert [len(s) for s in source.shards] == COUNTS
    assert ("GET", "s/detsamplers-set.index.npz", 403) in s3.served.statuses


def test_a_folder_without_a_set_index_is_asked_once_until_this_process_writes_one(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    url = upload(s3, shards)
    on_s3(s3, url, tmp_path, batch_size=4)
    assert s3.served.requests["s/detsamplers-set.index.npz"] == 1
    on_s3(s3, url, tmp_path, batch_size=4)  # a resume, a validation source: not asked again
    assert s3.served.requests["s/detsamplers-set.index.npz"] == 1
    argv = ["index", url, "--endpoint-url", s3.endpoint, "--storage-option", "key=testing"]
    assert main([*argv, "--storage-option", "secret=testing"]) == 0
    s3.reset()
    source = on_s3(s3, url, tmp_path, batch_size=4)  # the set index written here is read
    assert sum(s3.served.requests.values()) == 1
    assert [len(s) for s in source.shards] == COUNTS


def test_a_set_index_embeds_the_index_files_only_within_its_byte_limit() -> None:
    from detsamplers.loader._wds.index import _set_index_file
    from detsamplers.loader._wds.index._set_index_file import decode_set_indexes, encode_set

    entries = [("a.tar", 3072, '"e"', 2), ("b.tar", 1024, None, 1)]
    files = [b"x" * 600, b"y" * 400]
    assert decode_set_indexes(encode_set(entries, files), "s3://b/") == (entries, files)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_set_index_file, "EMBED_LIMIT", 999)
        assert decode_set_indexes(encode_set(entries, files), "s3://b/") == (entries, None)
        mp.setattr(_set_index_file, "EMBED_LIMIT", 1000)
        assert decode_set_indexes(encode_set(entries, files), "s3://b/") == (entries, files)
    with pytest.raises(ValueError, match="1 index files for 2 shards"):
        encode_set(entries, files[:1])


def _twin_shards(s3: S3Server, folder: Path) -> str:
    """Two shards of the same size on a new bucket, keys ``a0..a3`` and ``b0..b3``; the URLs."""
    import webdataset as wds

    bucket = f"twins-{next(_buckets)}"
    s3.create_bucket(bucket)
    folder.mkdir(parents=True, exist_ok=True)
    for shard, prefix in enumerate("ab"):
        path = folder / f"t-{shard}.tar"
        with wds.TarWriter(str(path)) as sink:
            for i in range(4):
                sink.write({"__key__": f"{prefix}{i}", "cls": f"{shard}{i}"})  # 2 bytes each
        s3.put(bucket, f"s/t-{shard}.tar", path.read_bytes())
    return f"s3://{bucket}/s/t-{{0..1}}.tar"


@pytest.mark.parametrize("cached", [False, True], ids=["ranges", "cache"])
def test_a_set_index_embedding_a_same_size_shards_index_is_refused_at_its_first_sample(
    s3: S3Server, tmp_path: Path, cached: bool
) -> None:
    from detsamplers.loader._wds.index._set_index_file import decode_set_indexes, encode_set
    from detsamplers.loader._wds.index._shard_index_file import decode_index, encode_index

    url = _twin_shards(s3, tmp_path / "twins")
    bucket = url.split("/")[2]
    argv = ["index", url, "--endpoint-url", s3.endpoint, "--storage-option", "key=testing"]
    assert main([*argv, "--storage-option", "secret=testing"]) == 0
    key, data = _set_file(s3, url)
    entries, embedded = decode_set_indexes(data, f"s3://{bucket}/s/")
    assert embedded is not None and entries[0][1] == entries[1][1]  # the same size
    options: dict[str, Any] = {"batch_size": 2, "shuffle_shards": False, "repeat": False}
    if cached:
        options |= {"parts": 2, "cache_dir": str(tmp_path / "shard-cache")}
    s3.reset()
    honest = sorted(int(x) for batch in on_s3(s3, url, tmp_path, **options) for x in batch)
    assert honest == [0, 1, 2, 3, 10, 11, 12, 13]
    # The honest set: one request for it, one ranged or whole read per shard, none more.
    assert sorted(s3.served.requests.items()) == [
        ("s/detsamplers-set.index.npz", 1), ("s/t-0.tar", 1), ("s/t-1.tar", 1)
    ]  # fmt: skip
    # Shard 1's index as shard 0's, its version dropped (as an index written before upload).
    keys, members, size, _ = decode_index(embedded[1], "t-1.tar")
    forged = encode_index(keys, [list(map(list, m)) for m in members], size, None)
    s3.put(bucket, key, encode_set(entries, [forged, embedded[1]]))
    source = on_s3(s3, url, tmp_path, **options)
    delivered = []
    with pytest.raises(
        ValueError,
        match=rf"^shard 's3://{bucket}/s/t-0\.tar' does not hold sample 'b0' \(member 'cls', "
        rf"2 bytes at byte \d+\) where its index says: the tar header there names 'a0\.cls', "
        rf"not member 'cls' of sample 'b0'; the index the set index 's3://{bucket}/s/"
        r"detsamplers-set\.index\.npz' embeds for it is another shard's",
    ):
        delivered.extend(source)
    assert delivered == []  # no sample of shard 0 under shard 1's keys
