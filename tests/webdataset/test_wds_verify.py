"""Index and shard files cannot lie (NOTE [ index verification ]): each hostile file is refused.

Every case writes a crafted file and reads through the path a user takes (index_shards and
the shard reader, or a source); a refusal must name the file, and anything not refused
must be exactly the true samples.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import threading
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import webdataset as wds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wds_helpers import make, png_bytes, write_shards

from detsamplers.loader._wds.index._index_shards import index_shards, scan_shard
from detsamplers.loader._wds.index._shard_index_file import decode_checked, encode_index
from detsamplers.loader._wds.read._shard_reader import ShardReader
from detsamplers.loader._wds.remote._remote_reads import (
    RemoteOptions,
    RemoteShard,
    ShardChangedError,
)
from detsamplers.loader._wds.remote._urls import expand_urls
from detsamplers.loader._wds.shard._file_checks import MemberError, npy_loads
from detsamplers.loader._wds.shard._tar_walk import BLOCK

REBUILD = r"rebuild it with `python -m detsamplers index"
FIFO_TIMEOUT = 60  # seconds: a regression that blocks on a FIFO fails instead of hanging


def read_all(pattern: str) -> list[dict[str, Any]]:
    """Every sample of the shards, through a fresh index and a reader (one run, many)."""
    shards = index_shards(expand_urls(pattern))
    reader = ShardReader(shards)
    try:
        out = [reader.read(s, i) for s in range(len(shards)) for i in range(len(shards[s]))]
        many = reader.read_many([0] * len(shards[0]), list(range(len(shards[0]))))
    finally:
        reader.close()
    assert many == out[: len(shards[0])]
    return out


def arrays_of(data: bytes) -> dict[str, np.ndarray[Any, Any]]:
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def npz_bytes(arrays: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


@pytest.fixture
def shard(tmp_path: Path) -> tuple[str, Path, Path]:
    """One indexed 6-sample shard: its pattern, path and index file."""
    pattern = write_shards(tmp_path, [6])
    index_shards(expand_urls(pattern))
    path = tmp_path / "data-000000.tar"
    return pattern, path, Path(str(path) + ".index.npz")


# --- FIFOs, devices, symlinks to them -------------------------------------------------


def refusal_within(call: Any, fifo: Path) -> str:
    """The ``ValueError`` message ``call()`` raises, failing (never hanging) past FIFO_TIMEOUT.

    ``call`` runs in a thread; if it blocks, the FIFO is opened for writing, which lets
    the blocked reader go, and the test fails.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exn:  # handed to the test
            outcome["error"] = exn

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(FIFO_TIMEOUT)
    if thread.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # a reader waits: this frees it
        os.close(fd)
        thread.join(10)
        pytest.fail(f"blocked on the FIFO {fifo} for {FIFO_TIMEOUT} s")
    error = outcome.get("error")
    assert isinstance(error, ValueError), outcome
    return str(error)


@pytest.mark.parametrize("where", ["shard", "shard-symlink", "index", "index-symlink"])
def test_a_fifo_as_shard_or_index_file_is_refused_by_name_without_blocking(
    tmp_path: Path, where: str
) -> None:
    pattern = write_shards(tmp_path, [3])
    path = tmp_path / "data-000000.tar"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    target = path if where.startswith("shard") else Path(str(path) + ".index.npz")
    target.unlink(missing_ok=True)
    if where.endswith("symlink"):
        target.symlink_to(fifo)
    else:
        os.mkfifo(target)
    blocking = fifo if where.endswith("symlink") else target
    message = refusal_within(lambda: index_shards(expand_urls(pattern)), blocking)
    kind = "a symlink to a FIFO" if where.endswith("symlink") else "a FIFO"
    what = "shard" if where.startswith("shard") else "index file"
    assert message.startswith(f"{what} '{target}' is {kind} (named pipe), not a regular file")


def test_a_shard_swapped_for_a_fifo_after_the_build_is_refused_on_open(tmp_path: Path) -> None:
    pattern = write_shards(tmp_path, [3])
    path = tmp_path / "data-000000.tar"
    reader = ShardReader(index_shards(expand_urls(pattern)))
    path.unlink()
    os.mkfifo(path)
    message = refusal_within(lambda: reader.read(0, 0), path)
    assert message.startswith(f"shard '{path}' is a FIFO (named pipe), not a regular file")


@pytest.mark.parametrize("where", ["shard", "index"])
def test_a_device_as_shard_or_index_file_is_refused_by_name(tmp_path: Path, where: str) -> None:
    pattern = write_shards(tmp_path, [3])
    path = tmp_path / "data-000000.tar"
    target = path if where == "shard" else Path(str(path) + ".index.npz")
    target.unlink(missing_ok=True)
    target.symlink_to("/dev/zero")  # an endless read if it were read whole
    what = "shard" if where == "shard" else "index file"
    expected = rf"{what} '{target}' is a symlink to a character device, not a regular file"
    with pytest.raises(ValueError, match=expected):
        index_shards(expand_urls(pattern))


# --- a replaced shard -----------------------------------------------------------------


def test_a_shard_replaced_after_the_build_is_an_error_naming_it_never_a_mix(
    tmp_path: Path,
) -> None:
    pattern = write_shards(tmp_path / "a", [6])
    other = write_shards(tmp_path / "b", [6])  # same layout and size, other keys and labels
    path = tmp_path / "a" / "data-000000.tar"
    assert path.stat().st_size == Path(other.replace("{000000..000000}", "000000")).stat().st_size
    source = make(pattern, batch_size=3)
    first = next(iter(source))
    assert [int(x) for x in first] == [0, 1, 2]
    copy = tmp_path / "copy.tar"
    shutil.copyfile(tmp_path / "b" / "data-000000.tar", copy)
    os.replace(copy, path)  # same size, new inode and mtime
    with pytest.raises(ShardChangedError, match=rf"shard '{path}' was replaced or rewritten"):
        next(iter(source))


def test_a_shard_rewritten_in_place_with_its_mtime_restored_fails_the_header_check(
    shard: tuple[str, Path, Path],
) -> None:
    pattern, path, _ = shard
    before = path.stat()
    source = make(pattern, batch_size=3)
    data = bytearray(path.read_bytes())
    _, members = scan_shard(str(path))
    first = members[1][0][1] - 512  # sample 1's first header: rename its key in place
    name = data[first : first + 100]
    data[first : first + 100] = name.replace(b"s0-001", b"s0-00x")
    with open(path, "r+b") as handle:  # the same inode, size and (below) mtime
        handle.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(ValueError, match=rf"shard '{path}' does not hold sample 's0-001'.*"):
        list(source)


# --- lying index files ----------------------------------------------------------------


def rewrite_index(index: Path, edit: Any) -> None:
    arrays = arrays_of(index.read_bytes())
    edit(arrays)
    index.write_bytes(npz_bytes(arrays))


EDITS = {
    "an offset moved by a block": (
        lambda a: a["offsets"].__setitem__(3, a["offsets"][3] + 512),
        r"does not hold sample|inside the previous member",
    ),
    "an offset past the shard": (
        lambda a: a["offsets"].__setitem__(5, 10**15),
        r"member 5 has offset 1000000000000000, outside 512\.\.\d+ \(the shard\)",
    ),
    "an offset off a block": (
        lambda a: a["offsets"].__setitem__(2, a["offsets"][2] + 3),
        r"member 2 \(bytes .*\) is not a tar member's data",
    ),
    "a size that overflows": (
        lambda a: a["sizes"].__setitem__(0, 2**62),
        r"member 0 has size 4611686018427387904, outside 0\.\.\d+ \(the shard\)",
    ),
    "a size a byte short": (
        lambda a: a["sizes"].__setitem__(1, a["sizes"][1] - 1),
        r"gives \d+ bytes, the index \d+",
    ),
    "two keys swapped": (
        lambda a: a.__setitem__("keys", np.frombuffer(swap_keys(a["keys"].tobytes()), np.uint8)),
        r"names 's0-000\.cls', not member 'cls' of sample 's0-001'",
    ),
    "a member moved to the next sample": (
        lambda a: a["starts"].__setitem__(1, 1),
        r"names 's0-000\.png', not member 'png' of sample 's0-001'",
    ),
    "an empty sample": (
        lambda a: a["starts"].__setitem__(1, 0),
        r"the sample starts do not increase",
    ),
    "a suffix renamed": (
        lambda a: a.__setitem__(
            "suffixes", np.frombuffer(a["suffixes"].tobytes().replace(b"png", b"jpg", 1), np.uint8)
        ),
        r"names 's0-000\.png', not member 'jpg' of sample 's0-000'",
    ),
}
DAMAGES = {  # the file fails its own format checks: a damaged cache file, scanned instead
    "int32 offsets": lambda a: a.__setitem__("offsets", a["offsets"].astype(np.int32)),
    "2-d sizes": lambda a: a.__setitem__("sizes", a["sizes"].reshape(2, -1)),
    "no keys": lambda a: a.pop("keys"),
}


def swap_keys(joined: bytes) -> bytes:
    keys = joined.split(b"\0")
    keys[0], keys[1] = keys[1], keys[0]
    return b"\0".join(keys)


@pytest.mark.parametrize("case", list(EDITS))
def test_an_index_file_that_lies_is_refused_naming_it_and_the_fix(
    shard: tuple[str, Path, Path], case: str
) -> None:
    pattern, path, index = shard
    edit, message = EDITS[case]
    rewrite_index(index, edit)
    with pytest.raises(ValueError, match=message) as raised:
        read_all(pattern)
    text = str(raised.value)
    assert str(path) in text
    assert str(index) in text and REBUILD in text


@pytest.mark.parametrize("case", list(DAMAGES))
def test_an_index_file_damaged_past_its_header_gives_the_true_samples_by_a_scan(
    shard: tuple[str, Path, Path], case: str
) -> None:
    pattern, _, index = shard
    truth = read_all(pattern)
    rewrite_index(index, DAMAGES[case])
    assert read_all(pattern) == truth


def test_a_zip_entry_claiming_1e12_entries_allocates_nothing(
    shard: tuple[str, Path, Path],
) -> None:
    pattern, path, index = shard
    arrays = arrays_of(index.read_bytes())
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():  # a valid zip, CRCs right: only the claim lies
            entry = io.BytesIO()
            np.save(entry, array)
            data = entry.getvalue()
            if name == "offsets":
                data = npy_header((10**12,), "<i8") + array.tobytes()
            archive.writestr(name + ".npy", data)
    truth = read_all(pattern)
    index.write_bytes(buffer.getvalue())
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"'offsets' claims 1000000000000 entries") as raised:
            decode_checked(index.read_bytes(), str(path), str(index))
        assert read_all(pattern) == truth  # a damaged cache file: the shard is scanned
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(index) in str(raised.value) and REBUILD in str(raised.value)
    assert peak < 64 << 20  # no 8 TB array, not even a large one


def test_an_index_file_larger_than_any_index_of_its_shard_is_not_read(
    shard: tuple[str, Path, Path],
) -> None:
    pattern, path, index = shard
    truth = read_all(pattern)
    with open(index, "ab") as handle:  # a valid zip is still found at its end: grow it
        handle.write(bytes(3 * path.stat().st_size))
    tracemalloc.start()
    try:
        got = read_all(pattern)  # refused as an index: the shard is scanned again
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == truth
    assert peak < 2 * path.stat().st_size + (8 << 20)


def test_decode_checked_refuses_an_index_of_another_layout_by_name() -> None:
    data = encode_index(("k0", "k1"), [[["cls", 512, 1]], [["cls", 600, 1]]], 4096, None)
    with pytest.raises(ValueError, match=r"index file 'x\.idx' of shard 'a\.tar' .* not a tar"):
        decode_checked(data, "a.tar", "x.idx")


# --- .npy members ---------------------------------------------------------------------


def npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        head, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return head.getvalue()


def test_an_npy_member_claiming_more_than_it_holds_is_refused_before_allocation(
    tmp_path: Path,
) -> None:
    good = io.BytesIO()
    np.save(good, np.arange(4.0))
    with wds.ShardWriter(str(tmp_path / "n-%d.tar"), verbose=0) as sink:
        sink.write({"__key__": "ok", "npy": good.getvalue()})
        sink.write({"__key__": "bad", "npy": npy_header((10**12,)) + bytes(64)})
    source = make(str(tmp_path / "n-0.tar"), batch_size=1, map=lambda s: s["npy"])
    batches = iter(source)
    assert next(batches).tolist() == [[0.0, 1.0, 2.0, 3.0]]
    tracemalloc.start()
    try:
        with pytest.raises(MemberError, match=r"member 'npy' of sample 'bad' in shard '.*n-0\.tar"):
            next(batches)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


@pytest.mark.parametrize(
    "shape", [(10**12,), (2**32, 2**32), (3, 10**6)], ids=["1e12", "overflows-int64", "3e6"]
)
def test_npy_loads_refuses_every_claim_past_the_member(shape: tuple[int, ...]) -> None:
    with pytest.raises(MemberError, match=r"its \.npy header claims \d+ items of float64"):
        npy_loads(npy_header(shape) + bytes(800))


def test_npy_loads_gives_what_webdataset_gives() -> None:
    from webdataset.autodecode import npy_loads as theirs

    for array in (np.arange(6).reshape(2, 3), np.array("text"), np.zeros((0, 4)), np.eye(3).T):
        buffer = io.BytesIO()
        np.save(buffer, array)
        ours, expected = npy_loads(buffer.getvalue()), theirs(buffer.getvalue())
        assert ours.dtype == expected.dtype and np.array_equal(ours, expected)


# --- HTTP: a version the response no longer has ---------------------------------------


def test_an_http_shard_whose_etag_or_date_changed_is_refused_on_read(server: Any) -> None:
    url = f"{server.url}/s/data-000000.tar"
    size = Path(server.root / "s" / "data-000000.tar").stat().st_size
    options = RemoteOptions(retries=0, timeout=30)
    head = RemoteShard(url, size, None, options)
    info = head.fs.info(head.path)
    assert RemoteShard(url, size, info["Last-Modified"], options).read(0, 512)  # current
    for stale in ('W/"not-it"', "Mon, 01 Jan 2001 00:00:00 GMT"):
        shard = RemoteShard(url, size, stale, options)
        with pytest.raises(ShardChangedError, match=rf"shard '{url}' changed .*now sends"):
            shard.read(0, 512)
        shard.close()
    head.close()


# --- the property ---------------------------------------------------------------------

CORRUPTIONS = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.floats(0, 1, exclude_max=True), st.just(0)),
    st.tuples(
        st.just("field"),
        st.sampled_from(["starts", "offsets", "sizes", "keys", "suffixes"]),
        st.integers(-(2**40), 2**40),
    ),
)
PROPERTY_FOLDER: dict[str, Any] = {}


def property_shard(factory: pytest.TempPathFactory) -> tuple[str, Path, Path, bytes, list[Any]]:
    """A 6-sample shard with its true samples and index bytes (built once per session)."""
    if not PROPERTY_FOLDER:
        folder = factory.mktemp("lying")
        with wds.ShardWriter(str(folder / "data-%06d.tar"), verbose=0) as sink:
            for i in range(6):
                sink.write({"__key__": f"k{i}", "png": png_bytes(i), "cls": i, "txt": "x" * i})
        pattern = str(folder / "data-000000.tar")
        truth = read_all(pattern)
        index = Path(pattern + ".index.npz")
        PROPERTY_FOLDER.update(folder=folder, truth=truth, index=index.read_bytes())
    folder = PROPERTY_FOLDER["folder"]
    path = folder / "data-000000.tar"
    return (
        str(path),
        path,
        Path(str(path) + ".index.npz"),
        PROPERTY_FOLDER["index"],
        (PROPERTY_FOLDER["truth"]),
    )


def corrupt(data: bytes, how: tuple[str, Any, int]) -> bytes:
    kind, where, value = how
    if kind == "flip":
        damaged = bytearray(data)
        damaged[int(where * len(data))] ^= value
        return bytes(damaged)
    if kind == "cut":
        return data[: int(where * len(data))]
    arrays = arrays_of(data)
    array = arrays[where].copy()
    if len(array):
        slot = abs(value) % len(array)
        if array.dtype == np.uint8:
            array[slot] = value % 256
        else:
            array[slot] += value
    arrays[where] = array
    return npz_bytes(arrays)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(how=CORRUPTIONS)
def test_a_corrupt_index_file_is_refused_by_name_or_gives_exactly_the_true_samples(
    tmp_path_factory: pytest.TempPathFactory, how: tuple[str, Any, int]
) -> None:
    pattern, path, index, good, truth = property_shard(tmp_path_factory)
    index.write_bytes(corrupt(good, how))
    tracemalloc.start()
    try:
        got = read_all(pattern)
    except ValueError as exn:
        assert str(path) in str(exn)  # names the shard (and the index file, where it is to blame)
        assert REBUILD in str(exn) or "build the source again" in str(exn)
    else:
        assert got == truth
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 64 << 20
    json.dumps(how)  # the example is printable as data


@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    flips=st.lists(
        st.tuples(st.integers(0, 2**10), st.integers(-512, 1023), st.integers(1, 255)), max_size=3
    ),
    chosen=st.lists(st.integers(0, 2**10), min_size=1, max_size=12),
)
def test_the_compiled_header_check_decides_as_the_numpy_one(
    tmp_path_factory: pytest.TempPathFactory,
    flips: list[tuple[int, int, int]],
    chosen: list[int],
) -> None:
    from detsamplers._native import kernel
    from detsamplers.loader._wds.shard import _tar_check
    from detsamplers.loader._wds.shard._tar_check import HeaderTable

    if kernel is None:
        pytest.skip("the compiled kernel is not built (DETSAMPLERS_NO_KERNEL, or no C compiler)")
    folder = tmp_path_factory.mktemp("compiled")
    write_shards(folder, [12])
    path = str(folder / "data-000000.tar")
    keys, packed = scan_shard(path)
    data = bytearray(Path(path).read_bytes())
    table = HeaderTable(keys, packed)
    for member, byte, delta in flips:  # mostly in a member's header, some in data around it
        at = int(table.offsets[member % len(table.offsets)]) - BLOCK + byte
        data[at % len(data)] ^= delta
    members = np.array(sorted({c % len(table.offsets) for c in chosen}), dtype=np.int64)
    compiled = table.mismatch(bytes(data), 0, members)
    ranged = table.range_mismatch(bytes(data), 0, int(members[0]), int(members[-1]) + 1)
    with pytest.MonkeyPatch.context() as patch:  # each example restores the kernel
        patch.setattr(_tar_check, "kernel", None)
        assert table.mismatch(bytes(data), 0, members) == compiled
        everything = np.arange(int(members[0]), int(members[-1]) + 1, dtype=np.int64)
        assert table.mismatch(bytes(data), 0, everything) == ranged
    if not flips:
        assert compiled is None and ranged is None


def left_open_npy(version: int) -> bytes:
    """A ``.npy`` whose header leaves a bracket open: numpy re-reads it as a Python 2 header,
    by tokenize, whose ``TokenError`` is no ``ValueError``."""
    text = b"{'descr': '<u1', 'fortran_order': False, 'shape': (3,"
    width = 2 if version == 1 else 4
    text += b" " * (64 - 8 - width - len(text) - 1) + b"\n"
    return b"\x93NUMPY" + bytes([version, 0]) + len(text).to_bytes(width, "little") + text + b"abc"


@pytest.mark.parametrize("version", [1, 2])
def test_a_header_numpy_cannot_tokenize_is_refused_by_every_reader_of_npy_bytes(
    version: int,
) -> None:
    from detsamplers.loader._wds.index._set_index_file import decode_set
    from detsamplers.loader._wds.shard._file_checks import load_arrays

    with pytest.raises(MemberError, match=r"^its \.npy header is unreadable \("):
        npy_loads(left_open_npy(version))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("header.npy", left_open_npy(version))
    with pytest.raises(ValueError, match=r"^array 'header' has an unreadable header \("):
        load_arrays(buffer.getvalue(), ["header"], {"header": "|u1"})
    with pytest.raises(ValueError, match=r"'s3://b/detsamplers-set\.index\.npz' is not a "):
        decode_set(buffer.getvalue(), "s3://b/")
