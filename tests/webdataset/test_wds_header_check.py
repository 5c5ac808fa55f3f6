"""The tar header check on read (NOTE [ index verification ]): compiled and pure Python agree.

The compiled check (``_kernel.header_table`` and ``_kernel.check_headers``) and the pure
Python one (``DETSAMPLERS_NO_KERNEL=1``: numpy per batch, a loop per single read) must decide
alike on every read a user makes: the same samples, or the same error naming the shard.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import webdataset as wds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wds_helpers import png_bytes

from detsamplers._native import kernel
from detsamplers.loader._wds.index._index_shards import index_shards, scan_shard
from detsamplers.loader._wds.index._shard_index_file import resolved
from detsamplers.loader._wds.read import _shard_reader
from detsamplers.loader._wds.read._shard_reader import ShardReader
from detsamplers.loader._wds.remote._urls import expand_urls
from detsamplers.loader._wds.shard import _tar_check
from detsamplers.loader._wds.shard._tar_check import HeaderTable

needs_kernel = pytest.mark.skipif(
    kernel is None, reason="no compiled kernel (DETSAMPLERS_NO_KERNEL, or no C compiler)"
)
SAMPLES = 9
#: Where a flip lands, from a member's header: anywhere near it, or in a field of the header
#: (name, its end, size, checksum and its NUL and space, type, magic, name prefix).
FIELDS = [0, 1, 2, 5, 99, 100, 124, 134, 135, 148, 153, 154, 155, 156, 257, 345, 346, 511]
BYTES = st.one_of(st.integers(-512, 600), st.sampled_from(FIELDS))
SHARD: dict[str, Any] = {}


def shard_folder(factory: pytest.TempPathFactory) -> Path:
    """A shard of 9 samples of 2 or 3 members, one key long enough for a pax record, indexed."""
    if not SHARD:
        folder = factory.mktemp("headers")
        with wds.ShardWriter(str(folder / "data-%06d.tar"), verbose=0) as sink:
            for i in range(SAMPLES):
                key = f"k{i}" if i != 4 else "k4-" + "long" * 30  # 123 bytes: a pax path
                sample = {"__key__": key, "png": png_bytes(i), "cls": i}
                if i % 3 == 0:
                    sample["txt"] = "x" * (i * 100)
                sink.write(sample)
        index_shards(expand_urls(str(folder / "data-000000.tar")))  # its index file
        SHARD["folder"] = folder
    return Path(SHARD["folder"])


def outcome(pattern: str, reads: list[tuple[str, list[int]]]) -> list[Any]:
    """What each read gives: the samples, or the error's message (a fresh source each time)."""
    shards = index_shards(expand_urls(pattern))
    reader = ShardReader(shards)
    got: list[Any] = []
    try:
        for how, indexes in reads:
            try:
                if how == "many":
                    got.append(reader.read_many([0] * len(indexes), indexes))
                else:
                    got.append([reader.read(0, i) for i in indexes])
            except ValueError as exn:
                got.append(str(exn))
    finally:
        reader.close()
    return got


@needs_kernel
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    flips=st.lists(st.tuples(st.integers(0, 40), BYTES, st.integers(1, 255)), max_size=3),
    reads=st.lists(
        st.tuples(
            st.sampled_from(["many", "single"]),
            st.lists(st.integers(0, SAMPLES - 1), min_size=1, max_size=SAMPLES, unique=True),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_reads_with_and_without_the_kernel_give_the_same_samples_or_the_same_error(
    tmp_path_factory: pytest.TempPathFactory,
    flips: list[tuple[int, int, int]],
    reads: list[tuple[str, list[int]]],
) -> None:
    source = shard_folder(tmp_path_factory)
    folder = tmp_path_factory.mktemp("flipped")
    for name in ("data-000000.tar", "data-000000.tar.index.npz"):
        shutil.copy2(source / name, folder / name)  # the copy keeps the mtime: index still fresh
    path = folder / "data-000000.tar"
    _, packed = scan_shard(str(source / "data-000000.tar"))
    data = bytearray(path.read_bytes())
    for member, byte, delta in flips:  # mostly in a member's header, some in data around it
        at = packed.offsets[member % len(packed.offsets)] - 512 + byte
        data[at % len(data)] ^= delta
    with open(path, "r+b") as handle:  # in place, same size and mtime: its index is trusted
        handle.write(data)
    stat = (source / "data-000000.tar").stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    compiled = outcome(str(path), reads)
    with pytest.MonkeyPatch.context() as patch:  # each example restores the kernel
        patch.setattr(_tar_check, "kernel", None)
        patch.setattr(_shard_reader, "kernel", None)
        assert outcome(str(path), reads) == compiled
    if not flips:
        assert not any(isinstance(got, str) for got in compiled)
    for got in compiled:
        if isinstance(got, str):
            assert str(path) in got and "does not hold sample" in got


@needs_kernel
def test_the_table_is_built_once_per_decoded_index_and_kept_on_it(tmp_path: Path) -> None:
    with wds.ShardWriter(str(tmp_path / "data-%06d.tar"), maxcount=4, verbose=0) as sink:
        for i in range(8):
            sink.write({"__key__": f"k{i}", "cls": i})
    urls = expand_urls(str(tmp_path / "data-{000000..000001}.tar"))
    index_shards(urls)  # scans the shards and writes their index files
    shards = index_shards(urls)  # reads them back (decoded when first read)
    built: list[HeaderTable] = []
    real = HeaderTable.__init__

    def counted(self: HeaderTable, *args: Any) -> None:
        real(self, *args)
        built.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HeaderTable, "__init__", counted)
        reader = ShardReader(shards)
        for _ in range(3):  # each read switches shards: the shard is reopened, not its table
            for shard in (0, 1):
                reader.read_many([shard] * 4, [0, 1, 2, 3])
                reader.read(shard, 3)
        reader.close()
        ShardReader(shards).read(1, 2)  # another reader of the same decoded index
    assert len(built) == 2
    assert [resolved(info.members).table for info in shards] == built  # type: ignore[attr-defined]
    assert all(table.compiled is not None for table in built)
    for info, table in zip(shards, built, strict=True):  # the index file's own arrays, reused
        arrays = resolved(info.members).arrays  # type: ignore[attr-defined]
        assert arrays is not None and table.joined == (arrays["keys"], arrays["suffixes"])


@needs_kernel
def test_the_compiled_table_and_check_refuse_malformed_arguments() -> None:
    assert kernel is not None
    offsets = np.array([512, 1536], dtype=np.int64)
    sizes = np.array([1, 1], dtype=np.int64)
    starts = np.array([0, 1, 2], dtype=np.int64)
    table = kernel.header_table(offsets, sizes, starts, b"k0\0k1\0", b"cls\0cls\0")
    assert isinstance(table, bytearray)
    assert kernel.header_table(offsets, sizes, starts, b"k0\0k1", b"cls\0cls\0") is None
    assert kernel.header_table(offsets, sizes, starts, b"", b"") is None
    with pytest.raises(ValueError, match="sizes should match offsets"):
        kernel.header_table(offsets, sizes[:1], starts, b"k0\0k1\0", b"cls\0cls\0")
    with pytest.raises(ValueError, match="should hold int64 items"):
        kernel.header_table(offsets.astype(np.int32), sizes, starts, b"k0\0k1\0", b"cls\0cls\0")
    with pytest.raises(ValueError, match="what header_table returns"):
        kernel.check_headers(bytes(2048), 0, table[:-1], None, 0, 2)
    with pytest.raises(ValueError, match="inside the members"):
        kernel.check_headers(bytes(2048), 0, table, None, 0, 3)
    assert kernel.check_headers(bytes(2048), 0, table, None, 0, 2) == 0  # no header there
    assert kernel.check_headers(bytes(2048), 0, table, None, 1, 1) == -1  # nothing to check
