"""A resume in a fresh process; block starts found on disk (NOTE [ block starts on disk ])."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import write_lengths as write

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences, _block_file, _corpus, _remembered
from detsamplers.tokens import _concat as concat_module

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS = ("input_ids", "labels", "position_ids", "document_ids", "cu_seqlens")
#: Run in a fresh interpreter: for each mode, load its state file, open, resume, and print
#: the next batch (one process for the three modes: each mode opens the corpus anew).
RESUME = """
import json, sys
from pathlib import Path
from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens
path, sidecar, *runs = sys.argv[1:]
got = {}
for run in runs:
    mode, state = run.split("=", 1)
    saved = json.loads(Path(state).read_text())
    corpus = TokenCorpus(Path(path), lengths=[Path(sidecar)], progress=False)
    sequences = TokenSequences(corpus, 9, mode=mode, seed=5, block_documents=4, window=8,
                               outputs=%r)
    sequences.load_state_dict(saved["tokens"])
    train = DataLoader(sequences, batch_size=3, shuffle=True, seed=1,
                       collate_fn=collate_tokens).get_data_loader(repeat=True)
    train.load_state_dict(saved["loader"])
    got[mode] = {k: v.tolist() for k, v in next(iter(train)).items()}
print(json.dumps(got))
""".replace("%r", repr(OUTPUTS))


@pytest.fixture(autouse=True)
def settled(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Files count as settled at once; every answer kept in the process forgotten."""
    monkeypatch.setattr(_remembered, "RACY_NS", -(10**12))
    _corpus._BLOCK_STARTS.clear()
    yield
    _corpus._BLOCK_STARTS.clear()


def loader(corpus: TokenCorpus, mode: str) -> tuple[TokenSequences, DataLoader]:
    from detsamplers.tokens import collate_tokens

    sequences = TokenSequences(corpus, 9, mode=mode, seed=5, block_documents=4, window=8,
                               outputs=OUTPUTS)  # fmt: skip
    return sequences, DataLoader(sequences, batch_size=3, shuffle=True, seed=1,
                                 collate_fn=collate_tokens)  # fmt: skip


@pytest.mark.subprocess
def test_a_resume_in_a_fresh_process_from_a_state_file_gives_the_straight_runs_batch(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(7)
    path, sidecar = write(tmp_path, rng.integers(1, 8, size=60).tolist())
    corpus = TokenCorpus(path, lengths=[sidecar], progress=False)
    expected, runs = {}, []
    for mode in ("chunk", "concat", "pack"):
        sequences, built = loader(corpus, mode)
        straight = iter(built.get_data_loader(repeat=True))
        for _ in range(5):
            next(straight)
        train = built.get_data_loader(repeat=True, skip_samples=15)
        state = tmp_path / f"state-{mode}.json"
        saved = {"loader": train.state_dict(), "tokens": sequences.state_dict()}
        state.write_text(json.dumps(saved))
        expected[mode] = {k: v.tolist() for k, v in next(straight).items()}
        runs.append(f"{mode}={state}")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for _ in range(2):  # the second finds the block starts (concat) written by the first
        done = subprocess.run(
            [sys.executable, "-c", RESUME, str(path), str(sidecar), *runs],
            env=env, capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        assert json.loads(done.stdout) == expected


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=40), size=st.integers(1, 6))
def test_block_starts_kept_on_disk_equal_the_starts_read_from_the_ends(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], size: int
) -> None:
    folder = tmp_path_factory.mktemp("blocks")
    path, sidecar = write(folder, lengths)
    _corpus._BLOCK_STARTS.clear()
    first = TokenCorpus(path, lengths=[sidecar], progress=False).block_starts(size)
    expected = np.append(np.cumsum([0, *lengths])[::size][: -(-len(lengths) // size)], sum(lengths))
    assert first.tolist() == expected.tolist()
    kept = TokenCorpus(path, lengths=[sidecar], progress=False).block_file(size)
    assert kept is not None and kept.exists()
    _corpus._BLOCK_STARTS.clear()
    again = TokenCorpus(path, lengths=[sidecar], progress=False)
    assert again.block_starts(size).tolist() == expected.tolist()


def test_a_fresh_open_reads_no_block_start_when_the_file_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 1, 5, 9, 2, 6])
    TokenCorpus(path, lengths=[sidecar], progress=False)  # writes the ends cache
    TokenCorpus(path, lengths=[sidecar], progress=False).block_starts(3)
    _corpus._BLOCK_STARTS.clear()
    corpus = TokenCorpus(path, lengths=[sidecar], progress=False)
    reads: list[bool] = []
    starts = corpus.starts
    monkeypatch.setattr(
        corpus, "starts", lambda docs, check=True: reads.append(check) or starts(docs, check)
    )
    assert corpus.block_starts(3).tolist() == [0, 8, 23, 31]
    assert reads == []


def rewrite(kept: Path, change: int, value: int) -> None:
    stored = np.load(kept)
    stored[change] = value
    np.save(kept, stored)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda kept: kept.write_bytes(b"\x93NUMPY junk"),
        lambda kept: kept.write_bytes(kept.read_bytes()[:-8]),
        lambda kept: rewrite(kept, 0, 1),  # another magic
        lambda kept: rewrite(kept, -1, 10**6),  # a last start past the tokens
        lambda kept: rewrite(kept, -2, 0),  # starts that do not increase
        lambda kept: (kept.unlink(), kept.mkdir()),
    ],
    ids=["junk", "truncated", "magic", "past-the-end", "not-increasing", "a-folder"],
)
def test_a_stale_or_malformed_block_starts_file_is_ignored_and_the_starts_read_again(
    tmp_path: Path, spoil: object
) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 1, 5, 9, 2, 6])
    corpus = TokenCorpus(path, lengths=[sidecar], progress=False)
    corpus.block_starts(3)
    kept = corpus.block_file(3)
    assert kept is not None
    spoil(kept)  # type: ignore[operator]
    _corpus._BLOCK_STARTS.clear()
    again = TokenCorpus(path, lengths=[sidecar], progress=False)
    assert again.block_starts(3).tolist() == [0, 8, 23, 31]


def test_block_starts_of_files_changed_since_are_not_used(tmp_path: Path) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 1, 5, 9, 2, 6])
    TokenCorpus(path, lengths=[sidecar], progress=False).block_starts(3)
    path, sidecar = write(tmp_path, [1, 1, 4, 1, 5, 9, 2, 8])  # same size, other lengths
    _corpus._BLOCK_STARTS.clear()
    corpus = TokenCorpus(path, lengths=[sidecar], progress=False)
    assert corpus.block_starts(3).tolist() == [0, 6, 21, 31]


def test_a_forged_block_starts_file_bound_to_the_files_is_refused_at_the_batch_naming_it(
    tmp_path: Path,
) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 1, 5, 9, 2, 6])
    TokenCorpus(path, lengths=[sidecar], progress=False)  # writes the ends cache
    corpus = TokenCorpus(path, lengths=[sidecar], progress=False)
    corpus.block_starts(4)
    kept = corpus.block_file(4)
    assert kept is not None
    rewrite(kept, -2, 10)  # a well-formed header and increasing starts, but a wrong one
    _corpus._BLOCK_STARTS.clear()
    forged = TokenCorpus(path, lengths=[sidecar], progress=False)
    order = concat_module.ConcatOrder(forged, seed=0, block_documents=4)
    blocks = np.array([0], dtype=np.int64)
    with pytest.raises(ValueError, match=r"block starts file .*blocks-.*\.npy should hold"):
        order.laid_out(blocks, np.zeros(1, np.int64), np.zeros(1, np.int64))


def test_the_block_file_is_named_by_its_block_size_and_the_corpus_shape() -> None:
    names = {
        _block_file.block_file(Path("c.bin"), size, "uint16", None, 10).name for size in (1, 2)
    }
    assert len(names) == 2


@pytest.mark.parametrize("position", [-2, -3], ids=["a-block-end", "a-block-start"])
def test_a_forged_block_starts_file_of_a_corpus_of_several_files_is_refused_at_the_batch(
    tmp_path: Path, position: int
) -> None:
    pairs = [
        write(tmp_path, part, name) for part, name in (([3, 1, 4, 1], "a"), ([5, 9, 2, 6], "b"))
    ]
    paths, sidecars = [p for p, _ in pairs], [s for _, s in pairs]
    TokenCorpus(paths, lengths=sidecars, progress=False)  # writes the ends caches
    TokenCorpus(paths, lengths=sidecars, progress=False).block_starts(2)  # [0, 4, 9, 23, 31]
    kept = TokenCorpus(paths, lengths=sidecars, progress=False).block_file(2)
    assert kept is not None and kept.exists()
    # Starts still increasing inside [0, tokens]: past the file's own checks.
    rewrite(kept, position, int(np.load(kept)[position]) + 1)
    _corpus._BLOCK_STARTS.clear()
    forged = TokenCorpus(paths, lengths=sidecars, progress=False)
    order = concat_module.ConcatOrder(forged, seed=0, block_documents=2)
    blocks = np.array([1, 2], dtype=np.int64)
    zeros = np.zeros(2, np.int64)
    with pytest.raises(ValueError, match=r"block starts file .*blocks-.*\.npy should hold"):
        order.laid_out(blocks, zeros, zeros)
    with pytest.raises(ValueError, match=r"block starts file .*blocks-.*\.npy should hold"):
        order.prepare([(0, 31, 0)])


def test_a_forged_first_block_start_of_one_file_is_refused_at_the_batch(tmp_path: Path) -> None:
    path, sidecar = write(tmp_path, [3, 1, 4, 1, 5, 9, 2, 6])
    TokenCorpus(path, lengths=[sidecar], progress=False)  # writes the ends cache
    TokenCorpus(path, lengths=[sidecar], progress=False).block_starts(2)  # [0, 4, 9, 23, 31]
    kept = TokenCorpus(path, lengths=[sidecar], progress=False).block_file(2)
    assert kept is not None
    rewrite(kept, -3, 8)  # block 2 starts at 8, not 9: its first document one token longer
    _corpus._BLOCK_STARTS.clear()
    forged = TokenCorpus(path, lengths=[sidecar], progress=False)
    order = concat_module.ConcatOrder(forged, seed=0, block_documents=2)
    blocks = np.array([2], dtype=np.int64)  # block 1's end is not in the batch
    with pytest.raises(ValueError, match=r"block starts file .*blocks-.*\.npy should hold"):
        order.laid_out(blocks, np.zeros(1, np.int64), np.zeros(1, np.int64))


def test_block_starts_read_from_a_file_give_the_same_laid_out_blocks_as_starts_read_again(
    tmp_path: Path,
) -> None:
    pairs = [
        write(tmp_path, part, name) for part, name in (([3, 1, 4, 1], "a"), ([5, 9, 2, 6], "b"))
    ]
    paths, sidecars = [p for p, _ in pairs], [s for _, s in pairs]
    TokenCorpus(paths, lengths=sidecars, progress=False)  # writes the ends caches
    read = concat_module.ConcatOrder(TokenCorpus(paths, lengths=sidecars, progress=False), 0, 2)
    _corpus._BLOCK_STARTS.clear()
    again = concat_module.ConcatOrder(TokenCorpus(paths, lengths=sidecars, progress=False), 0, 2)
    blocks, zeros = np.array([0, 1, 2], dtype=np.int64), np.zeros(3, np.int64)
    for one, other in zip(
        read.laid_out(blocks, zeros, zeros), again.laid_out(blocks, zeros, zeros), strict=True
    ):
        assert one.tolist() == other.tolist()
