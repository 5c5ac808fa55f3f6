"""TokenCorpus: the formats it reads, its document index, and bad or hostile files."""

from __future__ import annotations

import io
import os
import pickle
import threading
from pathlib import Path

import numpy as np
import pytest

from detsamplers.tokens import TokenCorpus, TokenSequences


def test_npy_of_each_integer_dtype_and_bin_of_uint16_and_uint32_read_the_same_documents(
    tmp_path: Path,
) -> None:
    tokens = np.array([3, 4, 0, 5, 0, 6, 7, 8, 0], dtype=np.int64)
    corpora = []
    for dtype in ("uint16", "uint32", "int32", "int64"):
        np.save(tmp_path / f"t_{dtype}.npy", tokens.astype(dtype))
        corpora.append(TokenCorpus(tmp_path / f"t_{dtype}.npy", eod_id=0))
    for dtype in ("uint16", "uint32"):
        tokens.astype(dtype).tofile(tmp_path / f"t_{dtype}.bin")
        corpora.append(TokenCorpus(tmp_path / f"t_{dtype}.bin", dtype=dtype, eod_id=0))
    for corpus in corpora:
        assert (corpus.num_tokens, corpus.num_documents) == (9, 3)
        assert [corpus.document(d).tolist() for d in range(3)] == [[3, 4, 0], [5, 0], [6, 7, 8, 0]]


def test_several_files_form_one_corpus_in_order_and_each_file_ends_a_document(
    tmp_path: Path,
) -> None:
    np.save(tmp_path / "a.npy", np.array([1, 0, 2, 2], dtype=np.uint16))  # no final EOD
    np.save(tmp_path / "b.npy", np.array([3, 0], dtype=np.uint16))
    corpus = TokenCorpus([tmp_path / "a.npy", str(tmp_path / "b.npy")], eod_id=0)
    assert [corpus.document(d).tolist() for d in range(3)] == [[1, 0], [2, 2], [3, 0]]
    assert corpus.read(1, 6).tolist() == [0, 2, 2, 3, 0]


def test_lengths_sidecars_delimit_documents_without_a_separator(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.arange(1, 8, dtype=np.uint32))
    np.save(tmp_path / "a.len.npy", np.array([2, 4, 1], dtype=np.int32))
    corpus = TokenCorpus([tmp_path / "a.npy"], lengths=[tmp_path / "a.len.npy"])
    assert [corpus.document(d).tolist() for d in range(3)] == [[1, 2], [3, 4, 5, 6], [7]]


def test_the_eod_index_is_cached_beside_the_file_and_reused_until_the_file_changes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.bin"
    np.array([1, 0, 2, 0], dtype=np.uint16).tofile(path)
    TokenCorpus(path, dtype="uint16", eod_id=0)
    cache = tmp_path / "t.bin.eod0.npy"
    assert np.load(cache, allow_pickle=False).tolist() == [2, 4]
    # A cache that disagrees with the file (a stale or forged one) is rebuilt, not trusted.
    np.save(cache, np.array([1, 4], dtype=np.int64))
    os.utime(cache, ns=(os.stat(path).st_mtime_ns + 10**9,) * 2)
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0)
    assert corpus.document(0).tolist() == [1]  # a cache that passes its checks is used
    np.array([1, 0, 2, 0, 3, 0], dtype=np.uint16).tofile(path)
    os.utime(path, ns=(os.stat(cache).st_mtime_ns + 10**9,) * 2)
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0)
    assert corpus.num_documents == 3 and corpus.document(0).tolist() == [1, 0]
    np.save(cache, np.array([3, 2], dtype=np.int64))  # not increasing: rebuilt
    os.utime(cache, ns=(os.stat(path).st_mtime_ns + 10**9,) * 2)
    assert TokenCorpus(path, dtype="uint16", eod_id=0).num_documents == 3


def test_an_index_that_cannot_be_written_stays_in_memory_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.bin"
    np.array([1, 0, 2, 0], dtype=np.uint16).tofile(path)
    (tmp_path / "t.bin.eod0.npy").mkdir()  # the cache's place is taken: the write fails
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0)
    assert corpus.num_documents == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.bin", "t.bin.eod0.npy"]


def test_a_pickled_corpus_maps_its_files_again_instead_of_copying_them(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    np.arange(1, 10_001, dtype=np.uint16).tofile(path)
    corpus = TokenCorpus(path, dtype="uint16", lengths=[_lengths(tmp_path, [10_000])])
    data = pickle.dumps(TokenSequences(corpus, 7))
    assert len(data) < 4_000  # 20 kB of tokens are not in it
    assert pickle.loads(data)[3]["input_ids"].tolist() == list(range(25, 32))


def _lengths(folder: Path, lengths: list[int]) -> Path:
    path = folder / "lengths.npy"
    np.save(path, np.array(lengths, dtype=np.int64))
    return path


# -- bad input -----------------------------------------------------------------------------


def test_a_bin_whose_size_is_not_a_multiple_of_its_dtype_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "odd.bin"
    path.write_bytes(b"\x01\x00\x00")
    with pytest.raises(ValueError, match=r"token file .*odd.bin should hold whole uint16 tokens"):
        TokenCorpus(path, dtype="uint16", eod_id=0)
    with pytest.raises(ValueError, match=r"dtype should be given for the raw token file"):
        TokenCorpus(path, eod_id=0)
    with pytest.raises(
        ValueError, match=r"dtype should be one of uint16, uint32 .* got dtype='int8'"
    ):
        TokenCorpus(path, dtype="int8", eod_id=0)


def test_token_ids_at_or_above_vocab_size_fail_the_read_naming_file_and_offset(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.array([1, 2, 0, 50, 0], dtype=np.uint16))
    corpus = TokenCorpus(path, eod_id=0, vocab_size=50)
    assert corpus.document(0).tolist() == [1, 2, 0]  # checked lazily, per read
    with pytest.raises(
        ValueError, match=r"t.npy should hold token ids in \[0, vocab_size=50\), but token 3 is 50"
    ):
        corpus.document(1)
    with pytest.raises(ValueError, match=r"token 3 is 50"):
        TokenSequences(corpus, 4)[0]
    with pytest.raises(ValueError, match="eod_id should be below vocab_size=50, but got eod_id=60"):
        TokenCorpus(path, eod_id=60, vocab_size=50)


def test_lengths_that_do_not_sum_to_the_file_or_are_empty_are_refused_naming_the_sidecar(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(1, 6, dtype=np.uint16))
    with pytest.raises(
        ValueError,
        match=r"lengths.npy should sum to the 5 tokens of .*t.npy, but its 2 lengths sum to 4",
    ):
        TokenCorpus(path, lengths=[_lengths(tmp_path, [1, 3])])
    with pytest.raises(
        ValueError, match=r"should hold lengths of at least 1 token, but document 1 has length 0"
    ):
        TokenCorpus(path, lengths=[_lengths(tmp_path, [5, 0])])
    with pytest.raises(
        ValueError, match="lengths should name one sidecar per token file, but got 2 for 1"
    ):
        TokenCorpus(path, lengths=[tmp_path / "x.npy", tmp_path / "y.npy"])
    with pytest.raises(
        ValueError, match="eod_id and lengths should be given one, not both or neither"
    ):
        TokenCorpus(path)


def test_an_eod_id_that_never_occurs_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.array([1, 2, 3], dtype=np.uint16))
    with pytest.raises(
        ValueError,
        match=r"eod_id=9 should end the documents of .*t.npy, but it never occurs in its 3 tokens",
    ):
        TokenCorpus(path, eod_id=9)


def test_seq_len_below_one_and_other_bad_arguments_are_refused_naming_them(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.array([1, 0, 2, 0], dtype=np.uint16))
    corpus = TokenCorpus(path, eod_id=0)
    with pytest.raises(
        ValueError, match="seq_len should be a positive integer value, but got seq_len=0"
    ):
        TokenSequences(corpus, 0)
    with pytest.raises(
        TypeError, match="seq_len should be a positive integer value, but got seq_len=True"
    ):
        TokenSequences(corpus, True)
    with pytest.raises(
        ValueError, match="mode should be one of 'chunk', 'concat', 'pack', but got mode='packed'"
    ):
        TokenSequences(corpus, 2, mode="packed")
    with pytest.raises(
        ValueError,
        match=r"seq_len should leave at least one sequence of seq_len \+ 1 tokens, "
        "but got seq_len=4",
    ):
        TokenSequences(corpus, 4)
    with pytest.raises(
        TypeError, match="corpus should be a TokenCorpus, but got corpus of type str"
    ):
        TokenSequences("t.npy", 2)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match="block_documents should be a positive integer value, but got block_"
    ):
        TokenSequences(corpus, 2, mode="concat", block_documents=0)
    with pytest.raises(TypeError, match="eod_id should be an integer value, but got eod_id='0'"):
        TokenCorpus(path, eod_id="0")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="paths should be a path or a non-empty list of paths"):
        TokenCorpus([], eod_id=0)
    with pytest.raises(IndexError, match=r"index should be in \[0, 1\), but got index=1"):
        TokenSequences(corpus, 2)[1]
    with pytest.raises(ValueError, match=r"token file .*t.txt should end in .npy or .bin"):
        (tmp_path / "t.txt").write_text("1 2")
        TokenCorpus(tmp_path / "t.txt", eod_id=0)


def test_npy_of_object_dtype_or_a_pickle_is_refused_without_loading_it(tmp_path: Path) -> None:
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(
        ValueError,
        match=r"objects.npy should hold one of the dtypes .* but its header says dtype object",
    ):
        TokenCorpus(objects, eod_id=0)
    pickled = tmp_path / "pickled.npy"
    pickled.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(
        ValueError, match=r"pickled.npy should be a .npy array file, but its header cannot be read"
    ):
        TokenCorpus(pickled, eod_id=0)
    floats = tmp_path / "floats.npy"
    np.save(floats, np.zeros(3))
    with pytest.raises(ValueError, match="but its header says dtype float64"):
        TokenCorpus(floats, eod_id=0)
    matrix = tmp_path / "matrix.npy"
    np.save(matrix, np.zeros((2, 2), dtype=np.uint16))
    with pytest.raises(
        ValueError, match=r"should hold a 1-D array, but its header says shape \(2, 2\)"
    ):
        TokenCorpus(matrix, eod_id=0)


def test_a_header_that_lies_about_the_size_is_refused_before_any_allocation(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.array([1, 0, 2, 0], dtype=np.uint16))
    data = path.read_bytes()[-8:]
    lying = tmp_path / "lying.npy"
    # Claims 10**15 tokens (2 PB): refused by the size check, never allocated or mapped.
    lying.write_bytes(_npy_header(10**15) + data)
    size = len(lying.read_bytes())
    with pytest.raises(
        ValueError,
        match=rf"lying.npy should be \d+ bytes as its header says \(1000000000000000 values "
        rf"of uint16 after a \d+-byte header\), but it is {size} bytes",
    ):
        TokenCorpus(lying, eod_id=0)
    short = tmp_path / "short.npy"
    short.write_bytes(_npy_header(2) + data)  # claims fewer: the trailing bytes are refused
    with pytest.raises(
        ValueError, match=r"short.npy should be \d+ bytes as its header says \(2 values"
    ):
        TokenCorpus(short, eod_id=0)


def _npy_header(count: int) -> bytes:
    """A .npy header (format 1.0) of ``count`` uint16 values."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": "<u2", "fortran_order": False, "shape": (count,)}
    )
    return buffer.getvalue()


def test_fifos_devices_and_folders_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "t.bin"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def open_it() -> None:
        try:
            TokenCorpus(fifo, dtype="uint16", eod_id=0)
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    thread = threading.Thread(target=open_it, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "opening a FIFO blocked"
    assert isinstance(outcome[0], ValueError)
    assert "should be a regular file, but it is a FIFO, device" in str(outcome[0])
    zero = tmp_path / "zero.bin"
    zero.symlink_to("/dev/zero")
    with pytest.raises(ValueError, match=r"zero.bin should be a regular file, but it is a FIFO"):
        TokenCorpus(zero, dtype="uint16", eod_id=0)
    (tmp_path / "folder.npy").mkdir()
    with pytest.raises(ValueError, match=r"folder.npy should be a regular file"):
        TokenCorpus(tmp_path / "folder.npy", eod_id=0)
    with pytest.raises(ValueError, match=r"missing.npy cannot be read: No such file"):
        TokenCorpus(tmp_path / "missing.npy", eod_id=0)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty.bin holds no tokens"):
        TokenCorpus(empty, dtype="uint16", eod_id=0)
