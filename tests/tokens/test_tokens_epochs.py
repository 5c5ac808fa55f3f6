"""A new concat order every epoch, read at the epoch the loader knows; mixtures; the state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import corpora, write_eod, write_unique
from torch.utils.data import BatchSampler, ConcatDataset, SequentialSampler

from detsamplers import ReproducibilityError
from detsamplers.loader import DataLoader
from detsamplers.testing import Config, check_resume, configs, pause_points
from detsamplers.tokens import TokenCorpus, TokenMixture, TokenSequences, collate_tokens

FILES = [[5, 9, 3, 14, 2, 7, 11], [6, 1, 8, 20, 4], [10, 3, 3, 9]]


@given(files=corpora, seq_len=st.integers(1, 8), seed=st.integers(0, 2**32),
       block=st.integers(1, 6))  # fmt: skip
def test_concat_covers_every_token_once_in_each_of_several_epochs(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seq_len: int,
    seed: int,
    block: int,
) -> None:
    corpus = write_unique(tmp_path_factory.mktemp("c"), files)
    if corpus.num_tokens < seq_len + 1:
        return
    sequences = TokenSequences(corpus, seq_len, mode="concat", seed=seed, block_documents=block)
    n, total = len(sequences), corpus.num_tokens
    streams = []
    for epoch in range(4):
        pieces = [sequences.pieces(k, epoch) for k in range(n)]
        seen = np.concatenate(
            [corpus.read(f, f + c) for _, fs, cs, _ in pieces for f, c in zip(fs, cs, strict=True)]
        )
        assert len(seen) == n * (seq_len + 1) and len(np.unique(seen)) == len(seen)
        assert set(seen.tolist()) <= set(range(1, total + 1))
        assert total - len(seen) < seq_len + 1  # only the tail is left out
        # What a sequence holds is the window its pieces say.
        for k in range(n):
            assert (
                sequences.at(k, epoch)["input_ids"].tolist()
                == seen[k * (seq_len + 1) : (k + 1) * (seq_len + 1) - 1].tolist()
            )
        streams.append(seen.tolist())
    assert [sequences[k]["input_ids"].tolist() for k in range(n)] == [
        sequences.at(k, 0)["input_ids"].tolist() for k in range(n)
    ]
    documents = sum(len(lengths) for lengths in files)
    if documents >= 8:  # 4 epochs of one order: at most 1 / 8! ** 3
        assert any(stream != streams[0] for stream in streams[1:])


def test_chunk_reads_the_same_sequences_in_every_epoch(tmp_path: Path) -> None:
    sequences = TokenSequences(write_eod(tmp_path, FILES), 6, mode="chunk")
    for k in range(len(sequences)):
        assert sequences.at(k, 3)["input_ids"].tolist() == sequences[k]["input_ids"].tolist()


def test_golden_epoch_1_of_seed_0_is_a_new_concat_order_pinned(tmp_path: Path) -> None:
    docs = [np.append(np.arange(1, 1 + (d * 7) % 9 + 1) + 100 * d, 0) for d in range(50)]
    path = tmp_path / "golden.bin"
    np.concatenate(docs).astype(np.uint32).tofile(path)
    corpus = TokenCorpus(path, dtype="uint32", eod_id=0, cache=False, progress=False)
    concat = TokenSequences(corpus, 8, mode="concat", seed=0, block_documents=4)
    # Epoch 0 is the order pinned in test_tokens_sequences; epoch 1 starts with block 7.
    assert [concat.at(k, 1)["input_ids"].tolist() for k in range(2)] == [
        [2901, 2902, 2903, 2904, 2905, 2906, 0, 3001],
        [3003, 3004, 0, 2801, 2802, 2803, 2804, 2805],
    ]
    assert concat.at(0, 1)["document_ids"].tolist() == [29] * 7 + [30]
    assert concat.at(0, 0)["input_ids"].tolist() == [1701, 1702, 1703, 0, 1801, 0, 1601, 1602]


def rows(loader: Any, count: int) -> list[list[int]]:
    """The first ``count`` sequences (``input_ids``) of a training stream, in order."""
    out: list[list[int]] = []
    for batch in loader:
        out.extend(batch["input_ids"].tolist())
        if len(out) >= count:
            return out[:count]
    raise AssertionError("the stream ended")


@pytest.mark.parametrize("seeding", ["batch", "record"])
def test_the_loader_reads_each_sequence_at_the_epoch_of_its_sample(
    tmp_path: Path, seeding: str
) -> None:
    sequences = TokenSequences(write_eod(tmp_path, FILES), 6, mode="concat", seed=4,
                               block_documents=2)  # fmt: skip
    n = len(sequences)
    loader = DataLoader(sequences, batch_size=3, shuffle=True, seed=4, seeding=seeding,
                        collate_fn=collate_tokens)  # fmt: skip
    got = rows(loader.get_data_loader(repeat=True, skip_samples=n - 2), 3 * n)
    for epoch in range(3):
        want = sorted(sequences.at(k, epoch)["input_ids"].tolist() for k in range(n))
        first = max(0, epoch * n - (n - 2))
        part = got[first : (epoch + 1) * n - (n - 2)]
        assert all(row in want for row in part)
    assert sorted(got[2 : 2 + n]) == sorted(sequences.at(k, 1)["input_ids"].tolist()
                                           for k in range(n))  # fmt: skip
    assert sorted(got[2 : 2 + n]) != sorted(sequences.at(k, 0)["input_ids"].tolist()
                                           for k in range(n))  # fmt: skip


@pytest.mark.parametrize(
    ("world_size", "num_workers"),
    [(2, 0), pytest.param(3, 1, marks=pytest.mark.workers),
     pytest.param(4, 2, marks=pytest.mark.workers)],
)  # fmt: skip
def test_world_sizes_and_workers_read_the_same_epochs(
    tmp_path: Path, world_size: int, num_workers: int
) -> None:
    sequences = TokenSequences(write_eod(tmp_path, FILES), 6, mode="concat", seed=9)
    n = len(sequences)

    def global_rows(world: int, workers: int) -> list[list[int]]:
        loader = DataLoader(sequences, batch_size=1, shuffle=True, seed=9, num_workers=workers,
                            collate_fn=collate_tokens)  # fmt: skip
        streams = [iter(loader.get_data_loader(repeat=True, num_replicas=world, rank=r))
                   for r in range(world)]  # fmt: skip
        out: list[list[int]] = []
        while len(out) < 3 * n:
            for stream in streams:
                out.append(next(stream)["input_ids"][0].tolist())
        return out[: 3 * n]

    assert global_rows(world_size, num_workers) == global_rows(1, 0)


@pytest.mark.workers
@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    pauses=pause_points(batches=12),
    resume=configs(num_workers=st.integers(0, 2), batch_sizes=st.sampled_from([None, 1, 5])),
)
def test_concat_resumes_exactly_across_epochs_at_any_point_world_size_and_batch_size(
    tmp_path_factory: pytest.TempPathFactory, seed: int, pauses: list[int], resume: Config
) -> None:
    folder = tmp_path_factory.mktemp("resume")
    sequences = TokenSequences(write_eod(folder, FILES), 8, mode="concat", seed=seed,
                               block_documents=2)  # fmt: skip

    def factory(rank: int, world_size: int, num_workers: int, batch_size: int = 3) -> DataLoader:
        # The default collate: rows compare one by one across batch sizes.
        return DataLoader(sequences, batch_size=batch_size, shuffle=True, seed=seed,
                          num_workers=num_workers)  # fmt: skip

    assert 2 * len(sequences) < 12 * 3  # the run crosses two epochs' ends
    report = check_resume(factory, pauses, batches=12, resume=[resume])
    assert report.pauses == pauses


# -- mixtures ------------------------------------------------------------------------------


def mixture_of(folder: Path, seed: int, curriculum: Any = ()) -> TokenMixture:
    web = TokenSequences(write_unique(folder / "web", [[5, 9, 3, 14, 2], [7, 11, 6]]), 5,
                         mode="concat", seed=seed, block_documents=2)  # fmt: skip
    code = TokenSequences(write_unique(folder / "code", [[4, 7, 2, 6, 5, 3, 8]], first=1000), 5,
                          mode="concat", seed=seed + 1, block_documents=1)  # fmt: skip
    return TokenMixture([web, code], weights=[0.5, 0.5], seed=seed, curriculum=curriculum)


def component_epochs(mixture: TokenMixture, got: list[list[int]]) -> None:
    """Each component's records, in stream order, are each of its epochs' sequences once."""
    for c, sequences in enumerate(mixture.sequences):
        mine = [row for row in got if (row[0] >= 1000) == (c == 1)]
        n = len(sequences)
        epochs = len(mine) // n
        assert epochs >= 2, "the stream should cover two epochs of every component"
        seen = []
        for epoch in range(epochs):
            want = sorted(sequences.at(k, epoch)["input_ids"].tolist() for k in range(n))
            seen.append(mine[epoch * n : (epoch + 1) * n])
            assert sorted(seen[-1]) == want
        assert any(sorted(later) != sorted(seen[0]) for later in seen[1:])  # new concats


@given(seed=st.integers(0, 2**31), switch=st.integers(1, 30))
@settings(max_examples=10, deadline=None)
def test_a_mixture_reads_each_component_at_its_own_epoch_under_a_curriculum(
    tmp_path_factory: pytest.TempPathFactory, seed: int, switch: int
) -> None:
    mixture = mixture_of(tmp_path_factory.mktemp("m"), seed, curriculum=[(switch, [0.25, 0.75])])
    loader = DataLoader(mixture, sampler=mixture.sampler, batch_size=4, seed=seed,
                        collate_fn=lambda b: b)  # fmt: skip
    got = [r["input_ids"].tolist() for r in rows_of(loader.get_data_loader(repeat=True), 80)]
    component_epochs(mixture, got)
    # Rank 1 of 2 reads the odd samples of the same stream.
    other = rows_of(loader.get_data_loader(repeat=True, num_replicas=2, rank=1), 20)
    assert [r["input_ids"].tolist() for r in other] == got[1:40:2]


def rows_of(loader: Any, count: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for batch in loader:
        out.extend(batch)
        if len(out) >= count:
            return out[:count]
    raise AssertionError("the stream ended")


@pytest.mark.workers
@settings(max_examples=6, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    pauses=pause_points(batches=10),
    resume=configs(num_workers=st.integers(0, 2), batch_sizes=st.sampled_from([None, 1, 3])),
)
def test_a_mixture_resumes_exactly_on_any_world_size_workers_and_batch_size(
    tmp_path_factory: pytest.TempPathFactory, seed: int, pauses: list[int], resume: Config
) -> None:
    mixture = mixture_of(tmp_path_factory.mktemp("r"), seed, curriculum=[(11, [0.2, 0.8])])

    def factory(rank: int, world_size: int, num_workers: int, batch_size: int = 2) -> DataLoader:
        return DataLoader(mixture, sampler=mixture.sampler, batch_size=batch_size, seed=seed,
                          num_workers=num_workers)  # fmt: skip

    report = check_resume(factory, pauses, batches=10, resume=[resume])
    assert report.pauses == pauses


def test_a_concat_dataset_of_epoch_aware_sequences_is_refused(tmp_path: Path) -> None:
    mixture = mixture_of(tmp_path, 0)
    with pytest.raises(ValueError, match=r"ConcatDataset whose datasets\[0\] \(TokenSequences\)"):
        DataLoader(ConcatDataset(mixture.sequences), sampler=mixture.sampler, batch_size=2)


def test_a_training_stream_over_a_batch_sampler_is_refused_for_epoch_aware_data(
    tmp_path: Path,
) -> None:
    sequences = TokenSequences(write_eod(tmp_path, FILES), 6, mode="concat")
    loader = DataLoader(sequences, batch_sampler=BatchSampler(SequentialSampler(sequences), 2,
                                                              False))  # fmt: skip
    with pytest.raises(ValueError, match="records have no sample positions to tell the epoch"):
        loader.get_data_loader(repeat=True)
    first = next(iter(loader.get_data_loader(repeat=False)))  # validation reads epoch 0
    assert first["input_ids"][0].tolist() == sequences[0]["input_ids"].tolist()


def test_chunk_sequences_train_over_a_batch_sampler_since_their_epochs_are_all_alike(
    tmp_path: Path,
) -> None:
    sequences = TokenSequences(write_eod(tmp_path, FILES), 3, mode="chunk")
    assert (
        not sequences.epochs_matter
        and TokenSequences(sequences.corpus, 3, mode="concat").epochs_matter
    )
    loader = DataLoader(sequences, batch_sampler=BatchSampler(SequentialSampler(sequences), 2,
                                                              False))  # fmt: skip
    batches = iter(loader.get_data_loader(repeat=True))
    got = [row.tolist() for _ in range(12) for row in next(batches)["input_ids"]]
    passes = -(-24 // len(sequences))
    want = [sequences.at(k, epoch)["input_ids"].tolist()
            for epoch in range(passes) for k in range(len(sequences))]  # fmt: skip
    assert len(sequences) % 2 == 0 and got == want[:24]  # epoch 0's, pass after pass


# -- the dataset's fingerprint in the loader's state ---------------------------------------


def test_the_loader_state_refuses_another_corpus_mode_length_or_seed_naming_the_field(
    tmp_path: Path,
) -> None:
    corpus = write_eod(tmp_path / "a", [[5, 7, 3, 9, 4]])
    other = write_eod(tmp_path / "b", [[5, 7, 3, 9, 5]])

    def train(sequences: TokenSequences) -> Any:
        loader = DataLoader(sequences, batch_size=2, shuffle=True, seed=1)
        return loader.get_data_loader(repeat=True)

    saving = train(TokenSequences(corpus, 4, mode="concat", seed=1))
    next(iter(saving))
    state = json.loads(json.dumps(saving.state_dict()))  # a checkpoint's round trip
    assert state["loader"]["data"]["seq_len"] == 4
    assert len(json.dumps(state["loader"]["data"])) < 400
    train(TokenSequences(corpus, 4, mode="concat", seed=1)).load_state_dict(state)
    cases = [
        (TokenSequences(other, 4, mode="concat", seed=1), r"files is \[\['part0.bin', 56\]\] in"),
        (TokenSequences(corpus, 4, mode="chunk", seed=1), "mode is 'concat' in the state but"),
        (TokenSequences(corpus, 3, mode="concat", seed=1), "seq_len is 4 in the state but 3 here"),
        (TokenSequences(corpus, 4, mode="concat", seed=2), "seed is 1 in the state but 2 here"),
    ]
    for target, message in cases:
        with pytest.raises(ReproducibilityError, match=r"saved over another dataset .*" + message):
            train(target).load_state_dict(state)
    old = {**state, "loader": {k: v for k, v in state["loader"].items() if k != "data"}}
    resumed = train(TokenSequences(corpus, 4, mode="concat", seed=1))
    resumed.load_state_dict(old)  # a state saved before the loader kept the fingerprint
    assert resumed.state_dict()["position"] == state["position"]


def test_a_mixture_state_refuses_a_mixture_of_other_corpora(tmp_path: Path) -> None:
    mixture = mixture_of(tmp_path / "a", 3)
    loader = DataLoader(mixture, sampler=mixture.sampler, batch_size=2, seed=3)
    train = loader.get_data_loader(repeat=True)
    next(iter(train))
    state = train.state_dict()
    again = mixture_of(tmp_path / "a", 3)
    DataLoader(again, sampler=again.sampler, batch_size=2, seed=3).get_data_loader(
        repeat=True
    ).load_state_dict(state)
    web, code = mixture_of(tmp_path / "b", 3).sequences
    changed = TokenMixture([web, TokenSequences(code.corpus, 5, mode="concat", seed=9)],
                           weights=[0.5, 0.5], seed=3)  # fmt: skip
    with pytest.raises(ReproducibilityError, match=r"saved over another dataset .*components is"):
        DataLoader(changed, sampler=changed.sampler, batch_size=2, seed=3).get_data_loader(
            repeat=True
        ).load_state_dict(state)


def test_a_mixture_of_sequences_of_different_lengths_is_refused(tmp_path: Path) -> None:
    web, code = mixture_of(tmp_path, 0).sequences
    short = TokenSequences(code.corpus, 3, mode="concat")
    with pytest.raises(ValueError, match=r"sequences\[1\] has seq_len=3 but sequences\[0\] 5"):
        TokenMixture([web, short], weights=[1, 1], seed=0)
    with pytest.raises(TypeError, match="sequences should be a list of TokenSequences"):
        TokenMixture([web, range(3)], weights=[1, 1], seed=0)  # type: ignore[list-item]


@settings(max_examples=20, deadline=None)
@given(files=corpora, seed=st.integers(0, 2**32), block=st.integers(1, 4),
       picks=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10**6)), min_size=2,
                      max_size=9))  # fmt: skip
def test_a_batch_read_at_once_equals_its_sequences_read_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[int]],
    seed: int,
    block: int,
    picks: list[tuple[int, int]],
) -> None:
    corpus = write_unique(tmp_path_factory.mktemp("b"), files)
    if corpus.num_tokens < 3:
        return
    batch = TokenSequences(corpus, 2, mode="concat", seed=seed, block_documents=block)
    single = TokenSequences(corpus, 2, mode="concat", seed=seed, block_documents=block)
    pairs = [(epoch, k % len(batch)) for epoch, k in picks]
    got = batch.getitems_in_epochs(pairs)  # the blocks of every pair built in one call
    for (epoch, k), item in zip(pairs, got, strict=True):
        want = single.at(k, epoch)
        assert {key: value.tolist() for key, value in item.items()} == {
            key: value.tolist() for key, value in want.items()
        }


@settings(max_examples=20, deadline=None)
@given(web=corpora, code=corpora, seed=st.integers(0, 2**32),
       picks=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10**6)), min_size=1,
                      max_size=12))  # fmt: skip
def test_a_mixture_batch_read_by_component_equals_its_sequences_read_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    web: list[list[int]],
    code: list[list[int]],
    seed: int,
    picks: list[tuple[int, int]],
) -> None:
    folder = tmp_path_factory.mktemp("mb")
    first, second = write_unique(folder / "web", web), write_unique(folder / "code", code)
    if min(first.num_tokens, second.num_tokens) < 3:
        return
    mixture = TokenMixture([TokenSequences(first, 2, mode="concat", seed=seed, block_documents=2),
                            TokenSequences(second, 2, mode="chunk", seed=seed + 1)],
                           weights=[0.5, 0.5], seed=seed)  # fmt: skip
    calls: list[int] = []
    for c, part in enumerate(mixture.sequences):
        batch_path = part.getitems_in_epochs

        def counted(pairs: Any, c: int = c, batch_path: Any = batch_path) -> Any:
            calls.append(c)
            return batch_path(pairs)

        part.getitems_in_epochs = counted  # type: ignore[method-assign]
    pairs = [(epoch, k % len(mixture)) for epoch, k in picks]
    got = mixture.getitems_in_epochs(pairs)
    assert sorted(calls) == sorted({int(k >= len(mixture.sequences[0])) for _, k in pairs})
    assert len(got) == len(pairs)
    for (epoch, k), item in zip(pairs, got, strict=True):
        c = int(k >= len(mixture.sequences[0]))
        want = mixture.sequences[c].at(k - c * len(mixture.sequences[0]), epoch)
        assert {key: value.tolist() for key, value in item.items()} == {
            key: value.tolist() for key, value in want.items()
        }


def test_a_token_at_or_above_vocab_size_in_a_concat_sequence_names_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "big.bin"
    np.array([1, 2, 0, 3, 900, 0, 5, 0], dtype=np.uint16).tofile(path)
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0, vocab_size=512, progress=False)
    sequences = TokenSequences(corpus, 7, mode="concat", block_documents=1)
    with pytest.raises(ValueError, match=r"token file .*big.bin should hold token ids in \[0, "
                                         r"vocab_size=512\), but token 4 is 900"):  # fmt: skip
        sequences.at(0, 1)
