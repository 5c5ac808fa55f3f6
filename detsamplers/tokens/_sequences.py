"""``TokenSequences``: sequences of ``L + 1`` tokens as a map-style dataset, by mode.

NOTE [ token sequences ]
Sequence ``k`` is window ``k`` of a stream of the corpus's ``T`` tokens, tokens
``[k(L + 1), (k + 1)(L + 1))``, for ``k < T // (L + 1)``; the modes differ in the stream:

- ``chunk``: the corpus in storage order (OLMo's fixed-length sequences). No index at
  all: a window's documents are a binary search in the files' boundaries.
- ``concat``: the documents in a block-hierarchical shuffled order keyed by ``seed``
  (NOTE [ block-hierarchical concat ]), O(documents / B) integers.

Either way every token of the stream but its last ``T mod (L + 1)`` appears in exactly
one sequence, and sequence ``k`` is a pure function of ``(corpus, mode, L, seed, k)``. The
dataset is random access (``__len__``, ``__getitem__``), so the existing chain does the
rest: ``DataLoader(sequences, shuffle=True, seed=...)`` reorders the sequences every epoch
by the keyed permutation of ``(seed, epoch)`` (NOTE [ keyed permutation ]), and
``get_data_loader`` shards, batches and skips them, so that sequence ``k`` of epoch ``e``
at any world size, ``num_workers`` and batch size is a function of ``(seed, e, k)`` and a
resume is O(1) from the loader's few integers.

The loader's state does not know the corpus: ``state_dict()`` here is the dataset's
fingerprint (the files' names and sizes, how documents end, ``mode``, ``L``, ``seed``,
``block_documents``), saved beside the loader's; ``load_state_dict`` refuses a state of
another dataset naming each field that differs.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch.utils.data as tud

from .._errors import ReproducibilityError, check_int, check_one_of
from .._state import fingerprint
from ._concat import ConcatOrder, Pieces
from ._corpus import TokenCorpus
from ._features import features

__all__ = ["MODES", "TokenSequences"]

MODES = ("chunk", "concat")
STATE_VERSION = 1


class TokenSequences(tud.Dataset[dict[str, npt.NDArray[Any]]]):
    """Sequences of ``seq_len`` input tokens (and their labels) cut from a token corpus.

    Args:
        corpus: A :class:`TokenCorpus`.
        seq_len: ``L``, the input tokens per sequence, ``>= 1``; each sequence reads
            ``L + 1`` tokens (the labels are the inputs shifted by one).
        mode: ``"chunk"``: the corpus in storage order cut into windows; ``"concat"``:
            the documents shuffled (keyed by ``seed``), concatenated and cut
            (NOTE [ token sequences ]).
        seed: Keys the ``concat`` order; pass the same seed to the DataLoader.
        block_documents: Documents per block of the ``concat`` shuffle, ``>= 1``: a seek
            costs O(``block_documents``), the index O(documents / ``block_documents``).

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``seq_len`` or ``block_documents`` is below 1, ``mode`` is unknown,
            or the corpus holds fewer than ``seq_len + 1`` tokens.

    Determinism:
        ``sequences[k]`` depends only on the corpus, ``mode``, ``seq_len``, ``seed``,
        ``block_documents`` and ``k``.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> from detsamplers.tokens import TokenCorpus, TokenSequences
        >>> path = Path(tempfile.mkdtemp()) / "train.npy"
        >>> np.save(path, np.array([5, 6, 0, 7, 0, 8, 9, 9, 0], dtype=np.uint16))
        >>> sequences = TokenSequences(TokenCorpus(path, eod_id=0), seq_len=3)
        >>> len(sequences)
        2
        >>> first = sequences[0]
        >>> first["input_ids"].tolist(), first["labels"].tolist()
        ([5, 6, 0], [6, 0, -100])
        >>> first["position_ids"].tolist(), first["document_ids"].tolist()
        ([0, 1, 2], [0, 0, 0])
    """

    def __init__(
        self,
        corpus: TokenCorpus,
        seq_len: int,
        *,
        mode: str = "chunk",
        seed: int = 0,
        block_documents: int = 1024,
    ) -> None:
        if not isinstance(corpus, TokenCorpus):
            raise TypeError(
                f"corpus should be a TokenCorpus, but got corpus of type {type(corpus).__name__}"
            )
        seq_len = check_int("seq_len", seq_len, minimum=1)
        mode = check_one_of("mode", mode, MODES)
        seed = check_int("seed", seed)
        block_documents = check_int("block_documents", block_documents, minimum=1)
        if corpus.num_tokens < seq_len + 1:
            raise ValueError(
                f"seq_len should leave at least one sequence of seq_len + 1 tokens, but got "
                f"seq_len={seq_len} for a corpus of {corpus.num_tokens} tokens; lower seq_len "
                "or add files"
            )
        self.corpus = corpus
        self.seq_len = seq_len
        self.mode = mode
        self.seed = seed
        self.block_documents = block_documents
        self._length = corpus.num_tokens // (seq_len + 1)
        self._concat: ConcatOrder | None = None
        if mode == "concat":
            self._concat = ConcatOrder(corpus, seed, block_documents)

    def __len__(self) -> int:
        return self._length

    def pieces(self, index: int) -> Pieces:
        """Sequence ``index``'s pieces of documents: (documents, first tokens, counts, closes)."""
        start = index * (self.seq_len + 1)
        stop = start + self.seq_len + 1
        if self._concat is not None:
            return self._concat.pieces(start, stop)
        docs, ends = self.corpus.documents_in(start, stop)
        cut = np.minimum(ends, stop)
        firsts = np.concatenate([[start], cut[:-1]]).astype(np.int64)
        return docs, firsts, cut - firsts, ends <= stop

    def __getitem__(self, index: int) -> dict[str, npt.NDArray[Any]]:
        """Sequence ``index`` as a dict of int arrays (NOTE [ sequence features ]).

        Its keys are ``input_ids``, ``labels``, ``position_ids``, ``document_ids`` and
        ``cu_seqlens``.
        """
        try:
            index = operator.index(index)
        except TypeError:
            raise TypeError(
                f"index should be an integer, but got index={index!r} of type "
                f"{type(index).__name__}"
            ) from None
        if not 0 <= index < self._length:
            raise IndexError(
                f"index should be in [0, {self._length}), but got index={index}; the dataset "
                f"holds {self._length} sequences"
            )
        docs, firsts, counts, closes = self.pieces(index)
        if self._concat is None:
            start = int(firsts[0])
            tokens = self.corpus.read(start, start + self.seq_len + 1)
        else:
            tokens = np.concatenate(
                [
                    self.corpus.read(first, first + count)
                    for first, count in zip(firsts.tolist(), counts.tolist(), strict=True)
                ]
            )
        return features(tokens, docs, counts, closes)

    def config(self) -> dict[str, Any]:
        """The dataset's fingerprint fields: the corpus's, ``mode``, ``seq_len``, ``seed``."""
        config = {
            **self.corpus.config(),
            "mode": self.mode,
            "seq_len": self.seq_len,
            "seed": self.seed,
        }
        if self.mode == "concat":
            config["block_documents"] = self.block_documents
        return config

    def state_dict(self) -> dict[str, Any]:
        """The dataset's fingerprint, to save beside the loader's state (JSON-able).

        Examples:
            >>> import tempfile, numpy as np
            >>> from pathlib import Path
            >>> from detsamplers.tokens import TokenCorpus, TokenSequences
            >>> path = Path(tempfile.mkdtemp()) / "t.npy"
            >>> np.save(path, np.array([1, 2, 0, 3, 0], dtype=np.uint16))
            >>> state = TokenSequences(TokenCorpus(path, eod_id=0), 2).state_dict()
            >>> state["config"]["files"], state["config"]["mode"]
            ([['t.npy', 138]], 'chunk')
        """
        config = self.config()
        return {"version": STATE_VERSION, "config": config, "fingerprint": fingerprint([config])}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Check that a saved state is this dataset's; nothing else is restored.

        Raises:
            TypeError: ``state_dict`` is not a dict.
            ValueError: it lacks the keys ``version`` and ``config``, or its version is
                unknown.
            ReproducibilityError: a field differs (each is named: ``files``, ``mode``,
                ``seq_len``, ``seed``, ...).
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                "state_dict should be a dict from TokenSequences.state_dict(), but got "
                f"state_dict of type {type(state_dict).__name__}"
            )
        missing = [key for key in ("version", "config") if key not in state_dict]
        if missing or not isinstance(state_dict["config"], Mapping):
            raise ValueError(
                "state_dict should have the keys version and config from "
                f"TokenSequences.state_dict(), but it lacks {', '.join(missing) or 'a config'}"
            )
        if state_dict["version"] != STATE_VERSION:
            raise ValueError(
                f"state_dict['version'] should be {STATE_VERSION}, but got "
                f"{state_dict['version']!r}; it was saved by another version of detsamplers"
            )
        saved, here = state_dict["config"], self.config()
        differences = [
            f"{key} is {saved.get(key)!r} in the state but {here.get(key)!r} here"
            for key in sorted(set(saved) | set(here))
            if saved.get(key) != here.get(key)
        ]
        if differences:
            raise ReproducibilityError(
                "cannot load this state into TokenSequences: it was saved over other "
                f"sequences ({'; '.join(differences)}); resuming from it would train on other "
                "tokens. Rebuild the corpus and sequences with the saved settings."
            )
