"""Open only a regular file (NOTE [ regular files only ]): never a FIFO, a device or a folder."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers import _files_open
from detsamplers._files_open import (
    NotRegularFileError,
    file_kind,
    open_regular_fd,
    read_bounded,
    stat_regular,
)


@pytest.mark.parametrize("stat_first", [True, False])
def test_a_fifo_is_refused_at_once_whether_or_not_it_is_stat_first(
    tmp_path: Path, stat_first: bool
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it blocking would wait for a writer forever
    with pytest.raises(NotRegularFileError, match=r"pipe' is a FIFO, not a regular file") as got:
        open_regular_fd(fifo, stat_first=stat_first)
    assert file_kind(got.value.mode) == "a FIFO"


def test_a_folder_and_a_device_are_named_for_what_they_are(tmp_path: Path) -> None:
    with pytest.raises(NotRegularFileError, match=r"is a folder, not a regular file"):
        stat_regular(tmp_path)
    with pytest.raises(NotRegularFileError, match=r"'/dev/zero' is a character device"):
        open_regular_fd("/dev/zero", stat_first=False)


def test_a_regular_file_opens_blocking_with_its_size_and_reads_whole(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * 3000)
    fd, info = open_regular_fd(path)
    try:
        assert info.st_size == 3000 and os.get_blocking(fd)
        assert os.read(fd, 4096) == b"x" * 3000
    finally:
        os.close(fd)


def test_a_missing_file_is_the_os_error_the_caller_words(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_regular_fd(tmp_path / "absent")
    with pytest.raises(FileNotFoundError):
        open_regular_fd(tmp_path / "absent", stat_first=False)


@settings(max_examples=60, deadline=None)
@given(
    content=st.binary(max_size=300),
    limit=st.integers(0, 400),
    start=st.integers(0, 300),
    shrink=st.integers(0, 300),
)
def test_a_bounded_read_is_read_of_the_bound_plus_one_even_if_the_file_grew(
    tmp_path_factory: pytest.TempPathFactory, content: bytes, limit: int, start: int, shrink: int
) -> None:
    path = tmp_path_factory.mktemp("bounded") / "file"
    path.write_bytes(content)
    start = min(start, len(content))
    real = os.fstat

    def stale(fd: int) -> os.stat_result:  # the size before the file grew by ``shrink``
        fields = list(real(fd))
        fields[6] = max(0, fields[6] - shrink)  # st_size
        return os.stat_result(fields)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_files_open.os, "fstat", stale)
        with open(path, "rb") as handle:
            handle.seek(start)
            assert read_bounded(handle, limit) == content[start : start + limit + 1]


def test_a_bounded_read_allocates_what_the_file_holds_not_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "small"
    path.write_bytes(b"x" * 1000)
    tracemalloc.start()
    try:
        with open(path, "rb") as handle:
            data = read_bounded(handle, 1 << 30)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert data == b"x" * 1000
    assert peak < 1 << 20  # read(bound + 1) allocates the gibibyte before it reads
