"""Megatron-Core's ``GPTDataset`` over its ``.bin``/``.idx`` pair (``IndexedDataset``).

Its recommended CPU-side settings: ``create_attention_mask=False`` (the kernel masks),
``reset_position_ids=True`` (positions restart at each document, as ours do),
``reset_attention_mask=False``, ``eod_mask_loss=False``, one extra token per sequence
(``L + 1`` read, as ours). The index (``doc_idx``, ``sample_idx`` by its compiled
``helpers_cpp``, ``shuffle_idx``) is built up front for ``num_samples`` and cached as
``.npy`` under ``path_to_cache``. Megatron-LM's ``MegatronPretrainingSampler`` (not in
megatron-core; the dataset is already shuffled) hands rank ``r`` of ``W`` the samples
``consumed + r * B .. consumed + (r + 1) * B`` of each global batch; ``sampler`` below is
that, for one rank. Its resume state is ``consumed_train_samples``, one integer in the
checkpoint's ``args``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from . import EOD, VOCAB, Corpus

NAME = "Megatron-Core"
DISTRIBUTION = "megatron-core"
#: Imported before any timing.
IMPORTS = (
    "megatron.core.datasets.gpt_dataset",
    "megatron.core.datasets.indexed_dataset",
    "megatron.core.datasets.helpers",
)
logging.getLogger("megatron").setLevel(logging.ERROR)


class _Tokenizer:
    """What ``GPTDataset`` reads of a tokenizer: ids and a description for its cache key."""

    eod = EOD
    eos = EOD
    pad = VOCAB + 1
    vocab_size = VOCAB + 2
    unique_identifiers: ClassVar[dict[str, str]] = {"class": "bench"}

    def __repr__(self) -> str:
        return "bench-tokenizer"


def _dataset(corpus: Corpus, seq_len: int, num_samples: int | None, cache: Path) -> Any:
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    config = GPTDatasetConfig(
        random_seed=0,
        sequence_length=seq_len,
        tokenizer=_Tokenizer(),
        reset_position_ids=True,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        path_to_cache=str(cache),
        split="1,0,0",
    )
    indexed = IndexedDataset(str(corpus.prefix))
    documents = np.arange(len(indexed), dtype=np.int32)
    return GPTDataset(indexed, str(corpus.prefix), documents, num_samples, Split.train, config)


def write(corpus: Corpus, blocks: Iterator[tuple[np.ndarray, np.ndarray]]) -> None:
    """Write ``corpus.bin`` and ``corpus.idx`` with megatron-core's ``IndexedDatasetBuilder``.

    Each block is ``(tokens, lengths)``: many documents in one ``add_document`` call (each
    length one sequence, which is what ``GPTDataset`` shuffles).
    """
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(str(corpus.bin), dtype=np.uint16)
    for tokens, lengths in blocks:
        builder.add_document(tokens, lengths.tolist())
    builder.finalize(str(corpus.prefix) + ".idx")


def write_index_only(corpus: Corpus, lengths: np.ndarray) -> None:
    """``corpus.idx`` by megatron-core's own index writer, for a ``.bin`` written elsewhere."""
    from megatron.core.datasets.indexed_dataset import _IndexWriter

    with _IndexWriter(str(corpus.prefix) + ".idx", np.uint16) as writer:
        writer.write(lengths.astype(np.int32), None, [0, len(lengths)])


def build(corpus: Corpus, seq_len: int) -> object:
    """Build one epoch's ``doc_idx``, ``sample_idx``, ``shuffle_idx`` (cache cleared before)."""
    return _dataset(corpus, seq_len, None, corpus.work / "megatron-build")


def sampler(consumed: int, batch: int, total: int) -> Iterator[list[int]]:
    """Megatron-LM's pretraining sampler for rank 0 of 1, from ``consumed`` samples."""
    for first in range(consumed, total - batch + 1, batch):
        yield list(range(first, first + batch))


def _torch_loader(dataset: Any, consumed: int, batch: int, num_workers: int) -> Any:
    import torch

    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=_Batches(consumed, batch, len(dataset)),
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
    )


class _Batches:
    """``sampler`` as a re-iterable (what torch's ``batch_sampler`` needs), with a length."""

    def __init__(self, consumed: int, batch: int, total: int) -> None:
        self.consumed, self.batch, self.total = consumed, batch, total

    def __iter__(self) -> Iterator[list[int]]:
        return sampler(self.consumed, self.batch, self.total)

    def __len__(self) -> int:
        return (self.total - self.consumed) // self.batch


def resume(corpus: Corpus, seq_len: int, batch: int, samples: int) -> Callable[[], Any]:
    """Its index for ``samples + batch`` samples built and cached first (untimed)."""
    cache = corpus.work / "megatron-resume"
    _dataset(corpus, seq_len, samples + batch, cache)
    saved = json.loads(state(corpus, seq_len, batch, samples))

    def first() -> Any:
        dataset = _dataset(corpus, seq_len, samples + batch, cache)
        loader = _torch_loader(dataset, saved["consumed_train_samples"], batch, 0)
        return next(iter(loader))["tokens"]

    return first


def loader(corpus: Corpus, seq_len: int, batch: int, num_workers: int) -> Iterator[Any]:
    """One epoch's index (cached from ``build`` if there), read in the sampler's order."""
    dataset = _dataset(corpus, seq_len, None, corpus.work / "megatron-build")
    return iter(_torch_loader(dataset, 0, batch, num_workers))


def state(corpus: Corpus, seq_len: int, batch: int, samples: int) -> bytes:
    """``consumed_train_samples``: what Megatron-LM's checkpoint holds to resume the data."""
    return json.dumps({"consumed_train_samples": samples}).encode()


def cache_bytes(corpus: Corpus) -> int:
    """Bytes of the index cache a resume loads (the last ``resume`` built)."""
    return sum(p.stat().st_size for p in (corpus.work / "megatron-resume").rglob("*.npy"))
