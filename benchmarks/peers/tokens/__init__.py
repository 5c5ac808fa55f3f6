"""The token-stream peers of ``benchmarks/tokens_peers.py``: one adapter module each.

Every module (``ours``, ``megatron``, ``olmo``, ``litdata_tokens``) answers the same four
calls on a corpus folder written by ``write_corpus`` (``Corpus`` names its files):

- ``build(corpus, seq_len)``: build what the library needs before its first sequence
  (Megatron's ``doc_idx``/``sample_idx``/``shuffle_idx``, our ``concat`` block totals);
- ``resume(corpus, seq_len, batch, tokens)``: a function that builds the pipeline, loads
  the state saved after ``tokens`` trained tokens through the library's own API and
  returns the first batch (the state and any index cache are prepared before, untimed);
- ``loader(corpus, seq_len, batch, num_workers)``: an endless iterator of batches of
  ``batch`` sequences through the library's own data loader;
- ``state(corpus, seq_len, batch, tokens)``: the library's resume state after ``tokens``
  trained tokens, serialised the way it checkpoints it (bytes).

``PEERS`` is empty so that ``benchmarks/peers_table.py`` (which reads every module of
``benchmarks/peers``) finds nothing here; the adapters import their library when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

PEERS: list[object] = []

#: Token ids are drawn from [1, VOCAB); 0 ends every document (its last token).
VOCAB = 50_000
EOD = 0


@dataclass(frozen=True)
class Corpus:
    """The files of one synthetic corpus, all in ``folder``."""

    folder: Path

    @property
    def prefix(self) -> Path:
        """Megatron's path prefix: ``corpus.bin`` (tokens) and ``corpus.idx``."""
        return self.folder / "corpus"

    @property
    def bin(self) -> Path:
        """The uint16 tokens, every document ending with ``EOD`` (Megatron's, OLMo's, ours)."""
        return self.folder / "corpus.bin"

    @property
    def lengths(self) -> Path:
        """Our document-lengths sidecar (``.npy``, int32 as in Megatron's ``.idx``)."""
        return self.folder / "corpus.lengths.npy"

    @property
    def litdata(self) -> Path:
        """litdata's optimized token chunks."""
        return self.folder / "litdata"

    @property
    def work(self) -> Path:
        """Scratch for the libraries' index caches (cleared by the driver)."""
        return self.folder / "work"

    def num_tokens(self) -> int:
        """Tokens in the corpus."""
        return self.bin.stat().st_size // 2


def document_lengths(documents: int, mean: float, seed: int = 0) -> np.ndarray:
    """Lognormal document lengths (sigma 1) with mean ``mean``, each at least 2 tokens."""
    rng = np.random.default_rng(seed)
    sigma = 1.0
    drawn = rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, documents)
    return np.maximum(2, drawn).astype(np.int64)
