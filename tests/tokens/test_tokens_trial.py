"""Token streams in the trial loop, as real processes: SIGTERM, relaunch, resize, resume.

torchrun launches examples/tokens_trial.py (a tiny GPT, gloo on CPU) on 2 ranks, then on 3.

- ``chunk`` sequences of a corpus of whole sequences, so that every token is in one: a run
  straight, and one preempted by SIGTERM to one rank in the middle of the first epoch; the
  preempted run is run again from its checkpoint on 2 ranks (only the disk carries over) and,
  from a copy, on 3 ranks. A sequence ``k`` of ``chunk`` is the corpus's tokens
  ``[k(L + 1), (k + 1)(L + 1))`` (NOTE [ token sequences ]), so the records count every token
  by its offset in the corpus.
- ``pack`` sequences (``mode="pack"``) of documents of at most ``L + 1`` tokens, so each is one
  piece: SIGTERM to one of 2 ranks mid-epoch, then a relaunch from its checkpoint on 3 ranks;
  every document must be trained exactly once per epoch, whole, with the corpus's own tokens.

Both scenarios share two launches (:func:`runs`: the four runs on 2 ranks in one, the two on
3 ranks in another) instead of four: a launch's agent and each rank import torch first, most
of a short run's CPU time. Every rank records the sequences it trained.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences
from detsamplers.trial._demo import run_env, torchrun
from tests.helpers import wait_agents

pytestmark = pytest.mark.distributed

HERE = Path(__file__).resolve().parent
SEQ_LEN, SEQUENCES, GLOBAL_BATCH, VOCAB = 16, 60, 6, 64
EPOCH = SEQUENCES // GLOBAL_BATCH  # 10 global batches
MAX_BATCHES = 2 * EPOCH
SIGNAL_AT = 6  # mid first epoch
# The pack scenario's corpus and run (documents of 2 to L + 1 tokens).
PACK_SEQ_LEN, PACK_WINDOW, PACK_SEED = 32, 24, 1
PACK_SIGNAL_AT = 5  # mid first epoch
SIGNAL = {"TRIAL_SIGNAL_RANK": "1"}  # the rank each scenario SIGTERMs


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


def pack_sequences(path: Path) -> TokenSequences:
    return TokenSequences(
        TokenCorpus(path, dtype="uint16", eod_id=0, progress=False),
        PACK_SEQ_LEN, mode="pack", seed=PACK_SEED, window=PACK_WINDOW,
    )  # fmt: skip


def pack_args(corpus: Path, ckpt: Path, record: Path, max_batches: int) -> list[str]:
    return [
        f"--corpus={corpus}", f"--checkpoint-dir={ckpt}", f"--record-dir={record}",
        f"--max-batches={max_batches}", f"--global-batch-size={GLOBAL_BATCH}",
        f"--seq-len={PACK_SEQ_LEN}", f"--vocab-size={VOCAB}", "--mode=pack",
        f"--window={PACK_WINDOW}", f"--seed={PACK_SEED}", "--resume", "--stop-check-period=1",
    ]  # fmt: skip


def write_pack_corpus(path: Path) -> list[list[int]]:
    """Documents of 2 to L + 1 tokens ending with 0, as many as make whole global batches."""
    rng = np.random.default_rng(11)
    docs = [np.append(rng.integers(1, VOCAB, size=n - 1), 0) for n in rng.integers(2, 34, 150)]
    while True:
        np.concatenate(docs).astype(np.uint16).tofile(path)
        if len(pack_sequences(path)) % GLOBAL_BATCH == 0:
            return [doc.tolist() for doc in docs]
        docs.pop()
        for pack in path.parent.glob(f"{path.name}.pack-*.npy"):
            pack.unlink()  # bound to the file's size and time: stale now


def documents_of(row: dict[str, Any]) -> list[tuple[int, list[int]]]:
    """Each sequence's documents and their tokens: the inputs, and the last label at the end."""
    out = []
    for inputs, labels, ids in zip(
        row["input_ids"], row["labels"], row["document_ids"], strict=True
    ):
        for doc in dict.fromkeys(d for d in ids if d >= 0):
            at = [i for i, d in enumerate(ids) if d == doc]
            tokens = [inputs[i] for i in at]
            if labels[at[-1]] != -100:  # the document runs to the sequence's last label
                tokens.append(labels[at[-1]])
            out.append((doc, tokens))
    return out


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


@dataclass
class Runs:
    """The runs of both scenarios under ``work``, and the error of a launch that failed (kept,
    so that each test fails naming its scenario, as tests/frameworks/framework_helpers.py's
    ``Shared`` does)."""

    work: Path
    total: int  # the chunk corpus's tokens
    docs: list[list[int]]  # the pack corpus's documents
    pack_batches: int  # the pack scenario's global batches (2 epochs)
    errors: dict[int, str] = field(default_factory=dict)  # by the launch's ranks

    def check(self, scenario: str) -> None:
        if self.errors:
            raise AssertionError(f"{scenario}: a shared launch failed:\n" + "\n".join(
                f"on {ranks} ranks: {error}" for ranks, error in self.errors.items()
            ))  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """One launch on 2 ranks: the chunk run straight; preempted by SIGTERM to rank 1 (its
    checkpoints copied for the run on 3); the same command again, resuming from the disk
    (nothing kept in memory); the pack run, preempted (its checkpoints copied as they
    stopped). Then one launch on 3 ranks: both preempted runs, resumed from their checkpoints."""
    work = tmp_path_factory.mktemp("tokens-trial")
    corpus_path = work / "train.bin"
    total = write_corpus(corpus_path)
    TokenCorpus(corpus_path, dtype="uint16", eod_id=0, progress=False)  # the index, once
    pack_corpus = work / "pack" / "train.bin"
    pack_corpus.parent.mkdir()
    docs = write_pack_corpus(pack_corpus)
    epoch = len(pack_sequences(pack_corpus)) // GLOBAL_BATCH
    shared = Runs(work, total, docs, 2 * epoch)
    log = work / "log"
    straight, ckpt = work / "straight", work / "ckpt"
    first, second = work / "first", work / "second"
    pack_ckpt = work / "pack" / "ckpt"
    on_2 = [
        {
            "argv": args_for(
                corpus_path, straight, straight, f"--weights-out={work / 'straight.pt'}"
            )
        },
        {
            "argv": args_for(corpus_path, ckpt, first),
            "env": {**SIGNAL, "TRIAL_SIGNAL_AT": str(SIGNAL_AT)},
            "copy": [[str(ckpt), str(work / "ckpt-on-3")]],
        },
        {"argv": args_for(corpus_path, ckpt, second, f"--weights-out={work / 'resumed.pt'}")},
        {
            "argv": pack_args(pack_corpus, pack_ckpt, work / "pack" / "first", shared.pack_batches),
            "env": {**SIGNAL, "TRIAL_SIGNAL_AT": str(PACK_SIGNAL_AT)},
            "copy": [[str(pack_ckpt), str(work / "pack" / "ckpt-stopped")]],
        },
    ]
    on_3 = [
        {"argv": args_for(corpus_path, work / "ckpt-on-3", work / "on-3")},
        {"argv": pack_args(pack_corpus, pack_ckpt, work / "pack" / "on-3", shared.pack_batches)},
    ]
    for ranks, launch_runs in ((2, on_2), (3, on_3)):
        try:
            launch_tokens(ranks, launch_runs, log)
        except AssertionError as error:
            shared.errors[ranks] = str(error)
            break  # the runs on 3 resume the runs on 2
    return shared


def stops(ckpt: Path) -> list[int]:
    """The batches trained when each stop of the run checkpointed in ``ckpt`` came."""
    metrics = [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines()]
    return [row["batches_trained"] for row in metrics if row["type"] == "stop"]


def test_a_tiny_gpt_on_token_sequences_survives_sigterm_and_a_relaunch_on_3_ranks(
    runs: Runs,
) -> None:
    runs.check("the chunk runs")
    tmp_path, total = runs.work, runs.total
    corpus_path = tmp_path / "train.bin"
    straight, first, second, on_3 = (tmp_path / n for n in ("straight", "first", "second", "on-3"))
    weights, resumed = tmp_path / "straight.pt", tmp_path / "resumed.pt"
    assert stops(tmp_path / "ckpt-on-3") == [SIGNAL_AT + 1]  # every rank stopped after it

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


def test_packed_sequences_give_every_document_once_per_epoch_across_sigterm_and_3_ranks(
    runs: Runs,
) -> None:
    runs.check("the pack runs")
    folder, docs, max_batches = runs.work / "pack", runs.docs, runs.pack_batches
    sequences = pack_sequences(folder / "train.bin")
    epoch = len(sequences) // GLOBAL_BATCH
    assert len(docs) > 2 * PACK_WINDOW and epoch >= 2 * PACK_SIGNAL_AT  # windows, mid-epoch
    assert stops(folder / "ckpt-stopped") == [PACK_SIGNAL_AT + 1]
    first, on_3 = folder / "first", folder / "on-3"
    records = rows(first, 2) + rows(on_3, 3)
    assert {row["rank"] for row in rows(on_3, 3)} == {0, 1, 2}
    assert sorted({row["batch"] for row in records}) == list(range(max_batches))
    # Each global batch holds the sequences a one-process loader gives it: the order does
    # not depend on the world size or on the preemption.
    loader = DataLoader(
        range(len(sequences)), batch_size=GLOBAL_BATCH, shuffle=True, seed=PACK_SEED
    )
    batches = islice(loader.get_data_loader(repeat=True), max_batches)
    expected = [sorted(batch.tolist()) for batch in batches]
    got: dict[int, list[int]] = {}
    for row in records:
        got.setdefault(row["batch"], []).extend(row["indices"])
    assert [sorted(got[b]) for b in range(max_batches)] == expected
    # Every document exactly once per epoch, whole, with the corpus's tokens.
    for e in range(2):
        seen: Counter[int] = Counter()
        for row in records:
            if row["batch"] // epoch == e:
                for doc, tokens in documents_of(row):
                    assert tokens == docs[doc], (e, doc)
                    seen[doc] += 1
        assert seen == dict.fromkeys(range(len(docs)), 1), e
