"""``TokenCorpus``: pretokenized files, in order, as one stream of documents.

NOTE [ token corpus ]
A corpus is its files in the order given: token ``t`` of the corpus is token
``t - start[f]`` of the file ``f`` whose range holds it, and document ``d`` is document
``d - first[f]`` of the file whose documents hold it (``start`` and ``first`` are the
files' cumulative token and document counts, O(files) integers). Each file is
memory-mapped after its checks (NOTE [ token files ]) with its document ends
(NOTE [ document boundaries ]), so a token's document, a document's span, or a run of
documents' lengths is a binary search and a slice, never a scan.

Token ids are checked against ``vocab_size`` lazily, on each read (O(tokens read)): a
corpus of 1e10 tokens opens without reading them, and a read that meets an id at or
above ``vocab_size`` (or below 0) fails naming the file and the token's offset in it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import check_bool, check_int
from ._boundaries import eod_ends, lengths_ends
from ._files import BIN_DTYPES, check_path, open_tokens

__all__ = ["TokenCorpus"]

I64 = npt.NDArray[np.int64]


def _paths(value: Any, name: str) -> list[Path]:
    if isinstance(value, (str, Path)):
        return [check_path(value, name)]
    if not isinstance(value, Sequence) or not value:
        raise TypeError(
            f"{name} should be a path or a non-empty list of paths, but got {name}={value!r}"
        )
    return [check_path(item, name) for item in value]


class TokenCorpus:
    """Pretokenized token files, memory-mapped, as one sequence of documents.

    Args:
        paths: A token file or a list of them, read in this order: ``.npy`` (1-D uint16,
            uint32, int32 or int64) or raw ``.bin`` (``dtype`` tokens, nanoGPT's and
            OLMo's format).
        dtype: The token dtype of ``.bin`` files, ``"uint16"`` or ``"uint32"``.
        eod_id: The end-of-document token id: each document ends after one (exclusive
            with ``lengths``). The first open scans each file once and caches the
            boundaries beside it (NOTE [ document boundaries ]).
        lengths: One ``.npy`` of document lengths per token file, in the same order
            (exclusive with ``eod_id``).
        vocab_size: If given, every token read is checked to lie in ``[0, vocab_size)``.
        cache: Read and write the end-of-document index beside each file.
        progress: Show a progress bar while scanning for ``eod_id`` (``None``: only on a
            terminal).

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range, both or neither of ``eod_id`` and
            ``lengths`` are given, or a file fails its checks (the message names it).

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> from detsamplers.tokens import TokenCorpus
        >>> path = Path(tempfile.mkdtemp()) / "train.bin"
        >>> np.array([5, 6, 0, 7, 0, 8, 9, 9, 0], dtype=np.uint16).tofile(path)
        >>> corpus = TokenCorpus(path, dtype="uint16", eod_id=0)
        >>> corpus.num_tokens, corpus.num_documents
        (9, 3)
        >>> corpus.document(2).tolist()
        [8, 9, 9, 0]
    """

    def __init__(
        self,
        paths: str | Path | Sequence[str | Path],
        *,
        dtype: str | None = None,
        eod_id: int | None = None,
        lengths: Sequence[str | Path] | None = None,
        vocab_size: int | None = None,
        cache: bool = True,
        progress: bool | None = None,
    ) -> None:
        files = _paths(paths, "paths")
        if dtype is not None and dtype not in BIN_DTYPES:
            raise ValueError(
                f"dtype should be one of {', '.join(BIN_DTYPES)} (or None for .npy files), "
                f"but got dtype={dtype!r}"
            )
        if (eod_id is None) == (lengths is None):
            raise ValueError(
                "eod_id and lengths should be given one, not both or neither, but got "
                f"eod_id={eod_id!r} and lengths={lengths!r}; documents end after an "
                "end-of-document id, or at the lengths of a sidecar per file"
            )
        sidecars: list[Path] = []
        if lengths is not None:
            sidecars = _paths(lengths, "lengths")
            if len(sidecars) != len(files):
                raise ValueError(
                    f"lengths should name one sidecar per token file, but got {len(sidecars)} "
                    f"for {len(files)} files; list them in the order of paths"
                )
        if eod_id is not None:
            eod_id = check_int("eod_id", eod_id, minimum=0)
        if vocab_size is not None:
            vocab_size = check_int("vocab_size", vocab_size, minimum=1)
            if eod_id is not None and eod_id >= vocab_size:
                raise ValueError(
                    f"eod_id should be below vocab_size={vocab_size}, but got eod_id={eod_id}"
                )
        check_bool("cache", cache)
        if progress is not None:
            check_bool("progress", progress)
        self.paths = files
        self.dtype = dtype
        self.eod_id = eod_id
        self.vocab_size = vocab_size
        self._tokens = [open_tokens(path, dtype) for path in files]
        self._sizes = [os.stat(path).st_size for path in files]
        total = sum(len(tokens) for tokens in self._tokens)
        tqdm = importlib.import_module("tqdm").tqdm  # tqdm ships no type stubs
        bar = tqdm(
            total=total if eod_id is not None else 0,
            desc="document index",
            unit="tok",
            unit_scale=True,
            disable=True if eod_id is None else (not progress if progress is not None else None),
            leave=False,
        )
        with bar:
            self._ends = [
                eod_ends(tokens, path, eod_id, bar, cache)
                if eod_id is not None
                else lengths_ends(tokens, path, sidecar)
                for tokens, path, sidecar in zip(
                    self._tokens, files, sidecars or files, strict=True
                )
            ]
        self._token_start = np.cumsum([0] + [len(t) for t in self._tokens], dtype=np.int64)
        self._doc_start = np.cumsum([0] + [len(e) for e in self._ends], dtype=np.int64)

    @property
    def num_tokens(self) -> int:
        """The corpus's tokens."""
        return int(self._token_start[-1])

    @property
    def num_documents(self) -> int:
        """The corpus's documents."""
        return int(self._doc_start[-1])

    def config(self) -> dict[str, Any]:
        """What identifies the corpus: its files' names and sizes, and its boundaries.

        ``vocab_size`` is left out: it checks the tokens and changes none.
        """
        boundaries = f"eod_id={self.eod_id}" if self.eod_id is not None else "lengths"
        return {
            "files": [
                [path.name, size] for path, size in zip(self.paths, self._sizes, strict=True)
            ],
            "documents": boundaries,
        }

    def _file_of_document(self, doc: int) -> int:
        return int(np.searchsorted(self._doc_start, doc, side="right")) - 1

    def span(self, doc: int) -> tuple[int, int]:
        """The corpus token range ``[start, stop)`` of document ``doc``."""
        f = self._file_of_document(doc)
        local = doc - int(self._doc_start[f])
        ends = self._ends[f]
        begin = int(ends[local - 1]) if local else 0
        base = int(self._token_start[f])
        return base + begin, base + int(ends[local])

    def starts(self, docs: I64) -> I64:
        """The corpus token where each document of ``docs`` starts (``num_documents``: the end)."""
        out = np.full(len(docs), self.num_tokens, dtype=np.int64)
        files = np.searchsorted(self._doc_start, docs, side="right") - 1
        for f in np.unique(files[docs < self.num_documents]).tolist():
            mask = files == f
            local = docs[mask] - self._doc_start[f]
            before = np.asarray(self._ends[f], np.int64)[np.maximum(local - 1, 0)]
            out[mask] = np.where(local > 0, before, 0) + self._token_start[f]
        return out

    def lengths(self, first: int, stop: int) -> I64:
        """The lengths of documents ``[first, stop)``, in tokens."""
        out: list[I64] = []
        doc = first
        while doc < stop:
            f = self._file_of_document(doc)
            local, end = doc - int(self._doc_start[f]), min(stop, int(self._doc_start[f + 1]))
            ends = np.asarray(self._ends[f][local : end - int(self._doc_start[f])], np.int64)
            before = int(self._ends[f][local - 1]) if local else 0
            out.append(np.diff(ends, prepend=np.int64(before)))
            doc = end
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def documents_in(self, start: int, stop: int) -> tuple[I64, I64]:
        """The documents meeting corpus tokens ``[start, stop)`` and their token ends."""
        f = int(np.searchsorted(self._token_start, start, side="right")) - 1
        docs: list[I64] = []
        ends: list[I64] = []
        while start < stop:
            base = int(self._token_start[f])
            file_ends = self._ends[f]
            low = int(np.searchsorted(file_ends, start - base, side="right"))
            high = int(np.searchsorted(file_ends, stop - base, side="left")) + 1
            high = min(high, len(file_ends))
            docs.append(np.arange(low, high, dtype=np.int64) + int(self._doc_start[f]))
            ends.append(np.asarray(file_ends[low:high], np.int64) + base)
            start = min(stop, int(self._token_start[f + 1]))
            f += 1
        return np.concatenate(docs), np.concatenate(ends)

    def read(self, start: int, stop: int) -> I64:
        """Corpus tokens ``[start, stop)`` as int64, checked against ``vocab_size``.

        Raises:
            ValueError: a token id lies outside ``[0, vocab_size)`` (the message names the
                file and the token's offset in it).
        """
        parts: list[I64] = []
        f = int(np.searchsorted(self._token_start, start, side="right")) - 1
        while start < stop:
            base, end = int(self._token_start[f]), int(self._token_start[f + 1])
            upto = min(stop, end)
            part = np.asarray(self._tokens[f][start - base : upto - base]).astype(np.int64)
            if self.vocab_size is not None and len(part):
                bad = np.flatnonzero((part >= self.vocab_size) | (part < 0))
                if len(bad):
                    at = int(bad[0])
                    raise ValueError(
                        f"token file {self.paths[f]} should hold token ids in [0, "
                        f"vocab_size={self.vocab_size}), but token {start - base + at} is "
                        f"{int(part[at])}; check vocab_size or the tokenizer that wrote it"
                    )
            parts.append(part)
            start, f = upto, f + 1
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def read_pieces(self, firsts: I64, counts: I64) -> I64:
        """The tokens of the pieces ``[firsts[i], firsts[i] + counts[i])``, concatenated.

        Each piece lies inside one document (so one file): one gather per file touched,
        not one :meth:`read` per piece. Checked against ``vocab_size`` as :meth:`read`.
        """
        total = int(counts.sum())
        offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        positions = np.repeat(firsts, counts) + offsets
        if len(self._tokens) == 1:
            files, first = None, 0
        else:
            files = np.searchsorted(self._token_start, positions, side="right") - 1
            first = int(files[0]) if total else 0
        if total and (files is None or not (files != first).any()):
            out = np.asarray(self._tokens[first][positions - self._token_start[first]])
            out = out.astype(np.int64)
            if self.vocab_size is None or not ((out >= self.vocab_size) | (out < 0)).any():
                return out
        # Several files, or a bad token to name: piece by piece.
        parts = [self.read(f, f + c) for f, c in zip(firsts.tolist(), counts.tolist(), strict=True)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def document(self, doc: int) -> I64:
        """The tokens of document ``doc``."""
        doc = check_int("doc", doc, minimum=0, below=self.num_documents, below_name="num_documents")
        return self.read(*self.span(doc))

    def __getstate__(self) -> dict[str, Any]:
        # Workers under spawn get the paths and the boundaries, not a copy of the tokens:
        # each process maps the files again.
        state = dict(self.__dict__)
        state["_tokens"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._tokens = [open_tokens(path, self.dtype) for path in self.paths]

    def __repr__(self) -> str:
        return (
            f"TokenCorpus({len(self.paths)} files, {self.num_tokens} tokens, "
            f"{self.num_documents} documents)"
        )
