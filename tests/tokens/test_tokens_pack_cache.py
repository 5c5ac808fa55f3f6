"""The packed windows kept between batches (NOTE [ packed sequences ], kept windows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import write_eod, write_unique

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenSequences, _pack, collate_tokens
from detsamplers.tokens._pack import PackOrder

#: Files of document lengths, some longer than the sequences they are packed into.
packed_corpora = st.lists(
    st.lists(st.integers(1, 24), min_size=1, max_size=14), min_size=1, max_size=3
)


def window_of(order: PackOrder, k: int) -> int:
    return int(np.searchsorted(order._cumulative, k, side="right")) - 1


def counting(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Record the windows of every pack (each call's list)."""
    packs: list[list[int]] = []
    pack = PackOrder._pack_windows

    def counted(self: PackOrder, ws: list[int]) -> None:
        if ws:
            packs.append(list(ws))
        pack(self, ws)

    monkeypatch.setattr(PackOrder, "_pack_windows", counted)
    return packs


@settings(max_examples=40, deadline=None)
@given(
    files=packed_corpora,
    seq_len=st.integers(5, 16),
    seed=st.integers(0, 2**31),
    window=st.integers(1, 6),
    kept=st.tuples(st.integers(1, 4), st.integers(0, 40)),
    data=st.data(),
)
def test_a_kept_window_gives_the_bins_of_a_fresh_pack_and_the_table_stays_bounded(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    window: int,
    kept: tuple[int, int],
    data: st.DataObject,
) -> None:
    corpus = write_unique(tmp_path_factory.mktemp("c"), files)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_pack, "CACHED_WINDOWS", kept[0])
        patch.setattr(_pack, "CACHED_PIECES", kept[1])
        order = PackOrder(corpus, seq_len, seed, window, cache=False)
        batches = data.draw(
            st.lists(st.lists(st.integers(0, len(order) - 1), min_size=1, max_size=6), max_size=8)
        )
        for batch in batches:  # as the loader's batches: prepare, then each sequence
            order.prepare(batch)
            for k in batch:
                fresh = PackOrder(corpus, seq_len, seed, window, cache=False)  # nothing kept
                got, expected = order.pieces(k), fresh.pieces(k)
                assert [a.tolist() for a in got] == [a.tolist() for a in expected]
            kept_pieces = sum(len(packed[1]) for packed in order._packed.values())
            assert order._kept_pieces == kept_pieces  # the count the bound is checked on
            # The last CACHED_WINDOWS windows, and older ones only within CACHED_PIECES.
            assert len(order._packed) <= kept[0] or kept_pieces <= kept[1]


def test_a_batch_never_evicts_a_window_it_reads_so_it_packs_each_window_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_unique(tmp_path, [[3] * 40])
    monkeypatch.setattr(_pack, "CACHED_WINDOWS", 2)
    monkeypatch.setattr(_pack, "CACHED_PIECES", 0)
    order = PackOrder(corpus, 6, seed=3, window=4, cache=False)
    first = {window_of(order, k): k for k in range(len(order))}  # one sequence per window
    assert len(first) >= 3
    packs = counting(monkeypatch)
    for batch in ([first[0], first[1]], [first[0], first[2]]):
        order.prepare(batch)
        for k in batch:
            order.pieces(k)
    # Window 0 is kept from the first batch; packing window 2 evicts window 1, not it.
    assert packs == [[0, 1], [2]]
    assert list(order._packed) == [0, 2]


def test_a_shuffled_epoch_over_few_windows_packs_each_window_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lengths = [int(n) for n in np.random.default_rng(0).integers(1, 30, size=300)]
    sequences = TokenSequences(write_eod(tmp_path, [lengths]), 32, mode="pack", window=20)
    assert sequences._pack is not None
    windows = sequences._pack._windows
    packs = counting(monkeypatch)
    loader = DataLoader(sequences, batch_size=4, shuffle=True, seed=1, collate_fn=collate_tokens)
    batches = list(loader.get_data_loader())
    assert sum(len(batch["input_ids"]) for batch in batches) == len(sequences)
    packed = [w for ws in packs for w in ws]
    assert sorted(packed) == list(range(windows))  # every window once, none again


@settings(max_examples=30, deadline=None)
@given(files=packed_corpora, seq_len=st.integers(5, 16), seed=st.integers(0, 99),
       window=st.integers(1, 6), data=st.data())  # fmt: skip
def test_a_packed_batch_equals_its_sequences_read_one_by_one_from_fresh_objects(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    window: int,
    data: st.DataObject,
) -> None:
    corpus = write_eod(tmp_path_factory.mktemp("c"), files, seed)
    sequences = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=window)
    pairs = data.draw(
        st.lists(st.tuples(st.integers(0, 2), st.integers(0, len(sequences) - 1)), min_size=2)
    )
    rows = sequences.getitems_in_epochs(pairs)
    for (epoch, k), row in zip(pairs, rows, strict=True):
        fresh = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=window)
        expected = fresh.at(k, epoch)
        assert list(row) == list(expected)
        for key in expected:
            assert row[key].tolist() == expected[key].tolist(), key
