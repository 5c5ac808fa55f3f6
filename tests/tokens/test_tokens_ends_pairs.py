"""Scattered reads of a large ends cache check each document by its two ends."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import ends_cache_of as cache_of
from tokens_helpers import write_lengths as write

from detsamplers.tokens import TokenCorpus, TokenSequences, _boundaries
from detsamplers.tokens import _ends_check as ends_check

HEADER = _boundaries.ENDS_HEADER


def lazy(patch: pytest.MonkeyPatch) -> None:
    """Caches above 4 ends checked on read, in regions of 4."""
    patch.setattr(_boundaries, "CHECK_WHOLE", 4)
    patch.setattr(ends_check, "CHECK_REGION", 4)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=9, max_size=40),
    at=st.integers(0, 39),
    value=st.integers(-(2**40), 2**40),
    read=st.lists(st.integers(0, 40), min_size=1, max_size=12),
)
def test_scattered_starts_are_the_true_ones_or_bound_non_empty_ranges_or_name_the_cache(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    at: int,
    value: int,
    read: list[int],
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        lazy(patch)
        patch.setattr(_boundaries, "ENDS_SAMPLES", 0)  # a forged middle passes the open
        path, sidecar = write(tmp_path_factory.mktemp("p"), lengths)
        n, tokens = len(lengths), sum(lengths)
        right = np.concatenate(([0], np.cumsum(lengths)))
        at %= n
        TokenCorpus(path, lengths=[sidecar])  # writes the cache
        stored = np.load(cache_of(sidecar))
        stored[HEADER + at] = value
        np.save(cache_of(sidecar), stored)
        corpus = TokenCorpus(path, lengths=[sidecar])
        forged = not np.array_equal(corpus._ends[0], right[1:])  # not rebuilt at open
        docs = np.array([d % n for d in read], dtype=np.int64)
        try:
            got = corpus.starts(np.concatenate((docs, docs + 1)))
        except ValueError as error:
            assert forged and str(error).startswith(f"document ends cache {cache_of(sidecar)} ")
            assert "should hold increasing ends" in str(error)
            return
    begins, stops = got[: len(docs)], got[len(docs) :]
    assert ((begins >= 0) & (begins < stops) & (stops <= tokens)).all()
    # The ends read: before each document and its own (the documents after read too).
    touched = set((docs - 1).tolist()) | set(docs.tolist())
    if not forged or at not in touched:
        assert got.tolist() == right[np.concatenate((docs, docs + 1))].tolist()


def test_scattered_starts_compare_only_the_ends_they_read_and_a_broken_pair_names_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lazy(monkeypatch)
    n = 400
    path, sidecar = write(tmp_path, [2] * n)
    TokenCorpus(path, lengths=[sidecar])
    corpus = TokenCorpus(path, lengths=[sidecar])
    check = corpus._checks[0]
    assert not check.complete
    docs = np.array([7, 201, 399, 3], dtype=np.int64)
    assert corpus.starts(docs).tolist() == (2 * docs).tolist()
    assert not check._done.any()  # no region compared whole
    # An end moved past the next one, where the open's samples do not look.
    binding = np.load(cache_of(sidecar))[:HEADER]
    key = np.random.SeedSequence([int(v) & 0xFFFFFFFF for v in binding[1:]] + [n])
    sampled = set(np.random.default_rng(key).integers(1, n, size=64).tolist())
    at = next(a for a in range(n // 2, n - 2) if not {a, a + 1} & sampled)
    stored = np.load(cache_of(sidecar))
    stored[HEADER + at] += 3
    np.save(cache_of(sidecar), stored)
    corpus = TokenCorpus(path, lengths=[sidecar])
    assert corpus.starts(np.array([at - 5, at + 5])).tolist() == [2 * (at - 5), 2 * (at + 5)]
    with pytest.raises(ValueError, match=rf"document ends cache .*t\.lengths\.npy\.ends\.npy "
                       rf"should hold increasing ends in \[1, {2 * n}\], but its ends {at} to "
                       rf"{at + 1} do not; delete it"):  # fmt: skip
        corpus.starts(np.array([3, at + 1]))
    # A pack reads every document's two ends to count its bins: it names the cache too.
    with pytest.raises(ValueError, match=r"t\.lengths\.npy\.ends\.npy should hold increasing"):
        TokenSequences(corpus, 8, mode="pack", window=50).at(0)


def test_a_chunk_window_checks_only_its_documents_and_a_broken_pair_in_it_names_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lazy(monkeypatch)
    n = 400
    path, sidecar = write(tmp_path, [2] * n)
    TokenCorpus(path, lengths=[sidecar])
    corpus = TokenCorpus(path, lengths=[sidecar])
    sequences = TokenSequences(corpus, 3, mode="chunk")
    rows = sequences.getitems_in_epochs([(0, 50), (0, 3)])  # a batch: windows 50 and 3
    assert [row["input_ids"].tolist() for row in rows] == [[201, 202, 203], [13, 14, 15]]
    assert not corpus._checks[0]._done.any()  # their documents, no region
    binding = np.load(cache_of(sidecar))[:HEADER]
    key = np.random.SeedSequence([int(v) & 0xFFFFFFFF for v in binding[1:]] + [n])
    sampled = set(np.random.default_rng(key).integers(1, n, size=64).tolist())
    # An odd end moved past the next one where no sample looks: the window of tokens
    # 2 at + 2 to 2 at + 6 reads documents at to at + 2, the pair (at, at + 1) broken.
    at = next(a for a in range(n // 2 + 1, n - 2, 2) if not {a, a + 1} & sampled)
    stored = np.load(cache_of(sidecar))
    stored[HEADER + at] += 3
    np.save(cache_of(sidecar), stored)
    sequences = TokenSequences(TokenCorpus(path, lengths=[sidecar]), 3, mode="chunk")
    with pytest.raises(ValueError, match=rf"ends\.npy should hold increasing ends in \[1, "
                       rf"{2 * n}\], but its ends {at} to {at + 1} do not; delete it"):  # fmt: skip
        sequences.getitems_in_epochs([(0, 0), (0, (at + 1) // 2)])


@settings(max_examples=30, deadline=None)
@given(
    files=st.lists(st.lists(st.integers(1, 9), min_size=1, max_size=12), min_size=1, max_size=3),
    read=st.lists(st.integers(0, 10**6), min_size=1, max_size=12),
)
def test_spans_are_the_starts_of_the_documents_and_of_the_next_ones_over_several_files(
    tmp_path_factory: pytest.TempPathFactory, files: list[list[int]], read: list[int]
) -> None:
    folder = tmp_path_factory.mktemp("s")
    pairs = [write(folder, lengths, name=f"f{i}") for i, lengths in enumerate(files)]
    corpus = TokenCorpus([p for p, _ in pairs], lengths=[s for _, s in pairs])
    docs = np.array([d % corpus.num_documents for d in read], dtype=np.int64)
    begins, stops = corpus.spans(docs)
    assert begins.tolist() == corpus.starts(docs).tolist()
    assert stops.tolist() == corpus.starts(docs + 1).tolist()
    right = np.concatenate(([0], np.cumsum([n for lengths in files for n in lengths])))
    assert (stops - begins).tolist() == (right[docs + 1] - right[docs]).tolist()


def test_spans_check_each_document_by_its_two_ends_and_a_broken_pair_names_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lazy(monkeypatch)
    monkeypatch.setattr(_boundaries, "ENDS_SAMPLES", 0)  # a forged middle passes the open
    path, sidecar = write(tmp_path, [2] * 400)
    TokenCorpus(path, lengths=[sidecar])
    stored = np.load(cache_of(sidecar))
    stored[HEADER + 200] = stored[HEADER + 199]  # document 200 empty: ends 199 and 200 equal
    np.save(cache_of(sidecar), stored)
    corpus = TokenCorpus(path, lengths=[sidecar])
    begins, stops = corpus.spans(np.array([7, 399, 202], dtype=np.int64))  # pairs not met
    assert begins.tolist() == [14, 798, 404] and stops.tolist() == [16, 800, 406]
    with pytest.raises(ValueError, match=r"^document ends cache .* but its ends 199 to 200 do not"):
        corpus.spans(np.array([7, 200], dtype=np.int64))


@pytest.mark.parametrize("bad", [-1, 3])
def test_spans_of_a_document_outside_the_corpus_are_refused_naming_it(
    tmp_path: Path, bad: int
) -> None:
    path, sidecar = write(tmp_path, [2, 3, 4])
    corpus = TokenCorpus(path, lengths=[sidecar])
    with pytest.raises(ValueError, match=rf"docs should be documents in \[0, 3\), but got {bad};"):
        corpus.spans(np.array([0, bad], dtype=np.int64))
