"""The ``pack`` mode: whole documents best-fit into bins, the same from any seek, rank or
worker, a cached index that a hostile file cannot turn into a hang."""

from __future__ import annotations

import itertools
import json
import os
import resource
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tokens_attention import TinyCausalLM, block_diagonal_causal, token_losses
from tokens_helpers import write_eod, write_unique

from detsamplers import ReproducibilityError
from detsamplers.loader import DataLoader
from detsamplers.testing import Config, check_resume, configs, pause_points
from detsamplers.tokens import TokenCorpus, TokenMixture, TokenSequences, collate_tokens
from detsamplers.tokens._pack import PACK_HEADER, best_fit_decreasing, count_bins

#: Files of document lengths, some longer than the sequences they are packed into.
packed_corpora = st.lists(
    st.lists(st.integers(1, 24), min_size=1, max_size=14), min_size=1, max_size=3
)
FILES = [[5, 9, 3, 14, 2, 7, 11], [6, 1, 8, 20, 4], [10, 3, 3, 9]]


def bins_of(sequences: TokenSequences) -> list[list[int]]:
    """Each sequence's real tokens (no padding), read piece by piece from the corpus."""
    out = []
    for k in range(len(sequences)):
        _, firsts, counts, _ = sequences.pieces(k)
        out.append([t for f, c in zip(firsts, counts, strict=True)
                    for t in sequences.corpus.read(int(f), int(f + c)).tolist()])  # fmt: skip
    return out


def reference_bfd(sizes: list[int], capacity: int) -> list[int]:
    """Best-fit-decreasing written plainly: the fullest bin that fits, the first of equals."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])  # stable: ties in given order
    rooms: list[int] = []
    placed = [0] * len(sizes)
    for i in order:
        fits = [b for b, room in enumerate(rooms) if room >= sizes[i]]
        if fits:
            b = min(fits, key=lambda b: (rooms[b], b))
        else:
            rooms.append(capacity)
            b = len(rooms) - 1
        rooms[b] -= sizes[i]
        placed[i] = b
    return placed


@given(sizes=st.lists(st.integers(1, 12), max_size=40), capacity=st.integers(12, 20))
def test_best_fit_decreasing_places_each_piece_where_a_plain_reference_does(
    sizes: list[int], capacity: int
) -> None:
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    placed, count = best_fit_decreasing([sizes[i] for i in order], capacity)
    expected = reference_bfd(sizes, capacity)
    assert [expected[i] for i in order] == placed
    assert count == len(set(expected)) == count_bins([sizes[i] for i in order],
                                                     [0, len(sizes)], capacity)[0]  # fmt: skip


@given(files=packed_corpora, seq_len=st.integers(1, 12), seed=st.integers(0, 2**32),
       window=st.integers(1, 6), long=st.sampled_from(["split", "truncate"]))  # fmt: skip
def test_every_document_or_each_of_its_pieces_is_in_exactly_one_bin_whole(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    window: int,
    long: str,
) -> None:
    corpus = write_unique(tmp_path_factory.mktemp("c"), files)
    sequences = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=window,
                               long_documents=long)  # fmt: skip
    capacity = seq_len + 1
    bins = bins_of(sequences)
    assert all(1 <= len(b) <= capacity for b in bins)  # no bin over L + 1, none empty
    seen = [t for b in bins for t in b]
    assert len(seen) == len(set(seen))  # no token twice
    lengths = [n for f in files for n in f]
    starts = np.cumsum([0, *lengths]).tolist()
    expected: list[int] = []
    for d, n in enumerate(lengths):
        expected += range(
            starts[d] + 1, starts[d] + 1 + (n if long == "split" else min(n, capacity))
        )
        if n <= capacity:  # a document that fits is whole, in storage order, in one bin
            doc = list(range(starts[d] + 1, starts[d + 1] + 1))
            holder = [b for b in bins if doc[0] in b]
            assert len(holder) == 1
            at = holder[0].index(doc[0])
            assert holder[0][at : at + n] == doc
    assert sorted(seen) == expected  # every piece once; truncate keeps each first C tokens
    stats = sequences.stats()
    assert stats["sequences"] == len(bins) and stats["padding_tokens"] == len(
        bins
    ) * capacity - len(seen)
    assert stats["truncated_tokens"] == corpus.num_tokens - len(seen)
    # Best-fit per window needs at most one bin more than twice the tokens' lower bound.
    assert len(bins) <= 2 * -(-len(seen) // capacity) + -(-corpus.num_documents // window)


@given(files=packed_corpora, seq_len=st.integers(1, 12), seed=st.integers(0, 99))
def test_packed_features_mask_document_ends_and_padding_and_restart_positions(
    tmp_path_factory: pytest.TempPathFactory, files: list[list[int]], seq_len: int, seed: int
) -> None:
    corpus = write_eod(tmp_path_factory.mktemp("c"), files, seed)
    sequences = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=4)
    rows = sequences.getitems_in_epochs([(0, k) for k in range(len(sequences))])
    for k, out in enumerate(rows):
        assert {key: v.tolist() for key, v in out.items()} == {
            key: v.tolist() for key, v in sequences.at(k).items()
        }
        docs, _, counts, closes = sequences.pieces(k)
        used = int(counts.sum())
        tokens = np.concatenate([bins_of_one(sequences, k), np.zeros(seq_len + 1 - used, int)])
        assert out["input_ids"].tolist() == tokens[:-1].tolist()
        expected_labels = tokens[1:].copy()
        ends = np.cumsum(counts)[closes] - 1
        expected_labels[ends[ends < seq_len]] = -100
        expected_labels[used:] = -100  # padding is never a target's input
        assert out["labels"].tolist() == expected_labels.tolist()
        pad = seq_len + 1 - used
        piece_counts = [*counts.tolist(), *([pad] if pad else [])]
        positions = [p for c in piece_counts for p in range(c)][:seq_len]
        assert out["position_ids"].tolist() == positions
        owners = [*docs.tolist(), -1]
        expected_ids = [d for d, c in zip(owners, piece_counts, strict=False) for _ in range(c)]
        assert out["document_ids"].tolist() == expected_ids[:seq_len]
        inner = np.cumsum(piece_counts)[:-1]
        cu = [0, *inner[inner < seq_len].tolist()]
        assert out["cu_seqlens"].tolist() == cu + [seq_len] * (seq_len + 1 - len(cu))


def bins_of_one(sequences: TokenSequences, k: int) -> np.ndarray:
    _, firsts, counts, _ = sequences.pieces(k)
    return np.concatenate([sequences.corpus.read(int(f), int(f + c))
                           for f, c in zip(firsts, counts, strict=True)])  # fmt: skip


@settings(max_examples=25)
@given(files=packed_corpora, seq_len=st.integers(1, 12), seed=st.integers(0, 2**32),
       window=st.integers(1, 5), seeks=st.lists(st.integers(0, 10**6), max_size=6))  # fmt: skip
def test_a_seek_from_a_fresh_object_gives_the_bins_of_a_straight_run(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    window: int,
    seeks: list[int],
) -> None:
    folder = tmp_path_factory.mktemp("c")
    corpus = write_unique(folder, files)
    straight = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=window)
    expected = [straight.at(k)["input_ids"].tolist() for k in range(len(straight))]
    assert len(list(folder.glob("*.pack-*.npy"))) == 1
    for cached in (True, False):  # the index read back, or built again
        for k in [s % len(expected) for s in seeks]:
            if not cached:
                for index in folder.glob("*.pack-*.npy"):
                    index.unlink()
            fresh = TokenSequences(corpus, seq_len, mode="pack", seed=seed, window=window)
            assert fresh.at(k, epoch=3)["input_ids"].tolist() == expected[k]  # bins fixed


def factory_for(folder: Path, seed: int, collate: Any = None) -> Any:
    sequences = TokenSequences(write_eod(folder, FILES), 6, mode="pack", seed=seed, window=4)

    def factory(rank: int, world_size: int, num_workers: int, batch_size: int = 2) -> DataLoader:
        return DataLoader(sequences, batch_size=batch_size, shuffle=True, seed=seed,
                          num_workers=num_workers, collate_fn=collate)  # fmt: skip

    return factory


@settings(max_examples=10, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    pauses=pause_points(batches=9),
    resume=configs(num_workers=st.just(0), batch_sizes=st.sampled_from([None, 1, 3])),
)
def test_packed_sequences_resume_exactly_on_any_world_size_batch_size_and_pause(
    tmp_path_factory: pytest.TempPathFactory, seed: int, pauses: list[int], resume: Config
) -> None:
    factory = factory_for(tmp_path_factory.mktemp("c"), seed)
    report = check_resume(factory, pauses, batches=9, resume=[resume])
    assert report.pauses == pauses


@pytest.mark.workers
def test_packed_flattened_batches_resume_exactly_with_two_workers(tmp_path: Path) -> None:
    factory = factory_for(tmp_path, 11, collate_tokens)
    check_resume(factory, [2, 5], batches=7, run=Config(num_workers=2),
                 resume=[Config(num_workers=0), Config(world_size=3, num_workers=2,
                                                       batch_size=1)])  # fmt: skip


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_every_bin_is_trained_once_per_epoch_on_any_world_size(
    tmp_path: Path, world_size: int
) -> None:
    sequences = TokenSequences(write_eod(tmp_path, FILES), 6, mode="pack", seed=3, window=4)
    loader = DataLoader(sequences, batch_size=1, shuffle=True, seed=3, collate_fn=collate_tokens)
    n = len(sequences)
    streams = [
        iter(loader.get_data_loader(repeat=True, num_replicas=world_size, rank=r))
        for r in range(world_size)
    ]
    global_order: list[list[int]] = []
    for _ in range(-(-2 * n // world_size)):  # two epochs, rank after rank (global order)
        for stream in streams:
            global_order.append(next(stream)["input_ids"][0].tolist())
    bins = sorted(sequences[k]["input_ids"].tolist() for k in range(n))
    for epoch in range(2):
        assert sorted(global_order[epoch * n : (epoch + 1) * n]) == bins  # each bin once
    assert global_order[:n] != global_order[n : 2 * n]  # a new order of the same bins
    single = iter(loader.get_data_loader(repeat=True))
    assert [next(single)["input_ids"][0].tolist() for _ in range(2 * n)] == global_order[: 2 * n]


def test_a_packed_batch_gives_the_loss_of_each_document_run_alone(tmp_path: Path) -> None:
    corpus = write_eod(tmp_path, [[3, 7, 2, 9, 5, 4, 6, 8, 1, 5, 11, 2]], seed=4)
    sequences = TokenSequences(corpus, 16, mode="pack", seed=2, window=12)
    n = len(sequences)  # one batch of every bin: some are padded
    loader = DataLoader(sequences, batch_size=n, shuffle=True, seed=2, collate_fn=collate_tokens)
    batch = next(iter(loader.get_data_loader(repeat=True)))
    torch.manual_seed(0)
    model = TinyCausalLM(max_len=16).double().eval()
    with torch.no_grad():
        batched = token_losses(model, batch, block_diagonal_causal(batch["document_ids"]))
        assert (batch["document_ids"] == -1).any()  # padding in the batch
        alone = torch.zeros_like(batched)
        documents = 0
        flat = {key: batch[key].reshape(1, -1) for key in ("input_ids", "labels", "document_ids")}
        for start, stop in itertools.pairwise(batch["cu_seqlens"].tolist()):
            if stop == start:
                continue
            piece = {key: value[:, start:stop] for key, value in flat.items()}
            assert piece["document_ids"].unique().numel() == 1  # one document per segment
            piece["position_ids"] = torch.arange(stop - start)[None]
            causal = torch.ones(1, stop - start, stop - start, dtype=torch.bool).tril()
            alone.view(1, -1)[:, start:stop] = token_losses(model, piece, causal)
            documents += int(piece["document_ids"][0, 0]) >= 0
        assert documents > 3
        assert torch.allclose(batched, alone, rtol=0, atol=1e-10)
        causal_only = torch.ones(n, 16, 16, dtype=torch.bool).tril()
        assert not torch.allclose(token_losses(model, batch, causal_only), alone, atol=1e-6)


# -- bad input -------------------------------------------------------------------------------


def test_a_window_or_long_documents_out_of_range_is_refused_naming_it(tmp_path: Path) -> None:
    corpus = write_eod(tmp_path, FILES)
    with pytest.raises(
        ValueError, match="window should be a positive integer value, but got window=0"
    ):
        TokenSequences(corpus, 4, mode="pack", window=0)
    with pytest.raises(
        TypeError,
        match="window should be a positive integer value, but got window=True of type bool",
    ):
        TokenSequences(corpus, 4, mode="pack", window=True)
    with pytest.raises(ValueError, match=r"long_documents should be one of 'split', 'truncate', "
                                         r"but got long_documents='drop'"):  # fmt: skip
        TokenSequences(corpus, 4, mode="pack", long_documents="drop")
    with pytest.raises(
        ValueError, match="seq_len should be a positive integer value, but got seq_len=0"
    ):
        TokenSequences(corpus, 0, mode="pack")
    with pytest.raises(ValueError, match=r"mode should be one of 'chunk', 'concat', 'pack'"):
        TokenSequences(corpus, 4, mode="packed")


def test_a_state_from_another_window_length_or_long_documents_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    corpus = write_eod(tmp_path, FILES)

    def train(sequences: TokenSequences) -> Any:
        return DataLoader(sequences, batch_size=2, shuffle=True, seed=1).get_data_loader(
            repeat=True
        )

    saving = train(TokenSequences(corpus, 6, mode="pack", seed=1, window=4))
    next(iter(saving))
    state = json.loads(json.dumps(saving.state_dict()))
    assert state["loader"]["data"]["window"] == 4 and len(json.dumps(state)) < 1024
    train(TokenSequences(corpus, 6, mode="pack", seed=1, window=4)).load_state_dict(state)
    cases = [
        (dict(seq_len=6, window=5), "window is 4 in the state but 5 here"),
        (dict(seq_len=5, window=4), "seq_len is 6 in the state but 5 here"),
        (dict(seq_len=6, window=4, long_documents="truncate"),
         "long_documents is 'split' in the state but 'truncate' here"),
        (dict(seq_len=6, window=4, mode="concat"), "mode is 'pack' in the state but 'concat'"),
    ]  # fmt: skip
    for arguments, message in cases:
        target = TokenSequences(corpus, **{"mode": "pack", "seed": 1, **arguments})
        with pytest.raises(ReproducibilityError, match=r"saved over another dataset .*" + message):
            train(target).load_state_dict(state)
        with pytest.raises(ReproducibilityError, match=message):
            target.load_state_dict(TokenSequences(corpus, 6, mode="pack", seed=1,
                                                  window=4).state_dict())  # fmt: skip


# -- the cached index ------------------------------------------------------------------------


def packed(folder: Path) -> TokenSequences:
    """Sequences over the corpus in ``folder``, written on the first call only (a rewrite
    changes the files' times, and so the index's name)."""
    if not (folder / "part0.bin").exists():
        write_eod(folder, FILES)
    paths = sorted(folder.glob("part*.bin"))
    corpus = TokenCorpus(paths, dtype="uint16", eod_id=0, progress=False)
    return TokenSequences(corpus, 5, mode="pack", seed=7, window=3)


def index_file(folder: Path) -> Path:
    (found,) = folder.glob("*.pack-*.npy")
    return found


def test_the_index_is_cached_beside_the_corpus_and_read_back(tmp_path: Path) -> None:
    first = packed(tmp_path)
    where = index_file(tmp_path)
    stored = np.load(where, allow_pickle=False)
    assert len(stored) == PACK_HEADER + -(-first.corpus.num_documents // 3) + 1
    assert stored[-1] == len(first)
    before = where.stat().st_mtime_ns
    again = packed(tmp_path)
    assert where.stat().st_mtime_ns == before  # read, not rewritten
    assert [again[k]["input_ids"].tolist() for k in range(len(again))] == [
        first[k]["input_ids"].tolist() for k in range(len(first))
    ]
    other = TokenSequences(first.corpus, 5, mode="pack", seed=7, window=4)
    assert len(list(tmp_path.glob("*.pack-*.npy"))) == 2 and len(other) > 0  # one per setting


def _truncate(where: Path) -> None:
    where.write_bytes(where.read_bytes()[:-8])


def _lying_header(where: Path) -> None:
    stored = np.load(where)
    data = where.read_bytes()
    header = data[: len(data) - stored.nbytes].replace(
        f"({len(stored)},)".encode(), f"({len(stored) + 10**9},)".encode()
    )
    where.write_bytes(header + data[len(data) - stored.nbytes :])


def _fifo(where: Path) -> None:
    where.unlink()
    os.mkfifo(where)


def _other_binding(where: Path) -> None:
    stored = np.load(where)
    stored[2] += 1
    np.save(where, stored)


@pytest.mark.parametrize("spoil", [_truncate, _lying_header, _fifo, _other_binding])
def test_a_hostile_cached_index_is_rebuilt_never_trusted_nor_waited_on(
    tmp_path: Path, spoil: Any
) -> None:
    expected = [s["input_ids"].tolist() for s in (lambda q: [q[k] for k in range(len(q))])(
        packed(tmp_path))]  # fmt: skip
    where = index_file(tmp_path)
    spoil(where)
    again = packed(tmp_path)  # a FIFO would block an open: it must not be opened
    assert [again[k]["input_ids"].tolist() for k in range(len(again))] == expected
    assert where.is_file() and np.load(where, allow_pickle=False)[-1] == len(expected)


def test_a_cached_index_whose_counts_lie_consistently_fails_naming_the_file(
    tmp_path: Path,
) -> None:
    first = packed(tmp_path)
    where = index_file(tmp_path)
    stored = np.load(where)
    counts = stored[PACK_HEADER:]
    assert len(counts) > 2
    counts[1:-1] += 1  # window 0 one bin more, the last one less: still increasing
    if not (np.diff(counts) > 0).all():
        pytest.skip("the last window has a single bin")
    np.save(where, stored)
    lying = packed(tmp_path)
    assert len(lying) == len(first)
    with pytest.raises(ValueError, match=rf"pack index {where} should hold the bins of each "
                                         r"window, but window 0 packs into \d+ bins where it "
                                         r"says \d+; delete the file to rebuild it"):  # fmt: skip
        lying[0]


def test_a_mixture_of_packed_and_concatenated_corpora_resumes_on_another_world_size(
    tmp_path: Path,
) -> None:
    web = TokenSequences(write_eod(tmp_path / "web", FILES), 6, mode="pack", seed=5, window=4)
    code = TokenSequences(write_eod(tmp_path / "code", FILES[:2], seed=1), 6, mode="concat",
                          seed=5)  # fmt: skip
    mixture = TokenMixture([web, code], weights=[0.5, 0.5], seed=5)

    def factory(rank: int, world_size: int, num_workers: int, batch_size: int = 2) -> Any:
        return DataLoader(mixture, sampler=mixture.sampler, batch_size=batch_size, seed=5,
                          num_workers=num_workers, collate_fn=collate_tokens)  # fmt: skip

    resume = [Config(world_size=2), Config(world_size=3, batch_size=1)]
    report = check_resume(factory, [3], batches=8, resume=resume)
    assert report.pauses == [3]
    rows = [mixture[k] for k in range(12)]
    assert any((row["document_ids"] == -1).any() for row in rows)  # packed rows among them


def test_a_cached_index_of_another_length_is_rebuilt_without_reading_it_all(
    tmp_path: Path,
) -> None:
    first = packed(tmp_path)
    where = index_file(tmp_path)
    np.lib.format.open_memmap(where, mode="w+", dtype=np.int64, shape=(1 << 27,)).flush()
    assert where.stat().st_size > 1 << 30  # a gigabyte file, sparse on disk
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    again = packed(tmp_path)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 * 1024  # no copy
    assert len(again) == len(first) and where.stat().st_size < 4096


@settings(max_examples=40, deadline=None)
@given(files=packed_corpora, seq_len=st.integers(1, 12), window=st.integers(1, 6),
       block=st.integers(1, 9), long=st.sampled_from(["split", "truncate"]))  # fmt: skip
def test_the_index_built_block_by_block_is_the_index_built_in_one_block(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]], seq_len: int, window: int, block: int, long: str,
) -> None:  # fmt: skip
    from detsamplers.tokens import _pack, _pack_index

    corpus = write_eod(tmp_path_factory.mktemp("c"), files, 0)
    whole = _pack.PackOrder(corpus, seq_len, 3, window, long, cache=False)
    reported: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_pack, "BUILD_BLOCK", block)  # blocks of one window and more
        patch.setattr(_pack_index, "PASS_POSITIONS", block)  # the compiled build's passes
        patch.setattr(_pack_index, "SCAN_RUN", block)  # and its runs of ends
        blocks = _pack.PackOrder(corpus, seq_len, 3, window, long, cache=False,
                                 progress=reported.append)  # fmt: skip
    assert blocks._cumulative.tolist() == whole._cumulative.tolist()
    assert blocks.stats() == whole.stats()
    assert reported == sorted(reported) and reported[-1] == corpus.num_documents
