"""Shards over HTTP from a real aiohttp server: exact streams, range-read resumes, faults."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import webdataset as wds
from http_server import ShardServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wds_helpers import COUNTS, PATTERN, TOTAL, global_stream, make, simulate

from detsamplers.__main__ import main
from detsamplers.loader import WebDataLoader, WebDatasetSource
from detsamplers.loader._wds.index._shard_index_file import decode_index, encode_index
from detsamplers.loader._wds.remote._remote_reads import _FIRST_BLOCK, ShardChangedError

few_workers = pytest.mark.filterwarnings("ignore:This DataLoader will create")
fixtures = settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def url_of(server: ShardServer, pattern: str = PATTERN, folder: str = "s") -> str:
    return f"{server.url}/{folder}/{pattern}"


def remote(server: ShardServer, tmp_path: Path, **kwargs: Any) -> WebDatasetSource:
    """A source over the served shards, its index cached under ``tmp_path``."""
    return make(url_of(server), index_dir=str(tmp_path / "index-cache"), **kwargs)


def shard_bytes(server: ShardServer) -> dict[str, int]:
    """Bytes of shard data (not index files) the server sent, per shard."""
    return {k: v for k, v in server.served.bytes.items() if k.endswith(".tar")}


def test_samples_over_http_are_exactly_what_webdataset_yields_from_the_same_urls(
    server: ShardServer, tmp_path: Path
) -> None:
    theirs = list(wds.WebDataset(url_of(server), shardshuffle=False))
    source = remote(
        server, tmp_path, decode=None, map=None, collate_fn=list, repeat=False, shuffle_shards=False
    )
    ours = [sample for batch in source for sample in batch]
    assert ours == theirs
    assert len(ours) == TOTAL and "__local_path__" not in ours[0]


@fixtures
@given(
    world_size=st.integers(1, 3),
    num_workers=st.integers(0, 2),
    batch_size=st.integers(1, 4),
    window=st.sampled_from([0, 5]),
)
def test_every_epoch_over_http_reads_each_sample_once_in_the_order_of_the_local_run(
    server: ShardServer,
    shards: str,
    tmp_path: Path,
    world_size: int,
    num_workers: int,
    batch_size: int,
    window: int,
) -> None:
    options = {"batch_size": batch_size, "world_size": world_size, "shuffle_window": window}
    steps = -(-2 * TOTAL // (batch_size * world_size))
    over_http = global_stream(
        [remote(server, tmp_path, rank=r, read_ahead=4096, **options) for r in range(world_size)],
        num_workers,
        steps,
    )
    local = global_stream(
        [make(shards, rank=r, **options) for r in range(world_size)], num_workers, steps
    )
    assert over_http == local
    assert sorted(over_http[:TOTAL]) == list(range(TOTAL))


@few_workers
def test_dataloader_worker_processes_read_over_http_as_the_main_process_does(
    server: ShardServer, shards: str, tmp_path: Path
) -> None:
    source = remote(server, tmp_path, batch_size=3, shuffle_window=4)
    got = [
        [int(x) for x in batch]
        for _, batch in zip(range(40), WebDataLoader(source, 2), strict=False)
    ]
    assert got == simulate(make(shards, batch_size=3, shuffle_window=4), 0, 40)


@pytest.mark.parametrize("batch_size", [1, 4])
def test_resuming_over_http_at_every_position_gives_the_batches_of_the_local_run(
    server: ShardServer, shards: str, tmp_path: Path, batch_size: int
) -> None:
    options: dict[str, Any] = {"batch_size": batch_size, "shuffle_window": 5, "read_ahead": 2048}
    steps = -(-2 * TOTAL // batch_size) + 2
    reference = simulate(make(shards, **options), 0, steps + 3)
    state = make(shards, **options).state_dict()
    for start in range(0, steps, 1 if batch_size > 1 else 3):
        resumed = remote(server, tmp_path, **options)
        resumed.load_state_dict({**state, "position": start * batch_size})
        assert simulate(resumed, 0, 3) == reference[start : start + 3]


@pytest.mark.parametrize("window", [0, 4])
@pytest.mark.parametrize("read_ahead", [1, 1 << 20])
def test_a_resume_downloads_only_bytes_of_the_resumed_sample_or_of_its_window(
    server: ShardServer, tmp_path: Path, read_ahead: int, window: int
) -> None:
    """Without a window, from the resumed sample on; with a window shuffle, the window of the
    resumed sample, whose samples still to come lie anywhere in it (NOTE [ remote windows ])."""
    remote(server, tmp_path)  # build the index cache; only the resume is counted below
    position = 2 * TOTAL + 40  # mid epoch 3, inside a shard
    server.reset()
    options = {"batch_size": 1, "shuffle_window": window, "read_ahead": read_ahead}
    source = remote(server, tmp_path, **options)
    assert shard_bytes(server) == {}  # building from the cached index reads no shard
    source.load_state_dict({**source.state_dict(), "position": position})
    next(iter(source))
    [(shard, index)] = source.locate([position])
    members = source.shards[shard].members
    low = index // window * window if window else index
    high = min(len(members), low + window) - 1 if window else index
    # From the tar header before it: a shard's first sample read is checked (NOTE [ set index ]).
    first, last = members[low][0][1] - 512, members[high][-1][1] + members[high][-1][2]
    name = f"s/data-{shard:06d}.tar"
    assert list(shard_bytes(server)) == [name]
    stop = min(source.shards[shard].size, max(last, first + min(_FIRST_BLOCK, read_ahead)))
    assert server.served.ranges[name] == [(first, stop)]
    if read_ahead == 1:  # the sample's (or the window's) own bytes and its header, no more
        assert shard_bytes(server)[name] == last - first


def test_a_connection_dropped_mid_shard_is_resumed_where_it_stopped_losing_nothing(
    server: ShardServer, shards: str, tmp_path: Path
) -> None:
    source = remote(server, tmp_path, batch_size=5, retries=2, read_ahead=1 << 20)
    server.reset()
    server.drop = {"s/data-000001.tar"}  # 20 samples, read in one block: dropped halfway
    server.fail_503 = {"s/data-000005.tar"}
    got = simulate(source, 0, 2 * TOTAL // 5)
    assert got == simulate(make(shards, batch_size=5), 0, 2 * TOTAL // 5)
    (start, stop), (resumed, stop_again), *_ = server.served.ranges["s/data-000001.tar"]
    sent_before_the_drop = (stop - start) // 2
    assert start < resumed <= start + sent_before_the_drop and stop_again == stop
    assert ("s/data-000005.tar", 503) in server.served.statuses


@pytest.mark.parametrize("window", [0, 4])  # a window is one span (NOTE [ remote windows ])
def test_a_connection_dropped_with_no_retries_left_is_an_error_naming_the_shard(
    server: ShardServer, tmp_path: Path, window: int
) -> None:
    source = remote(server, tmp_path, retries=0, shuffle_shards=False, shuffle_window=window)
    server.reset()
    server.drop = {"s/data-000000.tar"}
    with pytest.raises(OSError, match=r"reading shard 'http://.*/s/data-000000\.tar' failed 1 t"):
        next(iter(source))


def test_shards_on_any_fsspec_filesystem_read_like_local_ones_and_take_index_files(
    shards: str, tmp_path: Path
) -> None:
    fsspec = pytest.importorskip("fsspec")
    memory = fsspec.filesystem("memory")
    folder = Path(shards).parent
    for i in range(len(COUNTS)):
        name = f"data-{i:06d}.tar"
        memory.pipe_file(f"/wds-test/{name}", (folder / name).read_bytes())
    url = "memory://wds-test/" + PATTERN
    options: dict[str, Any] = {"batch_size": 3, "shuffle_window": 4, "read_ahead": 4096}
    scanned = make(url, index_dir=str(tmp_path / "cache"), **options)
    assert simulate(scanned, 0, 60) == simulate(make(shards, **options), 0, 60)
    assert main(["index", url]) == 0  # written next to the shards, through fsspec
    assert memory.exists("/wds-test/data-000006.tar.index.npz")
    indexed = make(url, index_dir=str(tmp_path / "unused"), **options)
    assert not (tmp_path / "unused").exists()
    state = {**scanned.state_dict(), "position": 3 * 50}  # mid epoch 3
    indexed.load_state_dict(state)
    scanned.load_state_dict(state)
    assert simulate(indexed, 0, 5) == simulate(scanned, 0, 5)
    memory.rm("/wds-test", recursive=True)


def test_a_missing_shard_over_http_is_a_file_not_found_error_naming_its_url(
    server: ShardServer, tmp_path: Path
) -> None:
    url = url_of(server, "data-{000005..000007}.tar")
    with pytest.raises(FileNotFoundError, match=r"shard 'http://.*/s/data-000007\.tar' does not"):
        make(url, index_dir=str(tmp_path))


def test_a_shard_changed_since_its_index_file_was_written_is_refused_by_name(
    server: ShardServer, http_root: Path, tmp_path: Path
) -> None:
    folder = http_root / "changing"
    folder.mkdir(exist_ok=True)
    for i in (0, 1, 2):
        data = (http_root / f"s/data-00000{i}.tar").read_bytes()
        (folder / f"data-00000{i}.tar").write_bytes(data)
    url = url_of(server, "data-{000000..000002}.tar", "changing")
    assert main(["index", url, "--out", str(folder)]) == 0  # records each shard's ETag
    server.reset()
    source = make(url, index_dir=str(tmp_path), shuffle_shards=False, batch_size=1)
    assert source.num_samples == sum(COUNTS[:3])
    assert shard_bytes(server) == {}
    os.utime(folder / "data-000001.tar", ns=(10**18, 10**18))  # a new ETag, same bytes
    stream = iter(source)
    assert [int(next(stream)) for _ in range(COUNTS[0])] == list(range(COUNTS[0]))
    with pytest.raises(ShardChangedError, match=r"shard 'http://.*/changing/data-000001\.tar' "):
        next(stream)  # every read sends the recorded ETag: HTTP 412
    # An index file written from the local file records no ETag: the size is checked.
    assert main(["index", str(folder / "data-000002.tar")]) == 0
    with open(folder / "data-000002.tar", "ab") as handle:
        handle.write(bytes(1024))  # two more zero blocks: a valid tar, a different size
    # The folder's set index (written by the first command) still lists the old ETag and
    # size: the build trusts it, and the first read of the shard refuses it by name.
    with pytest.raises(ShardChangedError, match=r"shard 'http://.*/changing/data-000002\.tar' "):
        list(
            make(url, index_dir=str(tmp_path), shuffle_shards=False, batch_size=1).batch_at(
                sum(COUNTS[:2])
            )
        )
    (folder / "detsamplers-set.index.npz").unlink()  # without it, each shard is checked
    with pytest.raises(ShardChangedError, match=r"data-000002\.tar' changed .* index file says"):
        make(url, index_dir=str(tmp_path))


def test_a_shard_rewritten_while_a_run_reads_it_fails_by_name_instead_of_mixing_versions(
    server: ShardServer, http_root: Path, tmp_path: Path
) -> None:
    folder = http_root / "rewritten"
    folder.mkdir(exist_ok=True)
    (folder / "data-000000.tar").write_bytes((http_root / "s/data-000000.tar").read_bytes())
    source = make(url_of(server, "data-000000.tar", "rewritten"), index_dir=str(tmp_path))
    os.utime(folder / "data-000000.tar", ns=(10**18, 10**18))
    with pytest.raises(ValueError, match=r"shard 'http://.*/rewritten/data-000000\.tar' changed"):
        next(iter(source))


def test_a_stalled_server_hits_the_timeout_and_the_error_names_the_shard(
    server: ShardServer, tmp_path: Path
) -> None:
    source = remote(server, tmp_path, timeout=0.3, retries=1)
    server.reset()
    server.stall = {"s/data-000003.tar"}
    with pytest.raises(TimeoutError, match=r"shard 'http://.*/s/data-000003\.tar' failed 2 times"):
        simulate(source, 0, TOTAL)
    assert len(server.served.ranges["s/data-000003.tar"]) == 2


def test_the_index_command_writes_files_the_source_reads_instead_of_scanning(
    server: ShardServer, http_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = http_root / "indexed"
    folder.mkdir(exist_ok=True)
    for i in range(3):
        (folder / f"data-00000{i}.tar").write_bytes(
            (http_root / f"s/data-00000{i}.tar").read_bytes()
        )
    url = url_of(server, "data-{000000..000002}.tar", "indexed")
    assert main(["index", url, "--out", str(folder)]) == 0
    assert capsys.readouterr().out.count(" samples\n") == 3
    server.reset()
    source = make(url, index_dir=str(tmp_path / "cache"))
    assert [len(s) for s in source.shards] == COUNTS[:3]
    assert shard_bytes(server) == {}  # no shard was scanned
    assert not (tmp_path / "cache").exists()  # nor an index cached


# tar names hold no NUL; tarfile decodes a byte that is not UTF-8 (0xff) as an escape.
tar_names = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\0") | st.just("\udcff"),
    min_size=1,
)


@settings(max_examples=30)
@given(
    samples=st.lists(
        st.lists(
            st.tuples(tar_names, st.integers(0, 2**40), st.integers(0, 2**31)),
            min_size=1,
            max_size=3,
        ),
        max_size=6,
    ),
    etag=st.none() | st.text(),
)
def test_an_index_file_decodes_to_exactly_what_was_encoded(
    samples: list[list[tuple[str, int, int]]], etag: str | None
) -> None:
    keys = tuple(f"k{i}" for i in range(len(samples)))
    members = [[list(m) for m in sample] for sample in samples]
    keys_got, members_got, size, etag_got = decode_index(
        encode_index(keys, members, 1234, etag), "u"
    )
    assert (keys_got, members_got, size, etag_got) == (keys, members, 1234, etag)


def test_a_corrupt_index_file_is_refused_naming_the_shard_and_the_fix() -> None:
    good = encode_index(("k",), [[["cls", 512, 1]]], 2048, None)
    bad = io.BytesIO()
    np.savez(bad, header=np.frombuffer(json.dumps({"format": "other"}).encode(), np.uint8))
    for data in (b"not an index", good[: len(good) // 2], bad.getvalue()):
        with pytest.raises(ValueError, match=r"index file of shard 'u' is not .* rebuild it"):
            decode_index(data, "u")


def test_remote_arguments_are_checked_with_messages_that_name_them(shards: str) -> None:
    with pytest.raises(ValueError, match="timeout should be a positive number of seconds"):
        make(shards, timeout=0)
    with pytest.raises(ValueError, match="timeout=inf; a finite timeout is what keeps"):
        make(shards, timeout=float("inf"))
    with pytest.raises(TypeError, match="timeout should be a number of seconds"):
        make(shards, timeout="1")
    with pytest.raises(ValueError, match="retries should be a non-negative integer value"):
        make(shards, retries=-1)
    with pytest.raises(ValueError, match="read_ahead should be a positive integer value"):
        make(shards, read_ahead=0)
    with pytest.raises(TypeError, match="storage_options should be a mapping"):
        make(shards, storage_options=3)
