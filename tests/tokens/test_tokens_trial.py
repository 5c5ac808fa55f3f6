"""Token streams in the trial loop, as real processes: SIGTERM, relaunch, resize, resume.

torchrun launches examples/tokens_trial.py (a tiny GPT, gloo on CPU, ``chunk`` sequences
of a corpus of whole sequences, so that every token is in one) on 2 ranks: straight, and
preempted by SIGTERM to one rank in the middle of the first epoch. The preempted run is
run again from its checkpoint on 2 ranks (the three runs in one launch: only the disk
carries over) and, from a copy, on 3 ranks in a launch of its own. Every rank records the
sequences it trained; a sequence ``k`` of ``chunk`` is the corpus's tokens
``[k(L + 1), (k + 1)(L + 1))`` (NOTE [ token sequences ]), so the records count every
token by its offset in the corpus.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from detsamplers.tokens import TokenCorpus
from detsamplers.trial._demo import run_env, torchrun
from tests.helpers import wait_agents

pytestmark = pytest.mark.distributed

HERE = Path(__file__).resolve().parent
SEQ_LEN, SEQUENCES, GLOBAL_BATCH, VOCAB = 16, 60, 6, 64
EPOCH = SEQUENCES // GLOBAL_BATCH  # 10 global batches
MAX_BATCHES = 2 * EPOCH
SIGNAL_AT = 6  # mid first epoch


def write_corpus(path: Path) -> int:
    """Random documents ending with 0, cut to exactly SEQUENCES windows of L + 1 tokens."""
    rng = np.random.default_rng(5)
    total = SEQUENCES * (SEQ_LEN + 1)
    docs = [np.append(rng.integers(1, VOCAB, size=n - 1), 0) for n in rng.integers(2, 40, 200)]
    tokens = np.concatenate(docs)[:total]
    tokens[-1] = 0
    tokens.astype(np.uint16).tofile(path)
    return total


def rows(folder: Path, ranks: int) -> list[dict[str, Any]]:
    out = []
    for rank in range(ranks):
        path = folder / f"tokens-rank{rank}.jsonl"
        out += [json.loads(line) for line in path.read_text().splitlines()]
    return out


def offsets_per_epoch(records: list[dict[str, Any]]) -> dict[int, Counter[int]]:
    """How often each corpus offset was trained (as an input or its last label), per epoch."""
    counts: dict[int, Counter[int]] = {}
    for row in records:
        seen = counts.setdefault(row["batch"] // EPOCH, Counter())
        for k in row["indices"]:
            seen.update(range(k * (SEQ_LEN + 1), (k + 1) * (SEQ_LEN + 1)))
    return counts


def args_for(corpus: Path, ckpt: Path, record: Path, *extra: str) -> list[str]:
    return [
        f"--corpus={corpus}", f"--checkpoint-dir={ckpt}", f"--record-dir={record}",
        f"--max-batches={MAX_BATCHES}", f"--global-batch-size={GLOBAL_BATCH}",
        f"--seq-len={SEQ_LEN}", f"--vocab-size={VOCAB}", "--resume", "--stop-check-period=1",
        *extra,
    ]  # fmt: skip


def launch_tokens(ranks: int, runs: list[dict[str, Any]], log: Path) -> None:
    """torchrun the token trial on ``ranks`` ranks, once per entry of ``runs`` in one launch
    (tests/trial/in_one_launch.py); fail with the log's tail, never hang."""
    env = run_env()
    root = HERE.parents[1]  # this checkout's detsamplers, its examples and the test workers
    folders = [str(HERE), str(HERE.parent / "trial"), str(root / "examples"), str(root)]
    env["PYTHONPATH"] = os.pathsep.join(f for f in [*folders, env.get("PYTHONPATH", "")] if f)
    env["PYTHONFAULTHANDLER"] = "1"
    plan = log.with_name(f"{log.name}-plan-{ranks}.json")
    module, trial_class = "tokens_trial_worker", "Signalled"
    plan.write_text(json.dumps({"module": module, "trial_class": trial_class, "runs": runs}))
    with open(log, "a") as out:
        agent = subprocess.Popen(
            torchrun(ranks, [str(plan)], "in_one_launch"), stdout=out, stderr=subprocess.STDOUT,
            env=env,
        )  # fmt: skip
        codes = wait_agents([(agent, log)], 240)
    assert codes == [0], log.read_text()[-4000:]


def test_a_tiny_gpt_on_token_sequences_survives_sigterm_and_a_relaunch_on_3_ranks(
    tmp_path: Path,
) -> None:
    corpus_path = tmp_path / "train.bin"
    total = write_corpus(corpus_path)
    TokenCorpus(corpus_path, dtype="uint16", eod_id=0, progress=False)  # the index, once
    log = tmp_path / "log"
    straight, ckpt = tmp_path / "straight", tmp_path / "ckpt"
    weights = tmp_path / "straight.pt"
    first, second, resumed = tmp_path / "first", tmp_path / "second", tmp_path / "resumed.pt"
    resized = tmp_path / "ckpt-on-3"
    signal = {"TRIAL_SIGNAL_AT": str(SIGNAL_AT), "TRIAL_SIGNAL_RANK": "1"}
    # One launch on 2 ranks: straight; SIGTERM to rank 1 (its checkpoints copied for the run
    # on 3); the same command again, resuming from the disk (nothing kept in memory).
    runs = [
        {"argv": args_for(corpus_path, straight, straight, f"--weights-out={weights}")},
        {
            "argv": args_for(corpus_path, ckpt, first),
            "env": signal,
            "copy": [[str(ckpt), str(resized)]],
        },
        {"argv": args_for(corpus_path, ckpt, second, f"--weights-out={resumed}")},
    ]
    launch_tokens(2, runs, log)
    metrics = [json.loads(line) for line in (resized / "metrics.jsonl").read_text().splitlines()]
    stops = [row["batches_trained"] for row in metrics if row["type"] == "stop"]
    assert stops == [SIGNAL_AT + 1]  # every rank stopped after the signalled batch
    on_3 = tmp_path / "on-3"
    launch_tokens(3, [{"argv": args_for(corpus_path, resized, on_3)}], log)

    # Same world size: the preempted run's batches and final weights are the straight run's.
    a = torch.load(weights, weights_only=True)
    b = torch.load(resumed, weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    reference = rows(straight, 2)
    stitched = rows(first, 2) + rows(second, 2)
    key = lambda row: (row["batch"], row["rank"])  # noqa: E731
    assert sorted(stitched, key=key) == sorted(reference, key=key)

    # Every token of the corpus exactly once per epoch, on 2 ranks then 3.
    resized_run = rows(first, 2) + rows(on_3, 3)
    assert sorted({row["batch"] for row in resized_run}) == list(range(MAX_BATCHES))
    counts = offsets_per_epoch(resized_run)
    assert sorted(counts) == [0, 1]
    for epoch, seen in counts.items():
        assert seen == dict.fromkeys(range(total), 1), epoch
    # The records are the corpus's tokens at those offsets: inputs and shifted labels.
    tokens = np.fromfile(corpus_path, dtype=np.uint16).astype(np.int64)
    for row in resized_run:
        for k, inputs in zip(row["indices"], row["input_ids"], strict=True):
            assert inputs == tokens[k * (SEQ_LEN + 1) : (k + 1) * (SEQ_LEN + 1) - 1].tolist()
