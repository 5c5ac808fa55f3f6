"""detsamplers.tokens: ``TokenCorpus`` over the ``.bin`` and its lengths sidecar.

``TokenSequences(corpus, L, mode=..., seed=0)`` through ``detsamplers.loader.DataLoader``
(``shuffle=True``, ``collate_tokens``: input_ids, labels, position_ids, document_ids,
cu_seqlens; modes ``chunk-io`` and ``concat-io``: input_ids and labels only, litdata's
and Megatron-Core's work); a resume loads the loader's state and the dataset's
fingerprint.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from . import Corpus

NAME = "detsamplers"
DISTRIBUTION = ""
#: Imported before any timing.
IMPORTS = ("detsamplers.tokens", "detsamplers.loader")


def _sequences(corpus: Corpus, seq_len: int, mode: str) -> Any:
    from detsamplers.tokens import TokenCorpus, TokenSequences

    tokens = TokenCorpus(corpus.bin, dtype="uint16", lengths=[corpus.lengths], progress=False)
    # "chunk-io": litdata's work, the window as inputs and labels only (no positions,
    # document ids or cu_seqlens).
    mode, _, io = mode.partition("-")
    outputs = ("input_ids", "labels") if io else ("input_ids", "labels", "position_ids",
                                                  "document_ids", "cu_seqlens")  # fmt: skip
    return TokenSequences(tokens, seq_len, mode=mode, seed=0, outputs=outputs)


def _loader(sequences: Any, batch: int, num_workers: int) -> Any:
    from detsamplers.loader import DataLoader
    from detsamplers.tokens import collate_tokens

    return DataLoader(sequences, batch_size=batch, shuffle=True, seed=0,
                      num_workers=num_workers, collate_fn=collate_tokens)  # fmt: skip


def build(corpus: Corpus, seq_len: int, mode: str = "concat") -> object:
    """Open the corpus and build the sequences' index (``concat``: the block totals and
    epoch 0's block order, which the order builds when an epoch is first asked for)."""
    sequences = _sequences(corpus, seq_len, mode)
    if sequences._concat is not None:
        sequences._concat.index(0)
    return sequences


def _state(corpus: Corpus, seq_len: int, batch: int, samples: int, mode: str) -> dict[str, Any]:
    sequences = _sequences(corpus, seq_len, mode)
    train = _loader(sequences, batch, 0).get_data_loader(repeat=True, skip_samples=samples)
    return {"loader": train.state_dict(), "tokens": sequences.state_dict()}


def resume(
    corpus: Corpus, seq_len: int, batch: int, samples: int, mode: str = "concat"
) -> Callable[[], Any]:
    """Build the loader, load the state after ``samples`` sequences, take a batch."""
    saved = json.loads(json.dumps(_state(corpus, seq_len, batch, samples, mode)))

    def first() -> Any:
        sequences = _sequences(corpus, seq_len, mode)
        sequences.load_state_dict(saved["tokens"])
        train = _loader(sequences, batch, 0).get_data_loader(repeat=True)
        train.load_state_dict(saved["loader"])
        return next(iter(train))["input_ids"]

    return first


def loader(
    corpus: Corpus, seq_len: int, batch: int, num_workers: int, mode: str = "concat"
) -> Iterator[Any]:
    """Batches of one shuffled, endless stream."""
    sequences = _sequences(corpus, seq_len, mode)
    return iter(_loader(sequences, batch, num_workers).get_data_loader(repeat=True))


def state(corpus: Corpus, seq_len: int, batch: int, samples: int, mode: str = "concat") -> bytes:
    """The loader's state and the dataset's fingerprint, as JSON."""
    return json.dumps(_state(corpus, seq_len, batch, samples, mode)).encode()
