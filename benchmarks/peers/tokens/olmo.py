"""OLMo-core's ``NumpyFSLDataset`` (concat-and-chunk in storage order) and its loader.

The ``.bin`` is OLMo's own token-file format (a raw uint16 array, documents ending with
EOS), so it reads ``corpus.bin`` as written. ``generate_doc_lengths=True`` (the document
lengths its intra-document masking needs, as ours computes ``cu_seqlens``), its
``DataCollator``, ``NumpyFSLDataLoader`` with ``seed=0`` and ``shuffle=True``: each epoch
it builds a permutation of all instances and saves it in ``work_dir`` (``uint32``, 4
bytes per instance); a resume loads ``state_dict()`` (batches and tokens processed,
epoch, seed, the dataset's fingerprint) and reloads that epoch's permutation.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from . import EOD, VOCAB, Corpus

NAME = "OLMo-core"
DISTRIBUTION = "ai2-olmo-core"
#: Imported before any timing.
IMPORTS = ("olmo_core.data.data_loader", "olmo_core.data.numpy_dataset", "olmo_core.data.collator")


def _loader(corpus: Corpus, seq_len: int, batch: int, num_workers: int) -> Any:
    from olmo_core.data.collator import DataCollator
    from olmo_core.data.data_loader import NumpyFSLDataLoader
    from olmo_core.data.numpy_dataset import NumpyFSLDataset

    work = corpus.work / "olmo"
    work.mkdir(parents=True, exist_ok=True)
    dataset = NumpyFSLDataset(
        str(corpus.bin),
        sequence_length=seq_len,
        pad_token_id=VOCAB + 1,
        eos_token_id=EOD,
        vocab_size=VOCAB + 2,
        dtype=np.uint16,
        generate_doc_lengths=True,
    )
    dataset.work_dir = work
    dataset.prepare()
    return NumpyFSLDataLoader(
        dataset,
        collator=DataCollator(pad_token_id=VOCAB + 1),
        global_batch_size=batch * seq_len,
        work_dir=work,
        seed=0,
        shuffle=True,
        num_workers=num_workers,
    )


def _position(corpus: Corpus, seq_len: int, batch: int, samples: int) -> tuple[int, int]:
    """(epoch, batches processed in it) after ``samples`` instances, epochs from 1."""
    per_epoch = (corpus.num_tokens() // seq_len) // batch
    done = samples // batch
    return 1 + done // per_epoch, done % per_epoch


def _state(corpus: Corpus, seq_len: int, batch: int, samples: int) -> dict[str, Any]:
    loader = _loader(corpus, seq_len, batch, 0)
    epoch, batches = _position(corpus, seq_len, batch, samples)
    loader.reshuffle(epoch=epoch)  # builds and saves this epoch's permutation
    loader.batches_processed = batches
    loader.tokens_processed = batches * batch * seq_len
    state: dict[str, Any] = loader.state_dict()
    return state


def resume(corpus: Corpus, seq_len: int, batch: int, samples: int) -> Callable[[], Any]:
    """The epoch's permutation is saved first (untimed), as a run that got there left it."""
    saved = json.loads(json.dumps(_state(corpus, seq_len, batch, samples)))

    def first() -> Any:
        loader = _loader(corpus, seq_len, batch, 0)
        loader.load_state_dict(saved)
        loader.reshuffle(epoch=saved["epoch"])
        return next(iter(loader))["input_ids"]

    return first


def loader(corpus: Corpus, seq_len: int, batch: int, num_workers: int) -> Iterator[Any]:
    """Epoch 1 from its start."""
    data = _loader(corpus, seq_len, batch, num_workers)
    data.reshuffle(epoch=1)
    return iter(data)


def state(corpus: Corpus, seq_len: int, batch: int, samples: int) -> bytes:
    """``NumpyFSLDataLoader.state_dict()`` as JSON."""
    return json.dumps(_state(corpus, seq_len, batch, samples)).encode()


def cache_bytes(corpus: Corpus) -> int:
    """Bytes of the saved permutations a resume loads (one per epoch reached)."""
    return max((p.stat().st_size for p in (corpus.work / "olmo").rglob("*.npy")), default=0)
