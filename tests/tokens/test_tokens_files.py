"""Token files opened as data (detsamplers/tokens/_files.py, NOTE [ token files ]).

Laws: a ``.npy`` header is read as the layout numpy wrote (dtype, data offset, count) for
every allowed dtype, length and format version, and any file size other than the one the
header implies is refused naming both; a raw ``.bin`` of ``size`` bytes holds
``size / itemsize`` tokens or is refused. Hostile bytes where a header should be raise a
``ValueError`` naming the file, never another exception.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from detsamplers.tokens._files import (
    BIN_DTYPES,
    NPY_DTYPES,
    bin_count,
    check_path,
    npy_layout,
    open_bin,
    open_npy,
    open_tokens,
)


def npy_bytes(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version)
    return buffer.getvalue()


@given(
    dtype=st.sampled_from(NPY_DTYPES),
    count=st.integers(0, 300),
    version=st.sampled_from([None, (1, 0), (2, 0), (3, 0)]),
)
def test_the_layout_of_a_saved_npy_is_its_dtype_header_length_and_count(
    dtype: str, count: int, version: tuple[int, int] | None
) -> None:
    data = npy_bytes(np.arange(count, dtype=dtype), version)
    kind, offset, got = npy_layout(io.BytesIO(data), len(data), "t.npy", NPY_DTYPES, "token file")
    assert (kind, got) == (np.dtype(dtype), count)
    assert offset + count * kind.itemsize == len(data)
    values = np.frombuffer(data, dtype=kind, offset=offset, count=count)
    assert values.tolist() == list(range(count))


@given(
    dtype=st.sampled_from(NPY_DTYPES),
    count=st.integers(0, 50),
    delta=st.integers(-40, 40).filter(bool),
)
def test_a_file_size_other_than_the_header_implies_is_refused_naming_both_sizes(
    dtype: str, count: int, delta: int
) -> None:
    data = npy_bytes(np.zeros(count, dtype=dtype))
    size = len(data) + delta
    with pytest.raises(
        ValueError,
        match=rf"^token file t\.npy should be {len(data)} bytes as its header says .* but it is "
        rf"{size} bytes; the file is truncated or its header lies$",
    ):
        npy_layout(io.BytesIO(data), size, "t.npy", NPY_DTYPES, "token file")


@given(garbage=st.binary(max_size=300), keep=st.integers(0, 20))
def test_hostile_bytes_where_a_header_should_be_raise_only_a_value_error_naming_the_file(
    garbage: bytes, keep: int
) -> None:
    valid = npy_bytes(np.arange(4, dtype=np.uint16))
    for data in (garbage, valid[:keep] + garbage):
        try:
            npy_layout(io.BytesIO(data), len(data), "evil.npy", NPY_DTYPES, "token file")
        except ValueError as error:
            assert str(error).startswith("token file evil.npy should ")
            assert "; " in str(error)  # the fix follows the constraint


def test_a_header_longer_than_the_limit_is_refused_unread() -> None:
    header = b"{'descr': '<u2', 'fortran_order': False, 'shape': (4,), " + b" " * 20_000 + b"}\n"
    data = b"\x93NUMPY\x02\x00" + len(header).to_bytes(4, "little") + header
    with pytest.raises(ValueError, match=r"^token file big\.npy should be a \.npy array file"):
        npy_layout(io.BytesIO(data), len(data), "big.npy", NPY_DTYPES, "token file")


@pytest.mark.parametrize(
    ("array", "match"),
    [
        (np.zeros(3, dtype=np.float32), r"should hold one of the dtypes uint16, uint32, int32, "),
        (np.zeros(3, dtype=np.int8), r"but its header says dtype int8; object arrays are never"),
        (np.array([1, "a"], dtype=object), r"header says dtype object; object arrays are never"),
        (np.zeros((2, 3), dtype=np.uint16), r"should hold a 1-D array, but its header says shape"),
    ],
)
def test_a_dtype_not_allowed_or_a_shape_not_1d_is_refused_naming_what_the_header_says(
    array: np.ndarray, match: str
) -> None:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    data = buffer.getvalue()
    with pytest.raises(ValueError, match=rf"^corpus ids x\.npy .*{match}"):
        npy_layout(io.BytesIO(data), len(data), "x.npy", NPY_DTYPES, "corpus ids")


@given(dtype=st.sampled_from(BIN_DTYPES), size=st.integers(0, 10**12))
def test_a_bin_of_size_bytes_holds_size_over_itemsize_tokens_or_is_refused(
    dtype: str, size: int
) -> None:
    itemsize = np.dtype(dtype).itemsize
    if size % itemsize == 0:
        assert bin_count(size, "t.bin", dtype) == size // itemsize
    else:
        with pytest.raises(ValueError, match=rf"^token file t\.bin should hold whole {dtype} "):
            bin_count(size, "t.bin", dtype)


@given(values=st.lists(st.integers(0, 2**16 - 1), min_size=1, max_size=100))
def test_files_written_by_numpy_read_back_memory_mapped_and_equal(
    tmp_path_factory: pytest.TempPathFactory, values: list[int]
) -> None:
    folder = tmp_path_factory.mktemp("tokens")
    np.array(values, dtype=np.uint16).tofile(folder / "t.bin")
    np.save(folder / "t.npy", np.array(values, dtype=np.uint32))
    for mapped in (open_tokens(folder / "t.bin", "uint16"), open_tokens(folder / "t.npy", None)):
        assert isinstance(mapped, np.memmap)
        assert mapped.tolist() == values


def test_an_empty_file_is_refused_naming_it_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "e.bin").write_bytes(b"")
    np.save(tmp_path / "e.npy", np.zeros(0, dtype=np.uint16))
    for path in (tmp_path / "e.bin", tmp_path / "e.npy"):
        with pytest.raises(ValueError, match=r"holds no tokens; remove it from the corpus$"):
            open_tokens(path, "uint16")


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^token file .*gone\.bin cannot be read: "):
        open_bin(tmp_path / "gone.bin", "uint16")
    with pytest.raises(ValueError, match=r"^token file .*gone\.npy cannot be read: "):
        open_npy(tmp_path / "gone.npy")


def test_a_bin_without_dtype_or_an_unknown_suffix_is_refused_naming_the_fix(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match=r"^dtype should be given for the raw token file .* "):
        open_tokens(tmp_path / "t.bin", None)
    with pytest.raises(ValueError, match=r"should end in \.npy or \.bin .* it ends in '\.txt'"):
        open_tokens(tmp_path / "t.txt", "uint16")


def test_check_path_takes_str_and_path_and_names_the_parameter_otherwise() -> None:
    assert check_path("a/b.npy", "path") == Path("a/b.npy")
    assert check_path(Path("c.bin"), "path") == Path("c.bin")
    with pytest.raises(
        TypeError, match=r"^files should be a path \(str or pathlib\.Path\), but got files=3 of "
    ):
        check_path(3, "files")
