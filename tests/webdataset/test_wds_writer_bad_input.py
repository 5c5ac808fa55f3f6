"""ShardWriter arguments and samples that would lose or misname samples are refused up front.

One case per input under a 20 s alarm (tests/bad_input.py); nothing is written before the
refusal, and a key that is legal but unusual (a dot in a folder name) reads back as written.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from detsamplers.loader import WebDatasetSource
from tests.bad_input import alarm  # noqa: F401  # autouse: fails a case that hangs
from tests.helpers import take


def source(urls: str, **kwargs: Any) -> WebDatasetSource:
    return WebDatasetSource(urls, **{"seed": 0, "batch_size": 2, **kwargs})


def writer(folder: Path, pattern: str = "d-%d.tar", **kwargs: Any) -> Any:
    from detsamplers.loader import ShardWriter

    return ShardWriter(str(folder / pattern), **{"verbose": 0, **kwargs})


def written(folder: Path, *samples: Any) -> None:
    sink = writer(folder)
    try:
        for sample in samples:
            sink.write(sample)
    finally:
        sink.close()


def write_after_close(folder: Path) -> None:
    sink = writer(folder, maxcount=1)
    sink.write({"__key__": "a", "cls": 1})
    sink.write({"__key__": "b", "cls": 2})
    sink.close()
    sink.close()  # closing again does nothing
    sink.write({"__key__": "c", "cls": 3})


WRITER_CASES: dict[str, tuple[Callable[[Path], Any], type[Exception], str]] = {
    "maxcount is 0": (
        lambda f: writer(f, maxcount=0),
        ValueError,
        r"maxcount should be a positive integer value, but got maxcount=0",
    ),
    "maxcount is a bool": (
        lambda f: writer(f, maxcount=True),
        TypeError,
        r"maxcount should be a positive integer value, but got maxcount=True of type bool",
    ),
    "maxsize is negative": (
        lambda f: writer(f, maxsize=-1),
        ValueError,
        r"maxsize should be a positive number of bytes, but got maxsize=-1: every sample would "
        r"start a new shard and the first would stay empty; pass .* e.g. maxsize=1e9",
    ),
    "maxsize is 0": (
        lambda f: writer(f, maxsize=0),
        ValueError,
        r"maxsize should be a positive number of bytes, but got maxsize=0",
    ),
    "maxsize is a string": (
        lambda f: writer(f, maxsize="1e9"),
        TypeError,
        r"maxsize should be a positive number of bytes, but got maxsize='1e9' of type str",
    ),
    "start_shard is negative": (
        lambda f: writer(f, start_shard=-1),
        ValueError,
        r"start_shard should be a non-negative integer value, but got start_shard=-1",
    ),
    "a pattern without %d": (
        lambda f: writer(f, "data.tar"),
        ValueError,
        r"pattern should hold one integer format for the shard number, such as %06d in "
        r"'out/data-%06d.tar', but got pattern='.*data.tar': pattern % shard_number would fail",
    ),
    "a pattern in str.format style": (
        lambda f: writer(f, "data-{}.tar"),
        ValueError,
        r"would fail; webdataset formats the shard number with %, not str.format: write "
        r"'.*data-%06d.tar'",
    ),
    "a pattern whose format is escaped": (
        lambda f: writer(f, "data-%%d.tar"),
        ValueError,
        r"but got pattern='.*data-%%d.tar': pattern % shard_number would fail",
    ),
    "a pattern whose format drops the number": (
        lambda f: writer(f, "data-%.0s.tar"),
        ValueError,
        r"pattern % shard_number would give every shard the same file name",
    ),
    "a pattern with two formats": (
        lambda f: writer(f, "%d-%d.tar"),
        ValueError,
        r"pattern should hold one integer format .* would fail",
    ),
    "write() after close()": (
        write_after_close,
        ValueError,
        r"write\(\) after close\(\): this ShardWriter \(pattern='.*d-%d.tar'\) is closed; open "
        r"a new ShardWriter\(pattern, start_shard=2\) to go on with the next shard number",
    ),
    "a key with a dot": (
        lambda f: written(f, {"__key__": "img.001", "cls": 1}),
        ValueError,
        r"sample\['__key__'\] should not hold a dot in its last path component nor end with "
        r"'/', but got 'img.001': .* read back under the key 'img'; replace the dots, e.g. "
        r"key.replace\('.', '_'\)",
    ),
    "a key with dots in its last path component": (
        lambda f: written(f, {"__key__": "v1.0/img.a.b", "cls": 1}),
        ValueError,
        r"but got 'v1.0/img.a.b': .* read back under the key 'v1.0/img'",
    ),
    "a key ending with a slash": (
        lambda f: written(f, {"__key__": "dir/", "cls": 1}),
        ValueError,
        r"but got 'dir/': .* it would read back under no key",
    ),
    "a field name with a slash": (
        lambda f: written(f, {"__key__": "a", "seg/png": b"x"}),
        ValueError,
        r"sample field names should not hold '/' or a NUL byte, but sample 'a' has 'seg/png': "
        r"the member 'a.seg/png' would not read back",
    ),
    "a key that is not a string": (
        lambda f: written(f, {"__key__": 3, "cls": 1}),
        TypeError,
        r"sample\['__key__'\] should be a string, but got 3 of type int",
    ),
    "a sample that is not a dict": (
        lambda f: written(f, [("__key__", "a")]),
        TypeError,
        r"sample should be a dict with '__key__' and one entry per member, but got list",
    ),
}


@pytest.mark.parametrize("case", list(WRITER_CASES), ids=list(WRITER_CASES))
def test_shard_writer_arguments_that_would_lose_or_misname_samples_are_refused(
    tmp_path: Path, case: str
) -> None:
    call, kind, message = WRITER_CASES[case]
    with pytest.raises(kind, match=message):
        call(tmp_path)
    if "after close" not in case:  # refused before a sample was written
        keys = set()
        for shard in tmp_path.glob("*.tar"):
            with tarfile.open(shard) as archive:
                keys |= set(archive.getnames())
        assert keys == set()


def test_a_key_with_a_dot_in_a_folder_name_reads_back_as_written(tmp_path: Path) -> None:
    written(tmp_path, {"__key__": "v1.0/img", "cls": 7}, {"__key__": "v1.0/img2", "cls": 8})
    url = str(tmp_path / "d-0.tar")
    (batch,) = take(source(url, shuffle_shards=False, collate_fn=list, repeat=False), 1)
    assert [sample["__key__"] for sample in batch] == ["v1.0/img", "v1.0/img2"]
