"""Megatron-Core's .bin/.idx pairs as a TokenCorpus (NOTE [ megatron files ]).

The compatibility tests write corpora with megatron-core's own ``IndexedDatasetBuilder``
and read them back with its ``IndexedDataset`` (megatron-core is in the ``dev`` extra);
the reference writer below follows the format as the NOTE describes it, and a test shows
it writes the builder's bytes exactly.
"""

from __future__ import annotations

import itertools
import os
import pickle
import struct
import tempfile
import threading
import tracemalloc
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from detsamplers.loader import DataLoader
from detsamplers.testing import Config, check_resume
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens

CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint16": 8}

#: A document: its sequences, each a list of token ids (sequences may be empty, documents not).
documents = st.lists(
    st.lists(st.lists(st.integers(0, 120), max_size=6), min_size=1, max_size=3).filter(
        lambda doc: sum(len(seq) for seq in doc) > 0
    ),
    min_size=1,
    max_size=12,
)


def idx_bytes(
    code: int,
    lengths: list[int],
    pointers: list[int],
    indices: list[int],
    *,
    counts: tuple[int, int] | None = None,
    magic: bytes = b"MMIDIDX\x00\x00",
    version: int = 1,
    modes: bool = False,
) -> bytes:
    """An .idx as the NOTE lays it out, the counts taken from the arrays unless given."""
    sequences, indexes = counts if counts is not None else (len(lengths), len(indices))
    return (
        magic
        + struct.pack("<QBQQ", version, code, sequences, indexes)
        + np.array(lengths, "<i4").tobytes()
        + np.array(pointers, "<i8").tobytes()
        + np.array(indices, "<i8").tobytes()
        + (bytes(len(lengths)) if modes else b"")
    )


def write_pair(
    folder: Path, name: str, docs: list[list[list[int]]], dtype: str, modes: bool = False
) -> Path:
    """Our reference writer: ``docs`` as ``name.bin`` and ``name.idx``; the ``.idx`` path."""
    sequences = [seq for doc in docs for seq in doc]
    lengths = np.array([len(seq) for seq in sequences], dtype=np.int64)
    pointers = (np.cumsum(lengths) - lengths) * np.dtype(dtype).itemsize
    indices = np.cumsum([0] + [len(doc) for doc in docs])
    np.array([t for seq in sequences for t in seq], dtype=dtype).tofile(folder / f"{name}.bin")
    idx = folder / f"{name}.idx"
    idx.write_bytes(
        idx_bytes(CODES[dtype], lengths.tolist(), pointers.tolist(), indices.tolist(), modes=modes)
    )
    return idx


@pytest.fixture(scope="module")
def megatron() -> ModuleType:
    """megatron-core's indexed_dataset module (its import warns of missing CUDA kernels)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("megatron.core.datasets.indexed_dataset")


def write_with_builder(
    megatron: ModuleType, folder: Path, docs: list[list[list[int]]], dtype: str
) -> Path:
    """``docs`` written by Megatron's IndexedDatasetBuilder, as its tools write them."""
    import torch

    builder = megatron.IndexedDatasetBuilder(str(folder / "mc.bin"), dtype=getattr(np, dtype))
    for i, doc in enumerate(docs):
        if i % 2:  # add_document, as tools/preprocess_data.py writes a document
            flat = np.array([t for seq in doc for t in seq], dtype=np.int64)
            builder.add_document(flat, [len(seq) for seq in doc])
        else:  # add_item per sequence, then end_document
            for seq in doc:
                builder.add_item(torch.tensor(seq, dtype=torch.int64))
            builder.end_document()
    builder.finalize(str(folder / "mc.idx"))
    return folder / "mc.idx"


def joined(doc: list[list[int]]) -> list[int]:
    return [t for seq in doc for t in seq]


# -- compatibility with megatron-core ---------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=documents, dtype=st.sampled_from(["uint16", "int32"]))
def test_a_corpus_written_by_megatrons_builder_reads_each_document_as_megatron_reads_it(
    megatron: ModuleType, docs: list[list[list[int]]], dtype: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        idx = write_with_builder(megatron, Path(folder), docs, dtype)
        corpus = TokenCorpus(idx)
        theirs = megatron.IndexedDataset(str(idx.with_suffix("")))
        bounds = theirs.document_indices.tolist()
        assert corpus.num_documents == len(docs) == len(bounds) - 1
        assert corpus.num_tokens == sum(len(joined(doc)) for doc in docs)
        for d, doc in enumerate(docs):
            pieces = theirs[bounds[d] : bounds[d + 1]]
            assert corpus.document(d).tolist() == np.concatenate(pieces).tolist() == joined(doc)
        del theirs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=documents, dtype=st.sampled_from(["uint16", "int32", "int64", "uint8"]))
def test_the_reference_writer_of_these_tests_writes_megatrons_bytes_exactly(
    megatron: ModuleType, docs: list[list[list[int]]], dtype: str
) -> None:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        ours, theirs = (
            write_pair(folder, "ref", docs, dtype),
            write_with_builder(megatron, folder, docs, dtype),
        )
        assert ours.read_bytes() == theirs.read_bytes()
        assert ours.with_suffix(".bin").read_bytes() == theirs.with_suffix(".bin").read_bytes()


def test_a_multimodal_file_is_read_as_its_tokens_and_its_modes_are_not_read(
    megatron: ModuleType, tmp_path: Path
) -> None:
    builder = megatron.IndexedDatasetBuilder(
        str(tmp_path / "mm.bin"), dtype=np.uint16, multimodal=True
    )
    builder.add_document(np.array([5, 6, 7]), [2, 1], modes=[0, 1])
    builder.add_document(np.array([8]), [1], modes=[1])
    builder.finalize(str(tmp_path / "mm.idx"))
    corpus = TokenCorpus(tmp_path / "mm.idx")
    assert [corpus.document(d).tolist() for d in range(2)] == [[5, 6, 7], [8]]


# -- documents and sequences -------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    files=st.lists(documents, min_size=1, max_size=3),
    dtype=st.sampled_from(["uint16", "int32"]),
    seq_len=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_megatron_pairs_give_the_documents_and_sequences_of_the_same_tokens_with_lengths(
    files: list[list[list[list[int]]]], dtype: str, seq_len: int, seed: int
) -> None:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        pairs, tokens, sidecars = [], [], []
        for i, docs in enumerate(files):
            pairs.append(write_pair(folder, f"part{i}", docs, dtype))
            tokens.append(folder / f"part{i}.npy")
            sidecars.append(folder / f"part{i}.lengths.npy")
            np.save(tokens[-1], np.array([t for doc in docs for t in joined(doc)], dtype=dtype))
            np.save(sidecars[-1], np.array([len(joined(doc)) for doc in docs], dtype=np.int64))
        megatron, plain = TokenCorpus(pairs), TokenCorpus(tokens, lengths=sidecars)
        every = [joined(doc) for docs in files for doc in docs]
        seq_len = min(seq_len, megatron.num_tokens - 1)
        assume(seq_len >= 1)
        assert megatron.num_documents == plain.num_documents == len(every)
        assert [megatron.document(d).tolist() for d in range(len(every))] == every
        for mode in ("chunk", "concat"):
            ours = TokenSequences(megatron, seq_len, mode=mode, seed=seed)
            reference = TokenSequences(plain, seq_len, mode=mode, seed=seed)
            assert len(ours) == len(reference)
            for k in range(len(ours)):
                got, want = ours[k], reference[k]
                assert got.keys() == want.keys()
                for key in want:
                    assert np.array_equal(got[key], want[key]), (mode, k, key)


@pytest.mark.workers
def test_a_corpus_from_megatrons_builder_resumes_exactly_through_the_loader_with_workers(
    megatron: ModuleType, tmp_path: Path
) -> None:
    rng = np.random.default_rng(4)
    docs = [
        [rng.integers(1, 900, size=n).tolist() for n in rng.integers(1, 9, size=rng.integers(1, 4))]
        for _ in range(30)
    ]
    corpus = TokenCorpus(write_with_builder(megatron, tmp_path, docs, "uint16"))
    sequences = TokenSequences(corpus, 6, mode="concat", seed=5, block_documents=4)

    def factory(rank: int, world_size: int, num_workers: int, batch_size: int = 2) -> DataLoader:
        return DataLoader(sequences, batch_size=batch_size, shuffle=True, seed=5,
                          num_workers=num_workers, collate_fn=collate_tokens)  # fmt: skip

    report = check_resume(factory, [2, 5], batches=7, run=Config(num_workers=2),
                          resume=[Config(num_workers=0), Config(num_workers=1)])  # fmt: skip
    assert report.pauses == [2, 5]


def test_a_pickled_megatron_corpus_maps_its_bin_again_instead_of_copying_it(
    tmp_path: Path,
) -> None:
    idx = write_pair(tmp_path, "big", [[list(range(1, 101))] * 50, [[7, 8]]], "uint16")
    corpus = TokenCorpus(idx)
    data = pickle.dumps(corpus)
    assert corpus.num_tokens == 5002 and len(data) < 2_000  # 10 kB of tokens are not in it
    assert pickle.loads(data).document(1).tolist() == [7, 8]


def test_megatron_tokens_are_checked_against_vocab_size_on_read(tmp_path: Path) -> None:
    idx = write_pair(tmp_path, "neg", [[[3, 4]], [[5, -2, 6]]], "int32")
    corpus = TokenCorpus(idx, vocab_size=10)
    assert corpus.document(0).tolist() == [3, 4]
    with pytest.raises(ValueError, match=r"neg.idx should hold token ids in \[0, vocab_size=10\)"):
        corpus.document(1)


def test_the_corpus_config_says_its_documents_come_from_the_megatron_index(
    tmp_path: Path,
) -> None:
    idx = write_pair(tmp_path, "c", [[[1, 2]]], "uint16")
    assert TokenCorpus(idx).config() == {"files": [["c.idx", 62]], "documents": "megatron"}


# -- bad input -----------------------------------------------------------------------------------


def _valid(tmp_path: Path) -> Path:
    """A pair of 3 sequences (lengths 2, 1, 1) in 2 documents, uint16."""
    np.array([7, 8, 9, 6], dtype=np.uint16).tofile(tmp_path / "c.bin")
    (tmp_path / "c.idx").write_bytes(idx_bytes(8, [2, 1, 1], [0, 4, 6], [0, 2, 3]))
    return tmp_path / "c.idx"


def _refused(idx: Path, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TokenCorpus(idx)


def test_an_idx_of_another_magic_version_or_dtype_code_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    idx = _valid(tmp_path)
    assert [TokenCorpus(idx).document(d).tolist() for d in range(2)] == [[7, 8, 9], [6]]
    idx.write_bytes(idx_bytes(8, [2, 1, 1], [0, 4, 6], [0, 2, 3], magic=b"TNTIDX\x00\x00\x00"))
    _refused(idx, r"c.idx should start with the magic b'MMIDIDX\\x00\\x00', but it starts")
    idx.write_bytes(idx_bytes(8, [2, 1, 1], [0, 4, 6], [0, 2, 3], version=2))
    _refused(idx, r"c.idx should be of version 1, but its header says version 2")
    idx.write_bytes(idx_bytes(9, [2, 1, 1], [0, 4, 6], [0, 2, 3]))
    _refused(idx, r"c.idx should have a token dtype code in .* but it has code 9, which is no")
    idx.write_bytes(idx_bytes(7, [2, 1, 1], [0, 4, 6], [0, 2, 3]))
    _refused(idx, r"but it has code 7, which is float32, not token ids")
    idx.write_bytes(b"MMIDIDX\x00\x00\x01")
    _refused(idx, r"c.idx should start with a 34-byte header, but it is 10 bytes")


def test_an_idx_header_that_lies_about_its_counts_is_refused_before_any_allocation(
    tmp_path: Path,
) -> None:
    idx = _valid(tmp_path)
    body = idx.read_bytes()[34:]
    tracemalloc.start()
    try:
        for sequences, indexes in [(10**15, 3), (3, 2**60), (2**63, 2**63), (2, 3), (3, 1)]:
            idx.write_bytes(
                b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, sequences, indexes) + body
            )
            _refused(
                idx,
                rf"c.idx should be \d+ bytes as its header says \({sequences} sequences and "
                rf"{indexes} document indices .* but it is 94 bytes; the file is truncated",
            )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # no array was built from the claimed counts
    idx.write_bytes(idx_bytes(8, [], [], [0]))
    _refused(idx, r"c.idx should describe at least one document, but its header says 0 seq")


def test_pointers_that_do_not_follow_the_lengths_or_leave_the_bin_are_refused(
    tmp_path: Path,
) -> None:
    idx = _valid(tmp_path)
    idx.write_bytes(idx_bytes(8, [2, 1, 1], [0, 4, 4], [0, 2, 3]))
    _refused(idx, r"c.idx should point sequence 2 at byte 6 of the .bin .* points at byte 4")
    idx.write_bytes(idx_bytes(8, [2, 1, 1], [0, 2**40, 6], [0, 2, 3]))
    _refused(idx, r"should point sequence 1 at byte 4 of the .bin .* points at byte 1099511627776")
    idx.write_bytes(idx_bytes(8, [2, -1, 1], [0, 4, 2], [0, 2, 3]))
    _refused(idx, r"c.idx should hold sequence lengths of at least 0, but sequence 1 has length -1")
    idx.write_bytes(idx_bytes(8, [2, 1, 2**31 - 1], [0, 4, 6], [0, 2, 3]))
    _refused(idx, r"describe the 8 bytes of c.bin exactly, but its sequences run past its end")
    idx.write_bytes(idx_bytes(8, [2, 1, 0], [0, 4, 6], [0, 2, 3]))
    _refused(idx, r"sequences end at byte 6, 2 bytes before its end; pair each .idx with")
    _valid(tmp_path)
    (tmp_path / "c.bin").write_bytes(b"\x07\x00\x08")
    _refused(idx, r"data file .*c.bin should hold whole uint16 tokens as c.idx says .* 3 bytes")


def test_document_indices_out_of_order_or_range_or_empty_documents_are_refused(
    tmp_path: Path,
) -> None:
    idx = _valid(tmp_path)
    idx.write_bytes(idx_bytes(8, [2, 1, 1], [0, 4, 6], [1, 2, 3]))
    _refused(idx, r"c.idx should have document indices from 0 to its 3 sequences, but they run")
    idx.write_bytes(idx_bytes(8, [2, 1, 1], [0, 4, 6], [0, 2, 9]))
    _refused(idx, r"document indices from 0 to its 3 sequences, but they run from 0 to 9")
    idx.write_bytes(idx_bytes(8, [2, 1, 1], [0, 4, 6], [0, 5, 2, 3]))
    _refused(idx, r"strictly increasing document indices, but document 1 runs from sequence 5 to 2")
    idx.write_bytes(idx_bytes(8, [2, 1, 1], [0, 4, 6], [0, 2, 2, 3]))
    _refused(idx, r"but document 1 runs from sequence 2 to 2")
    idx.write_bytes(idx_bytes(8, [3, 0, 1], [0, 6, 6], [0, 1, 2, 3]))
    _refused(idx, r"c.idx should give every document at least one token, but document 1 \(seq")
    idx.write_bytes(idx_bytes(8, [0, 3, 1], [0, 0, 6], [0, 1, 2, 3]))
    _refused(idx, r"at least one token, but document 0 \(sequences 0 to 1\) has none")


def test_megatron_files_take_no_dtype_eod_id_or_lengths_and_do_not_mix_with_others(
    tmp_path: Path,
) -> None:
    idx = _valid(tmp_path)
    np.save(tmp_path / "t.npy", np.array([1, 0], dtype=np.uint16))
    with pytest.raises(ValueError, match=r"paths should be all Megatron .idx files or none"):
        TokenCorpus([idx, tmp_path / "t.npy"], eod_id=0)
    with pytest.raises(ValueError, match=r"dtype, eod_id and lengths should be None for Meg"):
        TokenCorpus(idx, eod_id=0)
    with pytest.raises(ValueError, match=r"should be None .* but got dtype='uint16'"):
        TokenCorpus(idx, dtype="uint16")
    with pytest.raises(ValueError, match=r"raw token file .*c.bin.* or the .idx of a Megatron"):
        TokenCorpus(tmp_path / "c.bin", eod_id=0)


def test_a_megatron_pair_named_by_url_is_refused_before_any_request() -> None:
    # Port 9 of 127.0.0.1 serves nothing: a request would fail otherwise than this check.
    with pytest.raises(ValueError, match=r"local files for Megatron .idx pairs, but got the URL"):
        TokenCorpus("http://127.0.0.1:9/corpus/train.idx")


def _opens_without_blocking(idx: Path) -> BaseException:
    outcome: list[BaseException] = []

    def open_it() -> None:
        try:
            TokenCorpus(idx)
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    thread = threading.Thread(target=open_it, daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), f"opening {idx} blocked"
    return outcome[0]


def test_fifos_devices_folders_and_a_missing_bin_are_refused_without_blocking(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "fifo.idx"
    os.mkfifo(fifo)
    error = _opens_without_blocking(fifo)
    assert isinstance(error, ValueError) and "fifo.idx should be a regular file" in str(error)
    idx = _valid(tmp_path)
    (tmp_path / "c.bin").unlink()
    os.mkfifo(tmp_path / "c.bin")
    error = _opens_without_blocking(idx)
    assert isinstance(error, ValueError) and "c.bin should be a regular file" in str(error)
    (tmp_path / "zero.idx").symlink_to("/dev/zero")
    _refused(tmp_path / "zero.idx", r"zero.idx should be a regular file, but it is a FIFO, dev")
    (tmp_path / "c.bin").unlink()
    (tmp_path / "c.bin").symlink_to("/dev/zero")
    _refused(idx, r"c.bin should be a regular file, but it is a FIFO, device")
    (tmp_path / "c.bin").unlink()
    _refused(idx, r"c.bin cannot be read: No such file")
    (tmp_path / "folder.idx").mkdir()
    _refused(tmp_path / "folder.idx", r"folder.idx should be a regular file")


@settings(max_examples=150, deadline=None)
@given(
    at=st.integers(0, 93),
    value=st.integers(0, 255),
    bin_cut=st.sampled_from([0, 2, 8]),
)
def test_any_corrupt_byte_of_an_idx_opens_a_corpus_tiling_the_bin_or_fails_naming_the_file(
    at: int, value: int, bin_cut: int
) -> None:
    with tempfile.TemporaryDirectory() as name:
        idx = _valid(Path(name))
        data = bytearray(idx.read_bytes())
        data[at] = value
        idx.write_bytes(bytes(data))
        bin_data = (Path(name) / "c.bin").read_bytes()
        (Path(name) / "c.bin").write_bytes(bin_data[: len(bin_data) - bin_cut])
        try:
            corpus = TokenCorpus(idx)
        except ValueError as error:
            assert str(idx) in str(error) or "c.bin" in str(error)
            return
        spans = [corpus.span(d) for d in range(corpus.num_documents)]
        assert spans[0][0] == 0 and spans[-1][1] == corpus.num_tokens
        assert all(a < b for a, b in spans)
        assert all(s[1] == t[0] for s, t in itertools.pairwise(spans))
        got: Any = np.concatenate([corpus.document(d) for d in range(corpus.num_documents)])
        assert got.tolist() == np.frombuffer(bin_data[: len(bin_data) - bin_cut], "<u2").tolist()
