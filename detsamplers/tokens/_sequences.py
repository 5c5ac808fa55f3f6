"""``TokenSequences``: sequences of ``L + 1`` tokens as a map-style dataset, by mode.

NOTE [ token sequences ]
Sequence ``k`` is window ``k`` of a stream of the corpus's ``T`` tokens, tokens
``[k(L + 1), (k + 1)(L + 1))``, for ``k < T // (L + 1)``; the modes differ in the stream:

- ``chunk``: the corpus in storage order (OLMo's fixed-length sequences). No index at
  all: a window's documents are a binary search in the files' boundaries.
- ``concat``: the documents in a block-hierarchical shuffled order keyed by
  ``(seed, epoch)``, a new order each epoch (NOTE [ block-hierarchical concat ]),
  O(documents / B) integers per epoch.
- ``pack``: not a stream but bins: whole documents (or ``L + 1``-token pieces of longer
  ones) packed by best-fit-decreasing inside windows of a shuffled document order, each
  bin padded to ``L + 1`` tokens (NOTE [ packed sequences ]); the same bins every epoch.

Either way every token of the stream but its last ``T mod (L + 1)`` appears in exactly
one sequence per epoch, and sequence ``k`` of epoch ``e`` is a pure function of
``(corpus, mode, L, seed, e, k)`` (``chunk`` ignores ``e``). The dataset is random access:
``__getitem__(k)`` is epoch 0's sequence, and ``getitems_in_epochs`` (the loader's
opt-in protocol, NOTE [ epoch-aware datasets ]) reads ``(epoch, k)`` pairs, the epoch
being the pass of the loader's sample stream each record belongs to. So the existing
chain does the rest: ``DataLoader(sequences, shuffle=True, seed=...)`` reorders the
sequences every epoch by the keyed permutation of ``(seed, epoch)`` (NOTE [ keyed
permutation ]), ``get_data_loader`` shards, batches and skips them, and the fetch hands
each record its epoch, so that what rank ``r`` trains at any world size, ``num_workers``
and batch size is a function of ``(seed, e, k)`` and a resume is O(1) from the loader's
few integers.

The loader's state holds the dataset's fingerprint fields (``data_config()``, the loader's
hook: the files' names and sizes, how documents end, ``mode``, ``L``, ``seed``,
``block_documents``), and refuses a state of another dataset naming each field that
differs. ``state_dict()`` here is the same fingerprint on its own (older checkpoints saved
it beside the loader's); ``load_state_dict`` checks it the same way.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch.utils.data as tud

from .._errors import ReproducibilityError, check_int, check_one_of
from .._state import fingerprint
from ._chunk_rows import chunk_rows
from ._concat import ConcatOrder, Pieces
from ._concat_windows import concat_windows
from ._corpus import TokenCorpus
from ._features import KEYS, check_outputs, features, features_rows
from ._pack import LONG_DOCUMENTS, PackOrder
from ._pack_rows import window_rows
from ._windows import chunk_windows

__all__ = ["MODES", "TokenSequences"]

MODES = ("chunk", "concat", "pack")
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
        seed: Keys the ``concat`` order of each epoch; pass the same seed to the DataLoader.
        block_documents: Documents per block of the ``concat`` shuffle, ``>= 1``: a seek
            costs O(``block_documents``), the index O(documents / ``block_documents``).
        window: Documents per window of the ``pack`` mode, ``>= 1``: a larger window pads
            less, a seek re-packs one window (O(``window`` log ``window``)), the index
            holds O(documents / ``window``) integers (NOTE [ packed sequences ]).
        long_documents: In ``pack``, a document over ``seq_len + 1`` tokens is cut into
            pieces of ``seq_len + 1`` (``"split"``) or keeps only its first ``seq_len + 1``
            tokens (``"truncate"``: the rest are never trained on; :meth:`stats` counts
            them).
        outputs: The arrays each sequence holds, a tuple of names from ``input_ids``,
            ``labels``, ``position_ids``, ``document_ids``, ``cu_seqlens`` (all by
            default), ``input_ids`` among them; the others are not computed
            (NOTE [ sequence features ]). The sequences' tokens do not depend on it.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: ``seq_len``, ``block_documents`` or ``window`` is below 1, ``mode`` or
            ``long_documents`` is unknown, ``outputs`` names an unknown array, one twice or
            not ``input_ids``, or (``chunk``, ``concat``) the corpus holds fewer than
            ``seq_len + 1`` tokens.

    Determinism:
        ``sequences.at(k, e)`` depends only on the corpus, ``mode``, ``seq_len``, ``seed``,
        ``block_documents``, ``k`` and (in ``concat``) the epoch ``e``; ``sequences[k]``
        is ``at(k, 0)``.

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
        window: int = 1000,
        long_documents: str = "split",
        outputs: Sequence[str] = KEYS,
    ) -> None:
        if not isinstance(corpus, TokenCorpus):
            raise TypeError(
                f"corpus should be a TokenCorpus, but got corpus of type {type(corpus).__name__}"
            )
        seq_len = check_int("seq_len", seq_len, minimum=1)
        mode = check_one_of("mode", mode, MODES)
        seed = check_int("seed", seed)
        block_documents = check_int("block_documents", block_documents, minimum=1)
        window = check_int("window", window, minimum=1)
        long_documents = check_one_of("long_documents", long_documents, LONG_DOCUMENTS)
        self.outputs = check_outputs(outputs)
        if mode != "pack" and corpus.num_tokens < seq_len + 1:
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
        self.window = window
        self.long_documents = long_documents
        self._concat: ConcatOrder | None = None
        self._pack: PackOrder | None = None
        if mode == "concat":
            self._concat = ConcatOrder(corpus, seed, block_documents)
        if mode == "pack":
            self._pack = PackOrder(corpus, seq_len, seed, window, long_documents)
            self._length = len(self._pack)

    def __len__(self) -> int:
        return self._length

    @property
    def epochs_matter(self) -> bool:
        """Whether the sequences change with the epoch: in ``concat``, not in ``chunk``.

        The loader reads ``chunk`` sequences over a user's ``batch_sampler`` too, whose
        records have no epoch (NOTE [ epoch-aware datasets ]).
        """
        return self._concat is not None

    def pieces(self, index: int, epoch: int = 0) -> Pieces:
        """Sequence ``index``'s pieces of documents: (documents, first tokens, counts, closes).

        ``epoch`` selects the ``concat`` order of that epoch (``chunk`` and ``pack`` ignore
        it). In ``pack`` the counts sum to at most ``L + 1``: the rest is padding.
        """
        if self._pack is not None:
            return self._pack.pieces(index)
        start = index * (self.seq_len + 1)
        stop = start + self.seq_len + 1
        if self._concat is not None:
            return self._concat.pieces(start, stop, epoch)
        docs, ends = self.corpus.documents_in(start, stop)
        cut = np.minimum(ends, stop)
        firsts = np.concatenate([[start], cut[:-1]]).astype(np.int64)
        return docs, firsts, cut - firsts, ends <= stop

    def __getitem__(self, index: int) -> dict[str, npt.NDArray[Any]]:
        """Sequence ``index`` of epoch 0 as a dict of int arrays (NOTE [ sequence features ]).

        Its keys are ``input_ids``, ``labels``, ``position_ids``, ``document_ids`` and
        ``cu_seqlens``. :meth:`at` reads another epoch's.
        """
        return self.at(index)

    def at(self, index: int, epoch: int = 0) -> dict[str, npt.NDArray[Any]]:
        """Sequence ``index`` of epoch ``epoch`` (in ``chunk`` every epoch's is the same).

        Raises:
            TypeError: ``index`` or ``epoch`` is not an integer.
            IndexError: ``index`` is outside ``[0, len(self))``.
            ValueError: ``epoch`` is negative.

        Examples:
            >>> import tempfile, numpy as np
            >>> from pathlib import Path
            >>> from detsamplers.tokens import TokenCorpus, TokenSequences
            >>> path = Path(tempfile.mkdtemp()) / "t.npy"
            >>> np.save(path, np.array([1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0], dtype=np.uint16))
            >>> sequences = TokenSequences(TokenCorpus(path, eod_id=0), 3, mode="concat",
            ...                            block_documents=2)
            >>> [sequences.at(k, epoch=0)["input_ids"].tolist() for k in range(3)]
            [[6, 0, 5], [1, 0, 2], [3, 0, 4]]
            >>> [sequences.at(k, epoch=1)["input_ids"].tolist() for k in range(3)]
            [[5, 0, 6], [1, 0, 2], [4, 0, 3]]
        """
        index, epoch = self._checked(index, epoch)
        if self._pack is not None:
            sources, js = self._pack.rows([index])
            return window_rows(self.corpus, sources, js, self.seq_len, self.outputs)[0]
        docs, firsts, counts, closes = self.pieces(index, epoch)
        if self._concat is None:
            start = int(firsts[0])
            tokens = self.corpus.read(start, start + self.seq_len + 1)
        else:
            tokens = self.corpus.read_pieces(firsts, counts)
        return features(tokens, docs, counts, closes, self.outputs)

    def _checked(self, index: Any, epoch: Any) -> tuple[int, int]:
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
        return index, check_int("epoch", epoch, minimum=0)

    def getitems_in_epochs(
        self, pairs: Sequence[tuple[int, int]]
    ) -> list[dict[str, npt.NDArray[Any]]]:
        """The sequences at ``(epoch, index)`` pairs (NOTE [ epoch-aware datasets ]).

        The loader calls it with each record's epoch: the pass of its sample stream. The
        same arrays as :meth:`at` gives one by one, computed for the batch at once: one
        table of windows and one pass of :func:`features_rows`.
        """
        checked = [(index, epoch) for epoch, index in pairs]
        plain = all(type(k) is int and type(e) is int for k, e in checked)
        if not (plain and checked and min(checked)[0] >= 0 and max(checked)[0] < self._length
                and min(e for _, e in checked) >= 0):  # fmt: skip
            checked = [self._checked(index, epoch) for index, epoch in checked]
        if len(checked) < 2:
            return [self.at(index, epoch) for index, epoch in checked]
        width = self.seq_len + 1
        if self._concat is None and self._pack is None:
            starts = np.array([k for k, _ in checked], dtype=np.int64) * width
            compiled = chunk_rows(self.corpus, starts, width, self.outputs)
            if compiled is not None:  # NOTE [ compiled chunk rows ]
                return compiled
            windows = chunk_windows(self.corpus, starts, width)  # NOTE [ batched chunk windows ]
            if windows is not None:
                return features_rows(*windows, self.outputs)
        if self._concat is not None:
            sequences, epochs = (
                np.array(column, dtype=np.int64) for column in zip(*checked, strict=True)
            )
            windows = concat_windows(self._concat, sequences, epochs, width)
            if windows is not None:  # NOTE [ batched concat windows ]
                return features_rows(*windows, self.outputs)
            self._concat.prepare([(k * width, (k + 1) * width, e) for k, e in checked])
        if self._pack is not None:  # NOTE [ packed batch rows ]
            sources, js = self._pack.rows([k for k, _ in checked])
            return window_rows(self.corpus, sources, js, self.seq_len, self.outputs)
        parts = [self.pieces(index, epoch) for index, epoch in checked]
        columns = zip(*parts, strict=True)
        docs, firsts, counts, closes = (np.concatenate(column) for column in columns)
        pieces = np.array([len(part[0]) for part in parts], dtype=np.int64)
        if self._concat is not None:
            tokens = self.corpus.read_pieces(firsts, counts).reshape(len(checked), width)
        else:
            tokens = np.empty((len(checked), width), dtype=np.int64)
            for row, (index, _) in zip(tokens, checked, strict=True):
                row[:] = self.corpus.read(index * width, (index + 1) * width)
        return features_rows(tokens, docs, counts, closes, pieces, self.outputs)

    def stats(self) -> dict[str, Any]:
        """What the mode makes of the corpus: sequences, padding and tokens left out.

        ``padding_tokens`` fill bins in ``pack``; ``truncated_tokens`` are lost by
        ``long_documents="truncate"``; ``dropped_tokens`` are the tail of the stream under
        one sequence in ``chunk`` and ``concat``.

        Examples:
            >>> import tempfile, numpy as np
            >>> from pathlib import Path
            >>> from detsamplers.tokens import TokenCorpus, TokenSequences
            >>> path = Path(tempfile.mkdtemp()) / "t.npy"
            >>> np.save(path, np.array([1, 0, 2, 2, 0, 3, 3, 3, 0, 4, 0], dtype=np.uint16))
            >>> stats = TokenSequences(TokenCorpus(path, eod_id=0), 4, mode="pack").stats()
            >>> stats["sequences"], stats["padding_tokens"], stats["truncated_tokens"]
            (3, 4, 0)
        """
        if self._pack is not None:
            return {**self._pack.stats(), "dropped_tokens": 0}
        width = self.seq_len + 1
        return {
            "sequences": self._length,
            "documents": self.corpus.num_documents,
            "tokens": self.corpus.num_tokens,
            "padding_tokens": 0,
            "truncated_tokens": 0,
            "dropped_tokens": self.corpus.num_tokens - self._length * width,
            "padding_fraction": 0.0,
        }

    def data_config(self) -> dict[str, Any]:
        """The fields the loader's state keeps and checks (NOTE [ epoch-aware datasets ])."""
        return self.config()

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
        if self.mode == "pack":
            config["window"] = self.window
            config["long_documents"] = self.long_documents
        return config

    def state_dict(self) -> dict[str, Any]:
        """The dataset's fingerprint on its own (JSON-able); the loader's state holds it too.

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
