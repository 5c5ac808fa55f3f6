"""Packed sequences in the trial loop, as real processes: SIGTERM, then a relaunch on 3 ranks.

torchrun launches examples/tokens_trial.py (a tiny GPT, gloo on CPU) with ``mode="pack"``
on 2 ranks and SIGTERMs one rank in the middle of the first epoch; the run is relaunched
from its checkpoint on 3 ranks and trains to the end of the second epoch. Every rank
records the sequences it trained with their ``document_ids``; the documents are at most
``L + 1`` tokens, so each is one piece, and every one must be trained exactly once per
epoch, whole, with the corpus's own tokens.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences
from tests.tokens.test_tokens_trial import launch_tokens, rows

pytestmark = pytest.mark.distributed

SEQ_LEN, GLOBAL_BATCH, VOCAB, WINDOW, SEED = 32, 6, 64, 24, 1
SIGNAL_AT = 5  # mid first epoch


def write_corpus(path: Path) -> list[list[int]]:
    """Documents of 2 to L + 1 tokens ending with 0, as many as make whole global batches."""
    rng = np.random.default_rng(11)
    docs = [np.append(rng.integers(1, VOCAB, size=n - 1), 0) for n in rng.integers(2, 34, 150)]
    while True:
        np.concatenate(docs).astype(np.uint16).tofile(path)
        sequences = TokenSequences(
            TokenCorpus(path, dtype="uint16", eod_id=0, progress=False),
            SEQ_LEN, mode="pack", seed=SEED, window=WINDOW,
        )  # fmt: skip
        if len(sequences) % GLOBAL_BATCH == 0:
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


def test_packed_sequences_give_every_document_once_per_epoch_across_sigterm_and_3_ranks(
    tmp_path: Path,
) -> None:
    corpus_path = tmp_path / "train.bin"
    docs = write_corpus(corpus_path)
    sequences = TokenSequences(
        TokenCorpus(corpus_path, dtype="uint16", eod_id=0, progress=False),
        SEQ_LEN, mode="pack", seed=SEED, window=WINDOW,
    )  # fmt: skip
    epoch = len(sequences) // GLOBAL_BATCH
    assert len(docs) > 2 * WINDOW and epoch >= 2 * SIGNAL_AT  # several windows, mid-epoch stop
    max_batches = 2 * epoch
    ckpt, log = tmp_path / "ckpt", tmp_path / "log"

    def args(record: Path) -> list[str]:
        return [
            f"--corpus={corpus_path}", f"--checkpoint-dir={ckpt}", f"--record-dir={record}",
            f"--max-batches={max_batches}", f"--global-batch-size={GLOBAL_BATCH}",
            f"--seq-len={SEQ_LEN}", f"--vocab-size={VOCAB}", "--mode=pack",
            f"--window={WINDOW}", f"--seed={SEED}", "--resume", "--stop-check-period=1",
        ]  # fmt: skip

    first, on_3 = tmp_path / "first", tmp_path / "on-3"
    signal = {"TRIAL_SIGNAL_AT": str(SIGNAL_AT), "TRIAL_SIGNAL_RANK": "1"}
    launch_tokens(2, [{"argv": args(first), "env": signal}], log)
    metrics = [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines()]
    assert [row["batches_trained"] for row in metrics if row["type"] == "stop"] == [SIGNAL_AT + 1]
    launch_tokens(3, [{"argv": args(on_3)}], log)

    records = rows(first, 2) + rows(on_3, 3)
    assert {row["rank"] for row in rows(on_3, 3)} == {0, 1, 2}
    assert sorted({row["batch"] for row in records}) == list(range(max_batches))
    # Each global batch holds the sequences a one-process loader gives it: the order does
    # not depend on the world size or on the preemption.
    loader = DataLoader(range(len(sequences)), batch_size=GLOBAL_BATCH, shuffle=True, seed=SEED)
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
