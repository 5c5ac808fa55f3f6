"""Shards on GCS (gcp-storage-emulator on 127.0.0.1, read with gcsfs): generations, retries, index.

The server is the ``gcs`` fixture (gcs_server.py): the emulator behind a proxy that
counts what it sends, answers for generations as GCS does, and injects dropped
connections, 503 answers and stalls.
"""

from __future__ import annotations

import itertools
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from gcs_server import GCSServer
from wds_helpers import COUNTS, PATTERN, TOTAL, make, member_bytes, simulate

from detsamplers.__main__ import main
from detsamplers.loader import WebDataLoader, WebDatasetSource
from detsamplers.loader._wds.remote._remote_reads import RemoteOptions, ShardChangedError, remote_fs

_buckets = itertools.count()


def upload(gcs: GCSServer, shards: str) -> str:
    """A new bucket holding a copy of the session's shards under ``s/``; its URL pattern."""
    bucket = f"gshards-{next(_buckets)}"
    gcs.create_bucket(bucket)
    for i in range(len(COUNTS)):
        name = f"data-{i:06d}.tar"
        gcs.put(bucket, f"s/{name}", (Path(shards).parent / name).read_bytes())
    return f"gs://{bucket}/s/{PATTERN}"


def index(gcs: GCSServer, url: str) -> None:
    """``python -m detsamplers index`` of ``url``, with the emulator's endpoint."""
    argv = ["index", url, "--endpoint-url", gcs.endpoint, "--storage-option", "token=anon"]
    assert main(argv) == 0


def on_gcs(gcs: GCSServer, url: str, tmp_path: Path, **kwargs: Any) -> WebDatasetSource:
    return make(url, index_dir=str(tmp_path / "cache"), storage_options=gcs.options, **kwargs)


def tampered(data: bytes) -> bytes:
    """The same shard with one byte of the last member's data changed (same size)."""
    at = len(data) - 1024 - 512 - 3  # inside the last member, before the tar's end blocks
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def one_epoch(gcs: GCSServer, url: str, tmp_path: Path, world: int, **kwargs: Any) -> list[int]:
    """Every rank's samples of one epoch (``repeat=False``), ranks built in this process."""
    labels: list[int] = []
    for rank in range(world):
        source = on_gcs(gcs, url, tmp_path, world_size=world, rank=rank, repeat=False, **kwargs)
        labels.extend(int(x) for batch in source for x in batch)
    return labels


def shard_gets(gcs: GCSServer) -> int:
    """Media downloads of shards (not of index files)."""
    return sum(len(r) for k, r in gcs.served.ranges.items() if k.endswith(".tar"))


def test_the_index_command_on_gcs_takes_an_endpoint_and_a_build_then_sends_one_request(
    gcs: GCSServer, shards: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = upload(gcs, shards)
    bucket = url.split("/")[2]
    index(gcs, url)
    printed = capsys.readouterr().out
    assert printed.count(" samples\n") == len(COUNTS)
    assert f"detsamplers-set.index.npz: the set index of {len(COUNTS)} shards" in printed
    assert gcs.get(bucket, "s/detsamplers-set.index.npz").startswith(b"PK")
    assert gcs.get(bucket, "s/data-000001.tar.index.npz").startswith(b"PK")
    gcs.reset()
    source = on_gcs(gcs, url, tmp_path, batch_size=4)
    assert [len(s) for s in source.shards] == COUNTS
    assert "?generation=" in str(source.shards[1].version)
    assert sum(gcs.served.requests.values()) == 1  # the set index, for all 7 shards
    assert not (tmp_path / "cache").exists()  # nothing scanned, nothing cached
    for world in (1, 2):
        gcs.reset()
        labels = one_epoch(gcs, url, tmp_path, world, batch_size=4)
        assert sorted(labels) == list(range(TOTAL))  # every sample once
        assert not [k for k in gcs.served.requests if k.endswith(".tar.index.npz")]


def test_an_epoch_on_gcs_with_parts_and_a_cache_downloads_each_shard_once_and_resumes(
    gcs: GCSServer, shards: str, tmp_path: Path
) -> None:
    url = upload(gcs, shards)
    index(gcs, url)
    options: dict[str, Any] = {"batch_size": 2, "parts": 4, "shuffle_block_shards": 2}
    for world in (1, 2):
        gcs.reset()
        cache = tmp_path / f"node-{world}"
        labels = one_epoch(gcs, url, tmp_path, world, cache_dir=str(cache), **options)
        assert sorted(labels) == list(range(TOTAL))
        assert shard_gets(gcs) >= len(COUNTS)  # read from GCS, each generation pinned
        shard_bytes = sum(b for k, b in gcs.served.bytes.items() if k.endswith(".tar"))
        tars = [Path(shards).parent / f"data-{i:06d}.tar" for i in range(7)]
        data = sum(p.stat().st_size for p in tars)
        # Shards read in part are fetched as ranges, without end blocks (NOTE [ node fetches ]).
        assert member_bytes(tars) <= shard_bytes <= 1.05 * data
        gcs.reset()
        assert sorted(one_epoch(gcs, url, tmp_path, world, cache_dir=str(cache), **options)) == (
            list(range(TOTAL))
        )
        assert shard_gets(gcs) == 0  # a warm cache: nothing from GCS
    # A resume mid-stream (past an epoch boundary) continues the uninterrupted batches.
    source = on_gcs(gcs, url, tmp_path, cache_dir=str(tmp_path / "r"), **options)
    batches = iter(source)
    reference = [[int(x) for x in next(batches)] for _ in range(TOTAL)]
    for at in (5, TOTAL // 2 + 3):
        rerun = on_gcs(gcs, url, tmp_path, cache_dir=str(tmp_path / "r"), **options)
        stream = iter(rerun)
        for _ in range(at):
            next(stream)
        state = json.loads(json.dumps(rerun.state_dict()))
        resumed = on_gcs(gcs, url, tmp_path, cache_dir=str(tmp_path / f"s{at}"), **options)
        resumed.load_state_dict(state)
        got = [[int(x) for x in b] for b in itertools.islice(iter(resumed), TOTAL - at)]
        assert got == reference[at:]


@pytest.mark.parametrize("read", ["own request", "cat_file"])
@pytest.mark.parametrize("size", ["same size", "longer"])
def test_a_shard_rewritten_on_gcs_mid_run_is_refused_by_name(
    gcs: GCSServer,
    shards: str,
    tmp_path: Path,
    size: str,
    read: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if read == "cat_file":  # a gcsfs without the internals our own request uses
        from detsamplers.loader._wds.remote import _object_store

        monkeypatch.setattr(_object_store, "_gcs_internals", lambda fs: False)
    url = upload(gcs, shards)
    bucket = url.split("/")[2]
    source = on_gcs(gcs, url, tmp_path, batch_size=1, shuffle_shards=False, read_ahead=2048)
    indexed = str(source.shards[1].version).partition("?generation=")[2]
    batches = iter(source)
    for _ in range(COUNTS[0] + 2):  # into shard 1, whose later samples are not fetched yet
        next(batches)
    original = (Path(shards).parent / "data-000001.tar").read_bytes()
    rewritten = tampered(original) if size == "same size" else original + bytes(1024)
    assert gcs.put(bucket, "s/data-000001.tar", rewritten) != indexed
    with pytest.raises(
        ShardChangedError,
        match=rf"shard 'gs://{bucket}/s/data-000001\.tar' changed since its index was built "
        rf"\(GCS has no generation {indexed} of it now\)",
    ):
        for _ in range(COUNTS[1]):
            next(batches)
    assert ("GET", "s/data-000001.tar", 404) in gcs.served.statuses
    assert indexed in gcs.generations  # every shard read asks for the generation indexed


@pytest.mark.parametrize("size", ["same size", "longer"])
def test_a_server_that_ignores_the_generation_asked_for_is_still_caught_by_what_it_sends(
    gcs: GCSServer, shards: str, tmp_path: Path, size: str
) -> None:
    url = upload(gcs, shards)
    bucket = url.split("/")[2]
    source = on_gcs(gcs, url, tmp_path, batch_size=1, shuffle_shards=False, read_ahead=2048)
    gcs.honour_generation = False  # as the emulator itself: the current bytes, always
    gcs.report_generation = size == "same size"  # naming them in x-goog-generation, or not
    batches = iter(source)
    for _ in range(COUNTS[0] + 2):
        next(batches)
    original = (Path(shards).parent / "data-000001.tar").read_bytes()
    rewritten = tampered(original) if size == "same size" else original + bytes(1024)
    now = gcs.put(bucket, "s/data-000001.tar", rewritten)
    why = f"GCS sent generation {now}, not " if size == "same size" else "it has .* bytes, .* when"
    with pytest.raises(
        ShardChangedError, match=rf"shard 'gs://{bucket}/s/data-000001\.tar' changed .*\({why}"
    ):
        for _ in range(COUNTS[1]):
            next(batches)


def test_the_sources_timeout_and_retries_reach_gcsfs(gcs: GCSServer) -> None:
    options = RemoteOptions(timeout=7.0, retries=2, storage_options=gcs.options)
    fs, path = remote_fs("gs://b/s/a.tar", options)
    assert path == "b/s/a.tar"
    timeout = fs.requests_timeout
    assert (timeout.total, timeout.sock_connect, timeout.sock_read) == (None, 7.0, 7.0)
    assert "_request" in vars(fs)  # one attempt per call: gcsfs's own retries are bypassed
    mine = RemoteOptions(timeout=7.0, storage_options={**gcs.options, "requests_timeout": 3})
    assert remote_fs("gs://b/s/a.tar", mine)[0].requests_timeout == 3  # the user's wins


def test_the_timeout_bounds_each_wait_on_gcs_not_a_whole_slow_but_steady_download(
    gcs: GCSServer, shards: str, tmp_path: Path
) -> None:
    url = upload(gcs, shards)
    index(gcs, url)
    gcs.reset()
    gcs.trickle["s/detsamplers-set.index.npz"] = 1  # 1.2 s in all, never 1 s without bytes
    gcs.trickle["s/data-000001.tar"] = 1
    source = on_gcs(gcs, url, tmp_path, batch_size=4, timeout=1.0, retries=1)
    steps = -(-TOTAL // 4)  # an epoch: shard 1 included
    assert simulate(source, 0, steps) == simulate(make(shards, batch_size=4), 0, steps)
    assert gcs.served.requests["s/detsamplers-set.index.npz"] == 1
    assert len(gcs.served.ranges["s/data-000001.tar"]) == 1  # neither timed out nor retried
    gcs.reset()
    gcs.stall["s/detsamplers-set.index.npz"] = 1  # headers, then nothing: 1 s, then again
    source = on_gcs(gcs, url, tmp_path, batch_size=4, timeout=1.0, retries=1)
    assert [len(s) for s in source.shards] == COUNTS
    assert gcs.served.requests["s/detsamplers-set.index.npz"] == 2


def test_503s_past_the_sources_retries_fail_after_exactly_retries_plus_one_requests(
    gcs: GCSServer, shards: str, tmp_path: Path
) -> None:
    url = upload(gcs, shards)
    index(gcs, url)
    gcs.reset()
    gcs.fail_503["s/detsamplers-set.index.npz"] = 3
    with pytest.raises(OSError, match=r"failed 3 times \(retries=2, timeout=5\.0 s\)"):
        on_gcs(gcs, url, tmp_path, retries=2, timeout=5.0)
    # gcsfs alone would retry each request 6 times (with sleeps of 1, 2, 4... s).
    assert gcs.served.requests["s/detsamplers-set.index.npz"] == 3
    gcs.reset()
    gcs.fail_503["s/detsamplers-set.index.npz"] = 2
    source = on_gcs(gcs, url, tmp_path, retries=2, timeout=5.0)
    assert [len(s) for s in source.shards] == COUNTS
    assert gcs.served.requests["s/detsamplers-set.index.npz"] == 3


def test_the_index_command_retries_an_upload_that_gcs_answers_with_503(
    gcs: GCSServer, shards: str, tmp_path: Path
) -> None:
    url = upload(gcs, shards)
    bucket = url.split("/")[2]
    gcs.fail_503["s/data-000002.tar.index.npz"] = 1
    gcs.fail_503["s/detsamplers-set.index.npz"] = 1
    index(gcs, url)
    assert ("POST", "s/data-000002.tar.index.npz", 503) in gcs.served.statuses
    assert ("POST", "s/data-000002.tar.index.npz", 200) in gcs.served.statuses
    assert gcs.get(bucket, "s/data-000002.tar.index.npz").startswith(b"PK")
    gcs.reset()
    source = on_gcs(gcs, url, tmp_path, batch_size=4)
    assert [len(s) for s in source.shards] == COUNTS
    assert sum(gcs.served.requests.values()) == 1  # the set index was written after all


def test_index_files_that_gcs_forbids_as_it_does_missing_objects_are_treated_as_absent(
    gcs: GCSServer, shards: str, tmp_path: Path
) -> None:
    url = upload(gcs, shards)
    gcs.forbidden = {"s/detsamplers-set.index.npz"} | {
        f"s/data-{i:06d}.tar.index.npz" for i in range(len(COUNTS))
    }
    source = on_gcs(gcs, url, tmp_path, batch_size=4, retries=1)  # scans the shards instead
    assert [len(s) for s in source.shards] == COUNTS
    forbidden = [s for s in gcs.served.statuses if s[2] == 403]
    assert len(forbidden) == 1 + len(COUNTS)  # each asked once: a 403 is not retried


def test_dropped_connections_503s_and_a_stall_on_gcs_are_survived_losing_nothing(
    gcs: GCSServer, shards: str, tmp_path: Path
) -> None:
    url = upload(gcs, shards)
    index(gcs, url)
    source = on_gcs(gcs, url, tmp_path, batch_size=5, retries=3, timeout=1.0)
    gcs.reset()
    gcs.drop["s/data-000001.tar"] = 1  # 20 samples: cut halfway, resumed at the first byte missing
    gcs.fail_503["s/data-000005.tar"] = 2
    gcs.stall["s/data-000003.tar"] = 1
    steps = TOTAL // 5
    assert simulate(source, 0, steps) == simulate(make(shards, batch_size=5), 0, steps)
    first, resumed, *_ = gcs.served.ranges["s/data-000001.tar"]
    start, stop = (int(x) for x in first.removeprefix("bytes=").split("-"))
    again, stop_again = (int(x) for x in resumed.removeprefix("bytes=").split("-"))
    assert start < again <= start + (stop - start + 1) // 2 and stop_again == stop
    assert gcs.served.statuses.count(("GET", "s/data-000005.tar", 503)) == 2
    assert len(gcs.served.ranges["s/data-000003.tar"]) >= 2  # stalled once, then read


def test_a_gcs_endpoint_that_refuses_connections_is_retried_then_named(
    gcs: GCSServer, shards: str, tmp_path: Path
) -> None:
    url = upload(gcs, shards)
    source = on_gcs(gcs, url, tmp_path, batch_size=1, shuffle_shards=False, retries=2)
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    options = {**gcs.options, "endpoint_url": f"http://127.0.0.1:{port}"}
    unreachable = source.for_rank(world_size=1, rank=0)
    unreachable.remote = type(source.remote)(0.5, 2, source.remote.read_ahead, options)
    with pytest.raises(OSError, match=r"reading shard 'gs://.*/s/data-000000\.tar' failed 3 times"):
        next(iter(unreachable))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_dataloader_workers_read_gcs_shards_as_the_main_process_does(
    gcs: GCSServer, shards: str, tmp_path: Path
) -> None:
    url = upload(gcs, shards)
    index(gcs, url)
    source = on_gcs(gcs, url, tmp_path, batch_size=3, shuffle_window=4, timeout=10.0)
    got = [
        [int(x) for x in batch]
        for _, batch in zip(range(30), WebDataLoader(source, 2), strict=False)
    ]
    assert got == simulate(make(shards, batch_size=3, shuffle_window=4), 0, 30)
