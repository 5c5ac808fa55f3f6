"""Hostile input to the webdataset source is a clear error naming the shard, file or argument.

Bad shards, URLs, index files, arguments and states, and an install without the webdataset
extra: one case per input under a 20 s alarm (tests/bad_input.py). The ShardWriter's cases are
in test_wds_writer_bad_input.py.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import detsamplers as ds
from detsamplers.loader import WebDatasetSource
from tests.bad_input import (
    Case,
    alarm,  # noqa: F401  # autouse: fails a case that hangs
    assert_clear_error,
)


def write_tar(path: Path, count: int) -> None:
    with tarfile.open(path, "w") as archive:
        for i in range(count):
            data = str(i).encode()
            info = tarfile.TarInfo(f"s{i:04d}.txt")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def shard_case(tmp_path: Path, kind: str) -> str:
    good = tmp_path / "good.tar"
    write_tar(good, 5)
    if kind == "missing":
        return str(tmp_path / "nope-{000..001}.tar")
    if kind == "brace expands to nothing":
        return str(tmp_path / "x-{5..1}.tar")
    if kind == "empty file":
        (tmp_path / "empty.tar").write_bytes(b"")
        return str(tmp_path / "empty.tar")
    if kind == "no records":
        write_tar(tmp_path / "zero.tar", 0)
        return str(tmp_path / "zero.tar")
    if kind == "garbage":
        (tmp_path / "garbage.tar").write_bytes(b"hello world" * 100)
        return str(tmp_path / "garbage.tar")
    if kind == "truncated":
        (tmp_path / "trunc.tar").write_bytes(good.read_bytes()[:700])
        return str(tmp_path / "trunc.tar")
    return str(good)


SHARDS: dict[str, tuple[type[Exception], str]] = {
    "missing": (FileNotFoundError, r"shard '.*nope-000.tar' .* does not exist; check urls"),
    "brace expands to nothing": (FileNotFoundError, r"shard '.*x-5.tar' .* does not exist"),
    "empty file": (ValueError, r"shard '.*empty.tar' is truncated or corrupt: .*empty file"),
    "no records": (ValueError, r"urls should name shards with samples, but all 1 of them"),
    "garbage": (ValueError, r"shard '.*garbage.tar' is truncated or corrupt"),
    "truncated": (ValueError, r"shard '.*trunc.tar' is truncated or corrupt"),
}


@pytest.mark.parametrize("kind", list(SHARDS), ids=list(SHARDS))
def test_a_bad_shard_is_a_clear_error_naming_it(tmp_path: Path, kind: str) -> None:
    error, message = SHARDS[kind]
    with pytest.raises(error, match=message):
        WebDatasetSource(shard_case(tmp_path, kind), seed=0, batch_size=2)


@pytest.mark.parametrize(
    "urls,error,message",
    [
        ([], ValueError, r"urls should name at least one shard, but got an empty list"),
        (5, TypeError, r"urls should be a string .* but got urls of type int"),
    ],
    ids=["empty list", "an int"],
)
def test_bad_urls_are_a_clear_error(urls: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        WebDatasetSource(urls, seed=0, batch_size=2)


@pytest.mark.parametrize(
    "index",
    [b"{not json", b"PK\x03\x04", b"", "cut", "flipped"],
    ids=["garbage", "zip-start", "empty", "truncated", "damaged-body"],
)
def test_a_corrupt_index_file_is_rebuilt_not_trusted(tmp_path: Path, index: bytes | str) -> None:
    shard = tmp_path / "good.tar"
    write_tar(shard, 5)
    WebDatasetSource(str(shard), seed=0, batch_size=2)
    sidecar = tmp_path / "good.tar.index.npz"
    good = sidecar.read_bytes()
    middle = len(good) * 3 // 5
    damaged = {  # flipped: past the header, so found only when the shard is first read
        "cut": good[: len(good) // 2],
        "flipped": good[:middle] + bytes(b ^ 0xFF for b in good[middle : middle + 8]),
    }.get(str(index), index)
    if index == "flipped":
        damaged += good[middle + 8 :]
    sidecar.write_bytes(bytes(damaged))
    source = WebDatasetSource(str(shard), seed=0, batch_size=5, repeat=False)
    assert sorted(int(x) for b in source for x in b["txt"]) == list(range(5))
    if index != "flipped":
        assert sidecar.read_bytes() == good  # rewritten


def test_a_stale_index_file_is_rebuilt_after_the_shard_changes(tmp_path: Path) -> None:
    shard = tmp_path / "good.tar"
    write_tar(shard, 5)
    WebDatasetSource(str(shard), seed=0, batch_size=2)
    write_tar(shard, 7)
    source = WebDatasetSource(str(shard), seed=0, batch_size=7, repeat=False)
    assert sorted(int(x) for b in source for x in b["txt"]) == list(range(7))


# -- the webdataset source's arguments and state ----------------------------------------


@pytest.fixture
def shard(tmp_path: Path) -> str:
    path = tmp_path / "good.tar"
    write_tar(path, 9)
    return str(path)


def source(urls: str, **kwargs: Any) -> WebDatasetSource:
    return WebDatasetSource(urls, **{"seed": 0, "batch_size": 2, **kwargs})


def saved(urls: str) -> dict[str, Any]:
    first = source(urls)
    next(iter(first))
    return first.state_dict()


WEB_CASES: dict[str, tuple[Callable[[str], Any], type[Exception], str]] = {
    "rank past the world": (
        lambda u: source(u, world_size=2, rank=3),
        ValueError,
        r"rank should be an integer in \[0, world_size\), but got rank=3",
    ),
    "shuffle_window is a bool": (
        lambda u: source(u, shuffle_window=True),
        TypeError,
        r"shuffle_window should be an integer value, but got shuffle_window=True",
    ),
    "repeat is an int": (
        lambda u: source(u, repeat=1),
        TypeError,
        r"repeat should be a bool, but got repeat=1",
    ),
    "map is a string": (
        lambda u: source(u, map="x"),
        TypeError,
        r"map should be a callable or None, but got map='x'",
    ),
    "decode is an int": (
        lambda u: source(u, decode=5),
        TypeError,
        r"decode should be a webdataset image spec .* but got 5",
    ),
    "state has an extra field": (
        lambda u: source(u).load_state_dict({**saved(u), "x": 1}),
        ValueError,
        r"state has keys x that WebDatasetSource.state_dict\(\) never writes",
    ),
    "state config is None": (
        lambda u: source(u).load_state_dict({**saved(u), "config": None}),
        TypeError,
        r"state\['config'\] should be the dict of settings .* but got None",
    ),
    "state counts is None": (
        lambda u: source(u).load_state_dict({**saved(u), "counts": None}),
        TypeError,
        r"state\['counts'\] should be the list of samples per shard .* but got None",
    ),
    "state is from another seed": (
        lambda u: source(u, seed=1).load_state_dict(saved(u)),
        ds.ReproducibilityError,
        r"seed is 0 in the state but 1 here",
    ),
    "validation state is from another global batch": (
        lambda u: source(u, world_size=2, repeat=False).load_state_dict(
            {**source(u, repeat=False).state_dict(), "position": 2}
        ),
        ValueError,
        r"state_dict\['position'\]=2 should be a multiple of the global batch",
    ),
    "state counts are from other shards": (
        lambda u: source(u).load_state_dict({**saved(u), "counts": [9, 3]}),
        ds.ReproducibilityError,
        r"it was saved with 2 shards, but urls name 1",
    ),
}


@pytest.mark.parametrize("case", list(WEB_CASES), ids=list(WEB_CASES))
def test_hostile_input_to_the_webdataset_source_is_a_clear_error(shard: str, case: str) -> None:
    call, kind, message = WEB_CASES[case]
    with pytest.raises(kind, match=message):
        call(shard)


def test_a_webdataset_collate_fn_of_none_means_torchs_default(shard: str) -> None:
    batch = next(iter(source(shard, collate_fn=None, shuffle_shards=False)))
    assert batch["__key__"] == ["s0000", "s0001"]


URL_CASES: dict[str, Case] = {
    "an empty string as the shard URL": (
        lambda: WebDatasetSource("", seed=0, batch_size=2),
        ValueError,
        r"urls should name shards, but got an empty shard URL \('', shard 0 of 1\) in urls=''; "
        r".* remove the empty entry or the stray '::'",
    ),
    "'::' as the shard URLs": (
        lambda: WebDatasetSource("::", seed=0, batch_size=2),
        ValueError,
        r"an empty shard URL \('', shard 0 of 2\) in urls='::'",
    ),
    "an empty entry in a list of shard URLs": (
        lambda: WebDatasetSource(["a.tar", ""], seed=0, batch_size=2),
        ValueError,
        r"an empty shard URL \(urls\[1\]='', shard 1 of 2\) in urls=\['a.tar', ''\]",
    ),
}


@pytest.mark.parametrize("case", list(URL_CASES), ids=list(URL_CASES))
def test_an_empty_shard_url_is_a_clear_error(case: str) -> None:
    assert_clear_error(*URL_CASES[case])


@pytest.fixture
def no_webdataset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Import webdataset as an install without the extra would: it is not there."""
    for name in ("webdataset", "webdataset.shardlists", "webdataset.autodecode"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "detsamplers.loader._wds.index._shard_writer", raising=False)


INSTALL = r"webdataset shards need the webdataset package, which is not installed here .*: pip install webdataset \(or, in a clone of detsamplers, pip install -c constraints.txt -e '\.\[webdataset\]'\)"  # noqa: E501


@pytest.mark.usefixtures("no_webdataset")
def test_without_the_webdataset_extra_each_entry_point_says_how_to_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from detsamplers.__main__ import main

    shard = tmp_path / "a.tar"
    write_tar(shard, 3)
    with pytest.raises(ModuleNotFoundError, match=INSTALL):
        WebDatasetSource(str(shard), seed=0, batch_size=2)
    with pytest.raises(ModuleNotFoundError, match=INSTALL):
        ds.loader.WebDatasetMix([str(shard), str(shard)], [1, 1], seed=0, batch_size=2)
    with pytest.raises(ModuleNotFoundError, match=INSTALL):
        from detsamplers.loader import ShardWriter  # noqa: F401
    assert main(["index", str(shard)]) == 1
    assert re.search("index failed: " + INSTALL, capsys.readouterr().err)
    assert not (tmp_path / "a.tar.index.npz").exists()


@pytest.mark.subprocess
def test_the_index_command_without_webdataset_exits_1_with_the_install_line(
    tmp_path: Path,
) -> None:
    shard = tmp_path / "a.tar"
    write_tar(shard, 3)
    blocked = (
        "import runpy, sys; sys.modules['webdataset'] = None; "
        "sys.argv = ['detsamplers', 'index', sys.argv[1]]; "
        "runpy.run_module('detsamplers', run_name='__main__', alter_sys=True)"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked, str(shard)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 1, done.stderr
    assert re.search(INSTALL, done.stderr), done.stderr


@pytest.mark.servers
def test_a_server_that_ignores_range_requests_is_reported_when_the_source_is_built(
    tmp_path: Path,
) -> None:
    from http_server import ShardServer

    write_tar(tmp_path / "a.tar", 5)
    write_tar(tmp_path / "b.tar", 5)
    server = ShardServer(tmp_path)
    try:
        urls = [f"{server.url}/a.tar", f"{server.url}/b.tar"]
        built = WebDatasetSource(urls, seed=0, batch_size=5, index_dir=str(tmp_path / "cache"))
        assert sorted(int(x) for x in next(iter(built))["txt"]) == [0, 1, 2, 3, 4]
        server.reset()
        server.no_range = {"a.tar", "b.tar"}
        with pytest.raises(
            ValueError,
            match=r"shard 'http://127.0.0.1:\d+/a.tar': the server ignores Range requests \(it "
            r"answered 'Range: bytes=0-0' with HTTP 200 and the whole file\), but the source "
            r"reads byte ranges of shards; serve them from a server that honours Range "
            r"requests .* or download the shards and pass their local paths",
        ):  # the index is cached: nothing else would read a shard before the first batch
            WebDatasetSource(urls, seed=0, batch_size=5, index_dir=str(tmp_path / "cache"))
        statuses = server.served.statuses
        assert [s for s in statuses if s[0].endswith(".tar")] == [("a.tar", 200), ("a.tar", 200)]
        # Before that one probe of the host: each shard's own index file, asked for with
        # Range: bytes=0- (a 206 would have settled the host, NOTE [ range support ]).
        assert sorted(s for s in statuses if not s[0].endswith(".tar")) == [
            ("a.tar.index.npz", 404),
            ("b.tar.index.npz", 404),
        ]
    finally:
        server.close()
