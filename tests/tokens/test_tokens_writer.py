"""TokenWriter: what it writes reads back through TokenCorpus; crashes leave no corpus behind."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.tokens import TokenCorpus, TokenSequences, TokenWriter
from detsamplers.tokens._writer import MANIFEST, read_manifest

documents = st.lists(
    st.lists(st.integers(1, 70_000), min_size=0, max_size=30), min_size=1, max_size=25
).filter(lambda docs: any(docs))


def names(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


@settings(max_examples=60, deadline=None)
@given(
    docs=documents,
    eod=st.booleans(),
    limit=st.one_of(st.none(), st.integers(1, 80)),
    as_numpy=st.booleans(),
)
def test_every_written_document_reads_back_in_order_by_its_lengths_and_by_its_eod_id(
    docs: list[list[int]], eod: bool, limit: int | None, as_numpy: bool
) -> None:
    folder = Path(tempfile.mkdtemp())
    with TokenWriter(folder, vocab_size=70_001, eod_id=0 if eod else None,
                     max_tokens_per_file=limit) as writer:  # fmt: skip
        for doc in docs:
            writer.write(np.array(doc, dtype=np.int64) if as_numpy else doc)
    expected = [[*doc, 0] if eod else doc for doc in docs if eod or doc]
    corpus = writer.corpus()
    assert writer.dtype == "uint32"  # vocab_size 70,001 does not fit uint16
    assert corpus.num_documents == writer.num_documents == len(expected)
    assert [corpus.document(d).tolist() for d in range(corpus.num_documents)] == expected
    assert corpus.num_tokens == writer.num_tokens == sum(map(len, expected))
    if eod:  # the same .bin files read by the end-of-document id, without the sidecars
        by_eod = TokenCorpus(corpus.paths, dtype="uint32", eod_id=0, cache=False)
        assert [by_eod.document(d).tolist() for d in range(by_eod.num_documents)] == expected
    if limit is not None:  # no file over the limit but a document alone in its own
        for path in corpus.paths:
            size = os.stat(path).st_size // 4
            lengths = np.load(path.with_name(path.stem + ".lengths.npy"))
            assert size <= limit or len(lengths) == 1
    else:
        assert len(corpus.paths) == 1
    assert not [name for name in names(folder) if name.endswith(".tmp")]


def test_the_dtype_is_chosen_from_vocab_size_and_checked_against_it(tmp_path: Path) -> None:
    assert TokenWriter(tmp_path / "a", vocab_size=65_536).dtype == "uint16"
    assert TokenWriter(tmp_path / "b", vocab_size=65_537).dtype == "uint32"
    assert TokenWriter(tmp_path / "c").dtype == "uint32"
    assert TokenWriter(tmp_path / "d", dtype="uint16").dtype == "uint16"
    with pytest.raises(ValueError, match=r"dtype should hold every id below vocab_size=70000"):
        TokenWriter(tmp_path / "e", dtype="uint16", vocab_size=70_000)
    with pytest.raises(ValueError, match=r"dtype should be one of uint16, uint32 .*dtype='int8'"):
        TokenWriter(tmp_path / "f", dtype="int8")
    with pytest.raises(ValueError, match=r"eod_id should fit dtype uint16 .* eod_id=70000"):
        TokenWriter(tmp_path / "g", dtype="uint16", eod_id=70_000)
    with pytest.raises(
        ValueError, match=r"eod_id should be below vocab_size=10, but got eod_id=10"
    ):
        TokenWriter(tmp_path / "h", vocab_size=10, eod_id=10)
    with pytest.raises(TypeError, match=r"max_tokens_per_file should be"):
        TokenWriter(tmp_path / "i", max_tokens_per_file=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"max_tokens_per_file should be"):
        TokenWriter(tmp_path / "j", max_tokens_per_file=0)


@pytest.mark.parametrize(
    ("options", "document", "error", "match"),
    [
        (
            {"dtype": "uint16"},
            [1, 65_536],
            ValueError,
            r"document 1 should hold ids in \[0, 65536\) "
            r"for dtype uint16 \(at most 65535\), but holds 65536",
        ),
        (
            {"vocab_size": 100},
            [5, 100],
            ValueError,
            r"document 1 .* for vocab_size=100, but holds 100",
        ),
        ({}, [3, -1], ValueError, r"document 1 should hold ids in \[0, 4294967296\) .* holds -1"),
        (
            {},
            [1.0, 2.0],
            TypeError,
            r"document 1 should be a 1-D sequence of int token ids, but got "
            r"an array of dtype float64",
        ),
        ({}, ["a"], TypeError, r"document 1 should be a 1-D sequence of int .* dtype <U1"),
        ({}, [[1, 2]], TypeError, r"document 1 should be a 1-D .* shape \(1, 2\)"),
        ({}, [True, False], TypeError, r"dtype bool"),
        ({}, [2**70], ValueError, r"document 1 should hold ids in \[0, 4294967296\)"),
        (
            {"eod_id": 0},
            [4, 0, 5],
            ValueError,
            r"document 1 should not hold eod_id=0 before its "
            r"end, but token 1 is it",
        ),
    ],
)
def test_a_document_whose_ids_do_not_fit_is_an_error_naming_it_and_the_id(
    tmp_path: Path, options: dict[str, int | str], document: list, error: type, match: str
) -> None:
    writer = TokenWriter(tmp_path, **options)  # type: ignore[arg-type]
    writer.write([7])
    with pytest.raises(error, match=match):
        writer.write(document)
    writer.write([8])  # the bad document left nothing behind
    writer.close()
    assert [writer.corpus().document(d).tolist()[0] for d in range(2)] == [7, 8]


def test_a_document_ending_with_the_eod_id_gets_no_second_one_and_an_empty_one_is_just_eod(
    tmp_path: Path,
) -> None:
    with TokenWriter(tmp_path, eod_id=9, vocab_size=10) as writer:
        writer.write([1, 2, 9])
        writer.write([])
        writer.write([3])
    corpus = writer.corpus()
    assert [corpus.document(d).tolist() for d in range(3)] == [[1, 2, 9], [9], [3, 9]]


def test_empty_documents_are_skipped_without_an_eod_id_and_a_writer_of_none_refuses_to_close(
    tmp_path: Path,
) -> None:
    with TokenWriter(tmp_path / "a") as writer:
        writer.write([])
        writer.write([4, 5])
        writer.write(np.zeros(0, dtype=np.int64))
    assert writer.num_documents == 1
    with (
        pytest.raises(ValueError, match=r"should get at least one non-empty document before close"),
        TokenWriter(tmp_path / "b") as empty,
    ):
        empty.write([])
    assert names(tmp_path / "b") == []


def test_an_exception_inside_the_block_removes_every_file_and_writes_no_manifest(
    tmp_path: Path,
) -> None:
    writer = TokenWriter(tmp_path, max_tokens_per_file=2)
    with pytest.raises(RuntimeError, match="stop"), writer:
        for doc in ([1, 2], [3, 4], [5]):
            writer.write(doc)
        raise RuntimeError("stop")
    assert names(tmp_path) == []
    with pytest.raises(ValueError, match=r"TokenWriter for .* should be open, but it is closed"):
        writer.write([1])


def test_a_build_that_dies_before_close_leaves_only_temporary_files_and_no_corpus(
    tmp_path: Path,
) -> None:
    writer = TokenWriter(tmp_path, max_tokens_per_file=2)
    for doc in ([1, 2], [3, 4], [5]):
        writer.write(doc)
    writer._handle.flush()  # what a killed process leaves: its files, never renamed
    left = names(tmp_path)
    assert left and all(name.startswith(".part-") and name.endswith(".tmp") for name in left)
    assert MANIFEST not in left
    with pytest.raises(ValueError, match=r"corpus manifest .* cannot be read"):
        read_manifest(tmp_path)
    writer.abort()
    assert names(tmp_path) == []


def test_a_folder_with_a_complete_corpus_is_refused_unless_overwrite_which_replaces_it_whole(
    tmp_path: Path,
) -> None:
    with TokenWriter(tmp_path, max_tokens_per_file=1) as writer:
        for doc in ([1], [2], [3]):
            writer.write(doc)
    assert len(writer.corpus().paths) == 3
    with pytest.raises(ValueError, match=r"folder .* should not hold a complete corpus, but it has "
                       r"corpus.json; pass overwrite=True"):  # fmt: skip
        TokenWriter(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    with TokenWriter(tmp_path, overwrite=True) as writer:
        writer.write([7, 8])
    assert names(tmp_path) == [MANIFEST, "notes.txt", "part-00000.bin", "part-00000.lengths.npy"]
    assert writer.corpus().document(0).tolist() == [7, 8]
    with pytest.raises(ValueError, match=r"folder should be a folder, but .*notes.txt is a file"):
        TokenWriter(tmp_path / "notes.txt")


def test_an_overwrite_removes_the_pack_indexes_cached_beside_the_old_files(
    tmp_path: Path,
) -> None:
    with TokenWriter(tmp_path, eod_id=0) as writer:
        for doc in ([1, 2, 0], [3, 0], [4, 5, 6, 0]):
            writer.write(doc)
    for window in (1, 2):  # two settings, two cached indexes
        TokenSequences(writer.corpus(), 3, mode="pack", window=window)
    assert len(list(tmp_path.glob("part-00000.bin.pack-*.npy"))) == 2
    (tmp_path / "notes.pack-1.npy").write_bytes(b"mine")  # not a cache of the corpus
    with TokenWriter(tmp_path, eod_id=0, overwrite=True) as writer:
        writer.write([7, 8, 0])
    assert names(tmp_path) == [
        MANIFEST, "notes.pack-1.npy", "part-00000.bin", "part-00000.lengths.npy"
    ]  # fmt: skip
    sequences = TokenSequences(writer.corpus(), 3, mode="pack", window=1)
    assert sequences.stats()["sequences"] == 1
    assert len(list(tmp_path.glob("part-00000.bin.pack-*.npy"))) == 1


def test_the_files_get_the_mode_of_a_plain_open_and_the_manifest_counts_them(
    tmp_path: Path,
) -> None:
    mask = os.umask(0o022)
    try:
        with TokenWriter(tmp_path, vocab_size=50) as writer:
            writer.write([1, 2, 3])
    finally:
        os.umask(mask)
    for name in names(tmp_path):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o644, name
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["num_tokens"] == 3 and manifest["files"][0]["num_documents"] == 1
    assert manifest["dtype"] == "uint16" and manifest["vocab_size"] == 50
    assert np.load(tmp_path / "part-00000.lengths.npy").tolist() == [3]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("not json", r"corpus manifest .*corpus.json should be JSON"),
        ("[]", r"should be a detsamplers-tokens manifest"),
        ('{"format": "detsamplers-tokens", "dtype": "int8", "files": []}', r"names 'int8'"),
        (
            '{"format": "detsamplers-tokens", "dtype": "uint16", "files": 3}',
            r"'files' of type list",
        ),
        ('{"format": "detsamplers-tokens", "dtype": "uint16", "files": []}', r"lists none"),
        (
            '{"format": "detsamplers-tokens", "dtype": "uint16", "files": [{"tokens": "../x.bin", '
            '"lengths": "x.npy"}]}',
            r"should name files inside its folder, but names '../x.bin'",
        ),
        (
            '{"format": "detsamplers-tokens", "dtype": "uint16", "eod_id": "0", "files": []}',
            r"'eod_id' of type int",
        ),
        ("[" * 100_000, r"should be JSON"),
    ],
)
def test_a_hostile_manifest_is_an_error_naming_it(tmp_path: Path, content: str, match: str) -> None:
    (tmp_path / MANIFEST).write_text(content)
    with pytest.raises(ValueError, match=match):
        read_manifest(tmp_path)


def test_a_manifest_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / MANIFEST)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            read_manifest(tmp_path)
        except ValueError as error:
            errors.append(error)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "reading a FIFO manifest blocked"
    assert "should be a regular file" in str(errors[0])
