"""Open only a regular file (NOTE [ regular files only ]): never a FIFO, a device or a folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from detsamplers._files_open import NotRegularFileError, file_kind, open_regular_fd, stat_regular


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
