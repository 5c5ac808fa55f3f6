"""A ``.npy`` header's parse kept by its bytes (NOTE [ token files ]): same answers, every check."""

from __future__ import annotations

import io
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from detsamplers.tokens import _files
from detsamplers.tokens._files import NPY_DTYPES, npy_layout


def npy_bytes(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version)
    return buffer.getvalue()


def outcome(data: bytes, size: int, allowed: tuple[str, ...] = NPY_DTYPES) -> Any:
    """What ``npy_layout`` answers for ``data``: the layout, or the error's text."""
    try:
        kind, offset, count = npy_layout(io.BytesIO(data), size, "t.npy", allowed, "token file")
    except ValueError as error:  # numpy's text may name an object by its address: not compared
        return re.sub(r" at 0x[0-9a-f]+", "", str(error))
    return str(kind), offset, count


@given(
    dtype=st.sampled_from(NPY_DTYPES),
    count=st.integers(0, 40),
    version=st.sampled_from([None, (1, 0), (2, 0), (3, 0)]),
    delta=st.integers(-3, 3),
    garbage=st.binary(max_size=40),
    cut=st.integers(0, 140),
)
def test_a_header_read_again_gives_what_its_first_parse_gave_valid_cut_or_hostile(
    dtype: str,
    count: int,
    version: tuple[int, int] | None,
    delta: int,
    garbage: bytes,
    cut: int,
) -> None:
    valid = npy_bytes(np.arange(count, dtype=dtype), version)
    for data in (valid, valid[:cut] + garbage, garbage + valid):
        _files._PARSED.clear()
        cold = [outcome(data, len(data) + d) for d in (0, delta)]
        warm = [outcome(data, len(data) + d) for d in (0, delta)]
        assert warm == cold


def test_a_reopened_header_is_parsed_once_and_its_size_and_dtype_still_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    real = _files._parse_header

    def counted(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(_files, "_parse_header", counted)
    _files._PARSED.clear()
    data = npy_bytes(np.arange(5, dtype=np.uint32))
    assert outcome(data, len(data)) == ("uint32", 128, 5)
    assert outcome(data, len(data)) == ("uint32", 128, 5)
    assert len(calls) == 1
    with pytest.raises(ValueError, match=r"should be 148 bytes as its header says .* but it is "
                       r"146 bytes; the file is truncated or its header lies$"):  # fmt: skip
        npy_layout(io.BytesIO(data), len(data) - 2, "t.npy", NPY_DTYPES, "token file")
    with pytest.raises(ValueError, match=r"should hold one of the dtypes uint16, but its header "
                       r"says dtype uint32"):  # fmt: skip
        npy_layout(io.BytesIO(data), len(data), "t.npy", ("uint16",), "token file")
    assert len(calls) == 1
    # A 2-D header is refused at every open, never kept.
    flat = npy_bytes(np.zeros((2, 2), dtype=np.uint16))
    for _ in range(2):
        assert "should hold a 1-D array" in outcome(flat, len(flat))
    assert len(calls) == 3


@pytest.mark.parametrize("version", [1, 2])
def test_a_header_left_open_is_refused_naming_the_file_not_by_tokenizes_error(version: int) -> None:
    # numpy parses a header it cannot read again as a Python 2 one, by tokenize, whose
    # TokenError (not a ValueError) escaped an open (found by the law above, unseeded).
    text = b"{'descr': '<u2', 'fortran_order': False, 'shape': (3,"
    width = 2 if version == 1 else 4
    text += b" " * (64 - 8 - width - len(text) - 1) + b"\n"
    data = b"\x93NUMPY" + bytes([version, 0]) + len(text).to_bytes(width, "little") + text
    data += bytes(6)
    with pytest.raises(ValueError, match=r"^token file t\.npy should be a \.npy array file, but "):
        npy_layout(io.BytesIO(data), len(data), "t.npy", NPY_DTYPES, "token file")
