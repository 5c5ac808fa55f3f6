"""Packed batches built for the batch at once (NOTE [ packed batch rows ])."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import EOD, write_eod

from detsamplers import _native
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens
from detsamplers.tokens._features import KEYS
from detsamplers.tokens._files import NPY_DTYPES
from detsamplers.tokens._pack_rows import _compiled_rows, gather_rows, packed_rows, window_rows

packed_corpora = st.lists(
    st.lists(st.integers(1, 24), min_size=1, max_size=14), min_size=1, max_size=3
)


@settings(max_examples=30, deadline=None)
@given(files=packed_corpora, seq_len=st.integers(1, 12), seed=st.integers(0, 99),
       outputs=st.sets(st.sampled_from(KEYS[1:])), data=st.data())  # fmt: skip
def test_a_packed_batch_of_some_outputs_holds_exactly_those_arrays_of_the_full_batch(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    outputs: set[str],
    data: st.DataObject,
) -> None:
    corpus = write_eod(tmp_path_factory.mktemp("c"), files, seed)
    every = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=3)
    some = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=3,
                          outputs=["input_ids", *outputs])  # fmt: skip
    ks = data.draw(st.lists(st.integers(0, len(every) - 1), min_size=1, max_size=9))
    full = every.getitems_in_epochs([(0, k) for k in ks])
    rows = some.getitems_in_epochs([(0, k) for k in ks])
    for k, row, whole in zip(ks, rows, full, strict=True):
        assert list(row) == [key for key in KEYS if key == "input_ids" or key in outputs]
        for key, value in row.items():
            assert value.tolist() == whole[key].tolist() == every.at(k)[key].tolist(), key
    batch = collate_tokens(rows)
    assert batch["input_ids"].is_contiguous() and batch["input_ids"].shape == (len(ks), seq_len)


def test_a_token_over_vocab_size_in_a_packed_batch_fails_naming_its_file(
    tmp_path: Path,
) -> None:
    docs = [np.array([1, 2, EOD]), np.array([3, 4, 5, 9000, EOD]), np.array([6, EOD])]
    path = tmp_path / "bad.bin"
    np.concatenate(docs).astype(np.uint16).tofile(path)
    corpus = TokenCorpus([path], dtype="uint16", eod_id=EOD, vocab_size=1000, progress=False)
    sequences = TokenSequences(corpus, 5, mode="pack", window=3)
    pairs = [(0, k) for k in range(len(sequences))] * 2
    with pytest.raises(ValueError, match=r"token file .*bad\.bin should hold token ids in \[0, "
                       r"vocab_size=1000\), but token 6 is 9000"):  # fmt: skip
        sequences.getitems_in_epochs(pairs)


def test_a_packed_batch_reads_its_pieces_from_every_file_they_lie_in(tmp_path: Path) -> None:
    corpus = write_eod(tmp_path, [[3, 5, 2], [4, 1], [6, 2, 2]], seed=3)
    sequences = TokenSequences(corpus, 7, mode="pack", window=2)
    ks = list(range(len(sequences)))
    rows = sequences.getitems_in_epochs([(0, k) for k in ks])
    for k, row in zip(ks, rows, strict=True):
        _, firsts, counts, _ = sequences.pieces(k)
        real = np.concatenate([corpus.read(int(f), int(f + c))
                               for f, c in zip(firsts, counts, strict=True)])  # fmt: skip
        expected = np.zeros(8, dtype=np.int64)
        expected[: len(real)] = real
        assert row["input_ids"].tolist() == expected[:7].tolist()
    files = {int(np.searchsorted(corpus._token_start, f, side="right"))
             for k in ks for f in sequences.pieces(k)[1]}  # fmt: skip
    assert len(files) == 3  # the batch read from all three files


@settings(max_examples=30, deadline=None)
@given(files=packed_corpora, seq_len=st.integers(1, 12), seed=st.integers(0, 99),
       outputs=st.sets(st.sampled_from(KEYS[1:])), data=st.data())  # fmt: skip
def test_a_packed_batch_collates_to_the_tensors_of_its_rows_collated_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    outputs: set[str],
    data: st.DataObject,
) -> None:
    corpus = write_eod(tmp_path_factory.mktemp("c"), files, seed)
    sequences = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=3,
                               outputs=["input_ids", *outputs])  # fmt: skip
    ks = data.draw(st.lists(st.integers(0, len(sequences) - 1), min_size=1, max_size=9))
    rows = sequences.getitems_in_epochs([(0, k) for k in ks])
    batch = collate_tokens(rows)  # the tables, cu_seqlens flattened by the rows' builder
    one_by_one = collate_tokens([{key: value.copy() for key, value in row.items()}
                                 for row in rows])  # fmt: skip
    assert sorted(batch) == sorted(one_by_one)
    for key, value in one_by_one.items():
        assert batch[key].dtype == value.dtype and batch[key].tolist() == value.tolist(), key


def test_a_full_packed_row_labels_its_last_input_with_the_token_after_it(tmp_path: Path) -> None:
    # Two documents of 4 tokens fill a bin of L + 1 = 8 (L = 7): the row has no padding,
    # and its last token (an end of document, 9) is the label of its last input only.
    path = tmp_path / "t.bin"
    np.array([1, 2, 3, 9, 4, 5, 6, 9], dtype=np.uint16).tofile(path)
    corpus = TokenCorpus([path], dtype="uint16", eod_id=9, progress=False)
    sequences = TokenSequences(corpus, 7, mode="pack", window=2)
    assert len(sequences) == 1
    row = sequences.getitems_in_epochs([(0, 0), (0, 0)])[0]
    first, second = sorted([[1, 2, 3, 9], [4, 5, 6, 9]], key=lambda d: d[0] != row["input_ids"][0])
    assert row["input_ids"].tolist() == first + second[:3]
    assert row["labels"].tolist() == [*first[1:], -100, *second[1:]]


@pytest.mark.servers
def test_a_packed_batch_over_nginx_holds_the_arrays_of_the_same_files_on_disk(
    tmp_path: Path,
) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "webdataset"))  # the servers' helpers
    from nginx_server import Nginx

    local = write_eod(tmp_path / "c", [[3, 9, 2, 5], [7, 1, 4], [6, 6]], seed=4)
    for path in (tmp_path / "c").glob("*.eod0.npy"):  # the remote open scans its files
        path.unlink()
    nginx = Nginx(tmp_path, tmp_path / "nginx")
    try:
        urls = [f"{nginx.url}/c/{path.name}" for path in local.paths]
        remote = TokenCorpus(urls, dtype="uint16", eod_id=EOD, progress=False,
                             cache_dir=tmp_path / "cache")  # fmt: skip
        assert not isinstance(remote._tokens[0], np.ndarray)  # read by ranges, not mapped
        there, here = (TokenSequences(corpus, 6, mode="pack", seed=2, window=3)
                       for corpus in (remote, local))  # fmt: skip
        pairs = [(0, k) for k in range(len(here))] * 2
        got, expected = (
            collate_tokens(there.getitems_in_epochs(pairs)),
            collate_tokens(here.getitems_in_epochs(pairs)),
        )
    finally:
        nginx.close()
    assert sorted(got) == sorted(KEYS)
    for key in KEYS:
        assert got[key].tolist() == expected[key].tolist(), key


@settings(max_examples=30, deadline=None)
@given(files=packed_corpora, seq_len=st.integers(1, 12), seed=st.integers(0, 99),
       window=st.integers(1, 5), data=st.data())  # fmt: skip
def test_a_packed_batch_lookup_gives_each_sequences_pieces_one_after_the_other(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    window: int,
    data: st.DataObject,
) -> None:
    corpus = write_eod(tmp_path_factory.mktemp("c"), files, seed)
    sequences = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=window)
    order = sequences._pack
    assert order is not None
    ks = data.draw(st.lists(st.integers(0, len(sequences) - 1), min_size=1, max_size=9))
    docs, firsts, counts, closes, pieces = order.batch(ks)
    fresh = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=window)._pack
    assert fresh is not None
    one_by_one = [fresh.pieces(k) for k in ks]
    assert pieces.tolist() == [len(part[0]) for part in one_by_one]
    for got, column in zip((docs, firsts, counts, closes), zip(*one_by_one, strict=True),
                           strict=True):  # fmt: skip
        assert got.tolist() == np.concatenate(column).tolist()


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(1, 30), min_size=1, max_size=30),
       dtype=st.sampled_from(NPY_DTYPES), seq_len=st.integers(1, 12), seed=st.integers(0, 99),
       window=st.integers(1, 6), long_documents=st.sampled_from(["split", "truncate"]),
       outputs=st.sets(st.sampled_from(KEYS[1:])), tight_vocab=st.booleans(),
       data=st.data())  # fmt: skip
def test_the_compiled_packed_rows_equal_the_numpy_rows(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    dtype: str,
    seq_len: int,
    seed: int,
    window: int,
    long_documents: str,
    outputs: set[str],
    tight_vocab: bool,
    data: st.DataObject,
) -> None:
    if _native.kernel is None:
        pytest.skip(_native.kernel_status())
    rng = np.random.default_rng(seed)
    path = tmp_path_factory.mktemp("c") / "one.npy"
    docs = [np.append(rng.integers(1, 60_000 if dtype == "uint16" else 90_000, size=n - 1), EOD)
            for n in lengths]  # fmt: skip
    tokens = np.concatenate(docs).astype(dtype)
    np.save(path, tokens)
    vocab = int(tokens.max()) + 1 if tight_vocab else None  # the kernel's min/max check
    corpus = TokenCorpus(path, eod_id=EOD, vocab_size=vocab, progress=False)
    keys = ("input_ids", *sorted(outputs))
    sequences = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=window,
                               long_documents=long_documents, outputs=keys)  # fmt: skip
    ks = data.draw(st.lists(st.integers(0, len(sequences) - 1), min_size=1, max_size=9))
    sources, js = sequences._pack.rows(ks)  # type: ignore[union-attr]
    compiled = window_rows(corpus, sources, js, seq_len, keys)
    assert _compiled_rows(corpus, sources, js, seq_len, keys) is not None  # the kernel's rows
    plain = packed_rows(corpus, *gather_rows(sources, js), seq_len, keys)  # numpy
    assert list(compiled.tables() or {}) == list(plain.tables() or {}) == list(keys)
    for key in keys:
        assert compiled[0][key].dtype == plain[0][key].dtype, key
        assert [row[key].tolist() for row in compiled] == [row[key].tolist() for row in plain]
    assert {k: v.tolist() for k, v in compiled.collated.items()} == {
        k: v.tolist() for k, v in plain.collated.items()
    }
    with pytest.MonkeyPatch.context() as patch:  # without the kernel: the numpy rows
        patch.setattr(_native, "kernel", None)
        fallback = window_rows(corpus, sources, js, seq_len, keys)
    for key in keys:
        assert [row[key].tolist() for row in fallback] == [row[key].tolist() for row in plain]


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "int32", "int64"])
def test_the_compiled_rows_say_whether_every_token_lies_below_vocab(dtype: str) -> None:
    kernel = _native.kernel
    if kernel is None:
        pytest.skip(_native.kernel_status())
    tokens = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=dtype)
    window = (np.array([0, 2]), np.array([0, 1]), np.array([2, 5]), np.array([3, 2]),
              np.array([True, True]))  # fmt: skip
    one = np.array([0])

    def inside(vocab: int) -> bool:
        out = np.empty((1, 5), dtype=np.int64)
        return bool(kernel.pack_rows(tokens, 0, [window], one, 5, vocab, out, None, None,
                                     None, None, None))  # fmt: skip

    # Tokens 2..6 then 5..6 are read (4, 1, 5 and 9, 2): the greatest is 9.
    assert inside(10) and inside(0) and not inside(9) and not inside(3)
    if dtype in ("int32", "int64"):
        tokens[3] = -1  # read: below 0
        assert not inside(10)


def test_the_compiled_rows_refuse_a_piece_outside_the_tokens_naming_it() -> None:
    kernel = _native.kernel
    if kernel is None:
        pytest.skip(_native.kernel_status())
    tokens = np.arange(6, dtype=np.uint16)
    out = np.empty((1, 4), dtype=np.int64)
    one, zero = np.array([1], dtype=np.int64), np.array([0], dtype=np.int64)

    def window(first: int, count: int) -> tuple[np.ndarray, ...]:
        return (np.array([0, 1]), one, np.array([first]), np.array([count]), np.array([True]))

    outside = r"piece 0 of row 0 \(first 4, count 3\) should lie in the 6 tokens"
    with pytest.raises(ValueError, match=outside):
        kernel.pack_rows(tokens, 0, [window(4, 3)], zero, 4, 0, out, None, None, None, None,
                         None)  # fmt: skip
    with pytest.raises(ValueError, match=outside.replace("first 4", "first 5")):
        kernel.pack_rows(tokens, -1, [window(4, 3)], zero, 4, 0, out, None, None, None, None,
                         None)  # fmt: skip
    with pytest.raises(ValueError, match="row 0 should hold at most 3 tokens, not 4"):
        short = np.empty((1, 2), dtype=np.int64)
        kernel.pack_rows(tokens, 0, [window(0, 4)], zero, 2, 0, short, None, None, None, None,
                         None)  # fmt: skip
    with pytest.raises(ValueError, match=r"js\[0\] should be in \[0, 1\), the bins of its"):
        kernel.pack_rows(tokens, 0, [window(0, 3)], one, 4, 0, out, None, None, None, None,
                         None)  # fmt: skip
    with pytest.raises(TypeError, match=r"sources\[0\] should be a tuple \(offsets, docs"):
        kernel.pack_rows(tokens, 0, [window(0, 3)[:4]], zero, 4, 0, out, None, None, None,
                         None, None)  # fmt: skip
    with pytest.raises(TypeError, match="tokens should be a 1-D buffer of uint8"):
        kernel.pack_rows(tokens.astype(np.float32), 0, [window(0, 3)], zero, 4, 0, out, None,
                         None, None, None, None)  # fmt: skip
