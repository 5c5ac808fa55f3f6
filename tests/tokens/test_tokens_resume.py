"""Token sequences through detsamplers' DataLoader: one stream for any world size, workers,
batch size and resume point (the loader's own chain does it; here it is proved)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tokens_helpers import write_eod

from detsamplers.loader import DataLoader
from detsamplers.testing import Config, check_resume, configs, pause_points
from detsamplers.tokens import TokenSequences, collate_tokens

FILES = [[5, 9, 3, 14, 2, 7, 11], [6, 1, 8, 20, 4], [10, 3, 3, 9]]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corpus")


def factory_for(folder: Path, mode: str, seed: int, collate: Any = None) -> Any:
    sequences = TokenSequences(write_eod(folder, FILES), 6, mode=mode, seed=seed, block_documents=3)

    def factory(rank: int, world_size: int, num_workers: int, batch_size: int = 2) -> DataLoader:
        return DataLoader(sequences, batch_size=batch_size, shuffle=True, seed=seed,
                          num_workers=num_workers, collate_fn=collate)  # fmt: skip

    return factory


@pytest.mark.workers
@settings(max_examples=12)
@given(
    mode=st.sampled_from(["chunk", "concat"]),
    seed=st.integers(0, 2**31),
    pauses=pause_points(batches=9),
    resume=configs(num_workers=st.integers(0, 2), batch_sizes=st.sampled_from([None, 1, 3])),
)
def test_sequences_resume_exactly_on_any_world_size_workers_batch_size_and_pause(
    folder: Path, mode: str, seed: int, pauses: list[int], resume: Config
) -> None:
    factory = factory_for(folder / mode, mode, seed)
    report = check_resume(factory, pauses, batches=9, resume=[resume])
    assert report.pauses == pauses


# Every world size in this process; the worker processes' path on one rank and on an odd
# world size (2 and 4 ranks with workers took that path again).
@pytest.mark.parametrize(
    ("world_size", "num_workers"), [(1, 0), (2, 0), (3, 0), (4, 0), (1, 2), (3, 2)]
)
def test_every_sequence_is_trained_once_per_epoch_on_any_world_size(
    folder: Path, world_size: int, num_workers: int
) -> None:
    sequences = TokenSequences(write_eod(folder / "w", FILES), 6, mode="concat", seed=3)
    loader = DataLoader(sequences, batch_size=1, shuffle=True, seed=3, num_workers=num_workers,
                        collate_fn=collate_tokens)  # fmt: skip
    n = len(sequences)
    global_order: list[list[int]] = []
    streams = [
        iter(loader.get_data_loader(repeat=True, num_replicas=world_size, rank=r))
        for r in range(world_size)
    ]
    for _ in range(-(-2 * n // world_size)):  # two epochs, rank after rank (global order)
        for stream in streams:
            global_order.append(next(stream)["input_ids"][0].tolist())
    for epoch in range(2):
        expected = [sequences.at(k, epoch)["input_ids"].tolist() for k in range(n)]
        seen = global_order[epoch * n : (epoch + 1) * n]
        assert sorted(seen) == sorted(expected)  # each sequence of its epoch once
    assert sorted(global_order[:n]) != sorted(global_order[n : 2 * n])  # a new concat
    single = iter(loader.get_data_loader(repeat=True))
    assert [next(single)["input_ids"][0].tolist() for _ in range(2 * n)][: len(global_order)] == (
        global_order[: 2 * n]
    )


@pytest.mark.workers
def test_flattened_batches_resume_exactly_with_workers(folder: Path) -> None:
    factory = factory_for(folder / "flat", "concat", 11, collate_tokens)
    check_resume(factory, [2, 5], batches=7, run=Config(num_workers=2),
                 resume=[Config(num_workers=0), Config(num_workers=1)])  # fmt: skip
    batch = next(iter(factory(0, 1, 0).get_data_loader(repeat=True)))
    assert batch["cu_seqlens"].dtype == torch.int32 and batch["cu_seqlens"].shape == (13,)
    assert int(batch["cu_seqlens"][-1]) == 12 and np.all(np.diff(batch["cu_seqlens"].numpy()) >= 0)


FRESH_RESUME = """
import json, sys
from pathlib import Path
from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens

folder = Path(sys.argv[1])
saved = json.loads((folder / "states.json").read_text())
firsts = {}
for mode, state in saved.items():
    corpus = TokenCorpus(folder / "t.bin", dtype="uint16", lengths=[folder / "t.lengths.npy"])
    sequences = TokenSequences(corpus, 64, mode=mode, seed=3, window=50)
    sequences.load_state_dict(state["tokens"])
    train = DataLoader(sequences, batch_size=4, shuffle=True, seed=3,
                       collate_fn=collate_tokens).get_data_loader(repeat=True)
    train.load_state_dict(state["loader"])
    firsts[mode] = next(iter(train))["input_ids"].tolist()
print(json.dumps({"numpy.ma": "numpy.ma" in sys.modules, "firsts": firsts}))
"""


@pytest.mark.subprocess
def test_a_resume_in_a_fresh_process_takes_the_saved_batch_without_importing_numpy_ma(
    tmp_path: Path,
) -> None:
    import json
    import os
    import subprocess
    import sys

    from detsamplers.tokens import TokenCorpus

    # Over 2**16 documents: the ends cache is checked by regions as reads need them.
    lengths = np.random.default_rng(0).integers(1, 40, 70_000).astype(np.uint32)
    tokens = np.random.default_rng(1).integers(0, 500, int(lengths.sum())).astype(np.uint16)
    tokens.tofile(tmp_path / "t.bin")
    np.save(tmp_path / "t.lengths.npy", lengths)
    states, expected = {}, {}
    for mode in ("chunk", "concat", "pack"):
        corpus = TokenCorpus(
            tmp_path / "t.bin", dtype="uint16", lengths=[tmp_path / "t.lengths.npy"]
        )
        sequences = TokenSequences(corpus, 64, mode=mode, seed=3, window=50)
        loader = DataLoader(
            sequences, batch_size=4, shuffle=True, seed=3, collate_fn=collate_tokens
        )
        skip = 7 * len(sequences) + 4 * 101  # epoch 7, batch 101
        train = loader.get_data_loader(repeat=True, skip_samples=skip)
        states[mode] = {"loader": train.state_dict(), "tokens": sequences.state_dict()}
        expected[mode] = next(iter(train))["input_ids"].tolist()
    (tmp_path / "states.json").write_text(json.dumps(states))
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", FRESH_RESUME, str(tmp_path)], check=True,
                          env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True,
                          timeout=300)  # fmt: skip
    found = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert found["firsts"] == expected
    assert not found["numpy.ma"]  # np.unique's first call imports it: 15 to 20 ms
