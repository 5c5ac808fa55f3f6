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

import contextlib
import importlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .._errors import check_bool, check_int
from ._block_file import block_file, load_blocks, store_blocks
from ._boundaries import eod_ends, sidecar_ends
from ._ends_check import EndsCheck, distinct, mapped_from, read_at
from ._files import BIN_DTYPES, check_path, open_tokens
from ._megatron import megatron_ends, megatron_tokens
from ._remembered import Remembered, identities

__all__ = ["TokenCorpus"]

I64 = npt.NDArray[np.int64]
#: Block starts of corpora whose files have not changed (NOTE [ facts of unchanged files ]).
_BLOCK_STARTS = Remembered(kept=8)


def _paths(value: Any, name: str) -> list[Path | str]:
    if isinstance(value, (str, Path)):
        return [_path_or_url(value, name)]
    if not isinstance(value, Sequence) or not value:
        raise TypeError(
            f"{name} should be a path or a non-empty list of paths, but got {name}={value!r}"
        )
    return [_path_or_url(item, name) for item in value]


def _path_or_url(value: Any, name: str) -> Path | str:
    """A local path, or a remote URL kept as a string (NOTE [ remote token files ])."""
    if isinstance(value, str) and "://" in value:
        from ._remote import is_remote, local_path  # the remote layer only when asked for

        return value if is_remote(value) else Path(local_path(value))
    return check_path(value, name)


def _ends_cache(sidecar: Path | str) -> str:
    """The name of a sidecar's ends cache, for the lazy check's error."""
    return f"{sidecar}.ends.npy"


def _brackets(ends: Any, low: int, high: int, start: int, stop: int) -> bool:
    """Whether documents ``[low, high)`` meet ``[start, stop)`` as increasing ``ends`` say."""
    last = len(ends)
    return (
        low < high <= last
        and (low == 0 or int(ends[low - 1]) <= start)
        and int(ends[low]) > start
        and (high == last or int(ends[high - 1]) >= stop)
        and (high - 1 == low or int(ends[high - 2]) < stop)
    )


def _sources(files: list[Path | str], sidecars: list[Path | str], eod_id: int | None) -> list[Any]:
    """Every file a corpus's documents are read from, its caches included where they exist."""
    out: list[Any] = [*files, *sidecars]
    for path in [*files, *sidecars]:
        if isinstance(path, Path):
            if path.suffix == ".idx":
                out.append(path.with_suffix(".bin"))
            caches = [f"{path.name}.ends.npy"] + (
                [f"{path.name}.eod{eod_id}.npy"] if eod_id is not None else []
            )
            out.extend(c for c in (path.with_name(name) for name in caches) if c.exists())
    return out


def _name(path: Path | str) -> str:
    """A file's name in the fingerprint: the same for a local file and its URL."""
    return path.name if isinstance(path, Path) else path.rstrip("/").rsplit("/", 1)[-1]


def _megatron(files: list[Path | str], dtype: str | None, eod_id: Any, lengths: Any) -> bool:
    """Whether ``files`` are Megatron ``.idx`` files, each of a pair with its ``.bin``."""
    pairs = [str(path).endswith(".idx") for path in files]
    if not any(pairs):
        return False
    if not all(pairs):
        raise ValueError(
            "paths should be all Megatron .idx files or none, but got "
            f"{', '.join(str(path) for path in files)}; open each kind as its own corpus"
        )
    if dtype is not None or eod_id is not None or lengths is not None:
        raise ValueError(
            "dtype, eod_id and lengths should be None for Megatron .idx files, whose header "
            f"gives the dtype and whose index gives the documents, but got dtype={dtype!r}, "
            f"eod_id={eod_id!r} and lengths={lengths!r}"
        )
    remote = [str(path) for path in files if isinstance(path, str)]
    if remote:
        raise ValueError(
            "paths should be local files for Megatron .idx pairs, but got the URL "
            f"{remote[0]}; download the .bin/.idx pair first, or write the corpus as .bin files "
            "with a lengths sidecar (TokenWriter), which are read remotely"
        )
    return True


def _identity(path: Path) -> tuple[int, int]:
    """The device and inode of ``path``: which file a map of it reads."""
    found = os.stat(path)
    return found.st_dev, found.st_ino


def _plain(array: Any) -> Any:
    """A memory map as a plain ndarray view of the same pages (its base keeps the map open).

    Slicing and gathering a ``np.memmap`` goes through its Python ``__getitem__`` and
    ``__array_wrap__`` on every read; the view reads the same bytes without them.
    """
    return array.view(np.ndarray) if isinstance(array, np.memmap) else array


class TokenCorpus:
    """Pretokenized token files, memory-mapped, as one sequence of documents.

    Args:
        paths: A token file or a list of them, read in this order: ``.npy`` (1-D uint16,
            uint32, int32 or int64) or raw ``.bin`` (``dtype`` tokens, nanoGPT's and
            OLMo's format); or Megatron's ``.idx`` files, each read with the ``.bin``
            beside it, its documents and dtype from the index (NOTE [ megatron files ]).
        dtype: The token dtype of ``.bin`` files, ``"uint16"`` or ``"uint32"``.
        eod_id: The end-of-document token id: each document ends after one (exclusive
            with ``lengths``). The first open scans each file once and caches the
            boundaries beside it (NOTE [ document boundaries ]).
        lengths: One ``.npy`` of document lengths per token file, in the same order
            (exclusive with ``eod_id``).
        vocab_size: If given, every token read is checked to lie in ``[0, vocab_size)``.
        cache: Read and write the end-of-document index beside each file (a remote
            file's: read beside it, kept in ``cache_dir``), and a local lengths
            sidecar's document ends beside it (NOTE [ cached document ends ]).
        progress: Show a progress bar while scanning for ``eod_id`` (``None``: only on a
            terminal).
        storage_options: Arguments of the fsspec filesystem of remote files (``http(s)://``,
            ``s3://``; NOTE [ remote token files ]).
        timeout: Seconds a remote read may wait to connect or for the next bytes.
        retries: Retries of a remote read after a transient failure, with backoff.
        cache_dir: The node cache folder of remote files (``None``: the default,
            ``$XDG_CACHE_HOME/detsamplers/shards``), where their end-of-document indices
            are kept and, with ``download``, the files; ``False``: nothing written.
        cache_limit: Bytes the downloaded files may take in ``cache_dir`` (``None``: no
            limit in a folder of your own, 64 GiB in the default one).
        download: Download remote files whole, once per node, into ``cache_dir`` and read
            them there; else each read is a range request of the bytes it needs.

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
        storage_options: Mapping[str, Any] | None = None,
        timeout: float = 60.0,
        retries: int = 5,
        cache_dir: str | os.PathLike[str] | Literal[False] | None = None,
        cache_limit: int | None = None,
        download: bool = False,
    ) -> None:
        files = _paths(paths, "paths")
        megatron = _megatron(files, dtype, eod_id, lengths)
        if dtype is not None and dtype not in BIN_DTYPES:
            raise ValueError(
                f"dtype should be one of {', '.join(BIN_DTYPES)} (or None for .npy files), "
                f"but got dtype={dtype!r}"
            )
        if not megatron and (eod_id is None) == (lengths is None):
            raise ValueError(
                "eod_id and lengths should be given one, not both or neither, but got "
                f"eod_id={eod_id!r} and lengths={lengths!r}; documents end after an "
                "end-of-document id, or at the lengths of a sidecar per file"
            )
        sidecars: list[Path | str] = []
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
        check_bool("download", download)
        if cache_limit is not None:
            cache_limit = check_int("cache_limit", cache_limit, minimum=1)
        self.paths = files
        self.dtype = dtype
        self.eod_id = eod_id
        self.vocab_size = vocab_size
        remote = [p for p in [*files, *sidecars] if isinstance(p, str)]
        self._remote = None
        if remote:  # NOTE [ remote token files ]
            from . import _remote

            self._remote = _remote.remote_access(
                storage_options, timeout, retries, cache_dir, cache_limit, download
            )
            _remote.check_hosts(remote, self._remote)
        # Taken before anything is read: what keys the answers kept for this corpus's files
        # (NOTE [ facts of unchanged files ]); None for a remote corpus.
        self._files_seen = identities(_sources(files, sidecars, eod_id))
        self._tokens = [self._open(path, dtype) for path in files]
        self._sizes = [
            os.stat(path).st_size if isinstance(path, Path) else tokens.file.size
            for path, tokens in zip(files, self._tokens, strict=True)
        ]
        # The file each local map reads, to read it by position (NOTE [ batched chunk windows ]).
        self._identity = [
            _identity(path) if isinstance(path, Path) and path.suffix != ".idx" else None
            for path in files
        ]
        with self._progress(progress) as bar:
            found = [
                self._boundaries(tokens, path, sidecar, bar, cache)
                for tokens, path, sidecar in zip(
                    self._tokens, files, sidecars or files, strict=True
                )
            ]
        self._ends = [_plain(ends) for ends, _ in found]
        # The regions of each file's ends whose increase is checked (NOTE [ lazy ends check ]).
        self._checks = [
            EndsCheck(len(ends), len(tokens), _ends_cache(sidecar), checked)
            for (ends, checked), tokens, sidecar in zip(
                found, self._tokens, sidecars or files, strict=True
            )
        ]
        self._token_start = np.cumsum([0] + [len(t) for t in self._tokens], dtype=np.int64)
        self._doc_start = np.cumsum([0] + [len(e) for e in self._ends], dtype=np.int64)

    def _progress(self, progress: bool | None) -> Any:
        """The bar of an end-of-document scan; none for a sidecar's or an index's ends.

        Even a disabled ``tqdm`` creates a multiprocessing lock, whose first creation in a
        process imports ``multiprocessing.synchronize`` and opens a semaphore (15 to 25 ms
        of a fresh process's first resume), for a bar that would never advance.
        """
        if self.eod_id is None:
            return contextlib.nullcontext(None)
        tqdm = importlib.import_module("tqdm").tqdm  # tqdm ships no type stubs
        return tqdm(
            total=sum(len(tokens) for tokens in self._tokens),
            desc="document index",
            unit="tok",
            unit_scale=True,
            disable=not progress if progress is not None else None,
            leave=False,
        )

    def _open(self, path: Path | str, dtype: str | None) -> Any:
        if isinstance(path, Path):
            if path.suffix == ".idx":
                return _plain(megatron_tokens(path))
            # The map records its file: chunk rows are read from it by position
            # (NOTE [ batched chunk windows ]).
            return _plain(mapped_from(open_tokens(path, dtype), path))
        from ._remote import open_remote

        assert self._remote is not None
        return open_remote(path, dtype, self._remote)

    def _boundaries(
        self, tokens: Any, path: Path | str, sidecar: Path | str, bar: Any, cache: bool
    ) -> tuple[Any, bool]:
        """A file's document ends (NOTE [ document boundaries ]), local or remote.

        With them, whether their increase is checked (NOTE [ lazy ends check ]).
        """
        if isinstance(path, Path) and path.suffix == ".idx":
            return megatron_ends(path, tokens), True
        if self.eod_id is not None and isinstance(path, Path):
            return eod_ends(tokens, path, self.eod_id, bar, cache), True
        if self.eod_id is None and isinstance(sidecar, Path):
            return sidecar_ends(tokens, path, sidecar, cache)
        from ._remote import remote_eod_ends, remote_lengths_ends

        assert self._remote is not None
        if self.eod_id is not None:
            return remote_eod_ends(tokens, self.eod_id, bar, cache, self._remote), True
        return remote_lengths_ends(tokens, path, str(sidecar), self._remote), True

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
        if str(self.paths[0]).endswith(".idx"):
            boundaries = "megatron"
        return {
            "files": [
                [_name(path), size] for path, size in zip(self.paths, self._sizes, strict=True)
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
        self._checks[f].cover(ends, local, local + 1)
        begin = int(ends[local - 1]) if local else 0
        base = int(self._token_start[f])
        return base + begin, base + int(ends[local])

    def block_starts(self, size: int) -> I64:
        """The starts of documents ``0, size, 2 size, ...`` and the corpus's end.

        Checked among themselves (increasing) rather than by regions (NOTE [ lazy ends
        check ]): a ``concat`` order reads every ``size``-th end at build.

        Raises:
            ValueError: they do not increase (the cache that gave them is named).
        """
        seen = self._files_seen
        key = ("blocks", size, self.dtype, self.eod_id, self.num_documents, seen and seen[0])
        if seen is not None and seen[1]:  # NOTE [ facts of unchanged files ]
            known: I64 | None = _BLOCK_STARTS.get(key)
            if known is not None:
                return known.copy()
        kept = self.block_file(size)  # NOTE [ block starts on disk ]
        if kept is not None and seen is not None:
            found = load_blocks(kept, size, self.num_documents, self.num_tokens, seen[0])
            if found is not None:
                _BLOCK_STARTS.put(key, found.copy())
                return found
        docs = np.append(np.arange(0, self.num_documents, size, dtype=np.int64),
                         np.int64(self.num_documents))  # fmt: skip
        out = self.starts(docs, check=False)
        if len(out) > 1 and not bool((out[1:] > out[:-1]).all()):
            for check, ends in zip(self._checks, self._ends, strict=True):
                check.cover(ends, 0, len(ends))  # names the cache that does not increase
        if seen is not None and seen[1]:
            _BLOCK_STARTS.put(key, out.copy())
            if kept is not None:
                store_blocks(kept, out, size, self.num_documents, self.num_tokens, seen[0])
        return out

    def block_file(self, size: int) -> Path | None:
        """The file keeping the block starts of ``size`` (None: a remote corpus, or none kept)."""
        first = self.paths[0]
        if self._files_seen is None or not isinstance(first, Path):
            return None
        return block_file(first, size, self.dtype, self.eod_id, self.num_documents)

    def starts(self, docs: I64, check: bool = True) -> I64:
        """The corpus token where each document of ``docs`` starts (``num_documents``: the end).

        ``check``: check each document read by its two ends (NOTE [ pair check ]); without
        it the ends are read from their file (NOTE [ ends read by position ]).
        """
        out = np.full(len(docs), self.num_tokens, dtype=np.int64)
        files = np.searchsorted(self._doc_start, docs, side="right") - 1
        inside = docs < self.num_documents
        touched = [0] if len(self._ends) == 1 else distinct(files[inside])[0].tolist()
        for f in touched if inside.any() else []:
            mask = files == f
            local = docs[mask] - self._doc_start[f]
            at = np.maximum(local - 1, 0)
            # Unchecked reads are a build's scattered ones: from the file, not the map
            # (NOTE [ ends read by position ]).
            ends = self._ends[f]
            before = np.asarray(ends, np.int64)[at] if check else read_at(ends, at)
            if check:  # each document read by its two ends (NOTE [ pair check ])
                self._checks[f].cover_reads(ends, local, before)
            out[mask] = np.where(local > 0, before, 0) + self._token_start[f]
        return out

    def spans(self, docs: I64) -> tuple[I64, I64]:
        """The corpus tokens where each document of ``docs`` starts and ends.

        Each document is read by its two ends once and checked by them (NOTE [ pair
        check ]): the same values as ``starts(docs)`` and ``starts(docs + 1)`` without
        reading the next document's ends.

        Examples:
            >>> import tempfile, numpy as np
            >>> from pathlib import Path
            >>> path = Path(tempfile.mkdtemp()) / "t.npy"
            >>> np.save(path, np.array([1, 0, 2, 2, 0, 3, 0], dtype=np.uint16))
            >>> [a.tolist() for a in TokenCorpus(path, eod_id=0).spans(np.array([2, 0]))]
            [[5, 0], [7, 2]]

        Raises:
            ValueError: a document of ``docs`` is not in ``[0, num_documents)``.
        """
        if len(docs) and (int(docs.min()) < 0 or int(docs.max()) >= self.num_documents):
            bad = int(docs.min()) if int(docs.min()) < 0 else int(docs.max())
            raise ValueError(
                f"docs should be documents in [0, {self.num_documents}), but got {bad}; "
                f"pass documents of this corpus"
            )
        first = np.empty(len(docs), dtype=np.int64)
        last = np.empty(len(docs), dtype=np.int64)
        files = np.zeros(0, dtype=np.int64)
        if len(self._ends) > 1:
            files = np.searchsorted(self._doc_start, docs, side="right") - 1
        for f in distinct(files)[0].tolist() if len(files) else [0]:
            mask = files == f if len(files) else slice(None)
            local = docs[mask] - self._doc_start[f]
            ends = self._ends[f]
            before = np.asarray(ends[np.maximum(local - 1, 0)], np.int64)
            self._checks[f].cover_reads(ends, local, before)
            base = self._token_start[f]
            first[mask] = np.where(local > 0, before, 0) + base
            last[mask] = np.asarray(ends[local], np.int64) + base
        return first, last

    def lengths(self, first: int, stop: int) -> I64:
        """The lengths of documents ``[first, stop)``, in tokens."""
        out: list[I64] = []
        doc = first
        while doc < stop:
            f = self._file_of_document(doc)
            local, end = doc - int(self._doc_start[f]), min(stop, int(self._doc_start[f + 1]))
            self._checks[f].cover(self._ends[f], local, end - int(self._doc_start[f]))
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
            check = self._checks[f]
            if not check.complete:  # the search's answer, in checked regions, must bracket
                check.cover(file_ends, low, high)
                if not _brackets(file_ends, low, high, start - base, stop - base):
                    check.cover(file_ends, 0, len(file_ends))  # not increasing: names it
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
        if not all(isinstance(tokens, np.ndarray) for tokens in self._tokens):
            return self._read_each(firsts, counts)  # a remote file reads ranges, not gathers
        offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        positions = np.repeat(firsts, counts) + offsets
        if len(self._tokens) == 1:
            out = np.asarray(self._tokens[0][positions]).astype(np.int64)
        else:
            out = np.empty(total, dtype=np.int64)
            files = np.searchsorted(self._token_start, positions, side="right") - 1
            for f in np.unique(files).tolist():  # one gather per file touched
                mask = files == f
                out[mask] = self._tokens[f][positions[mask] - self._token_start[f]]
        if self.vocab_size is None or not ((out >= self.vocab_size) | (out < 0)).any():
            return out
        return self._read_each(firsts, counts)  # a bad token to name, as read() names it

    def _read_each(self, firsts: I64, counts: I64) -> I64:
        """The pieces' tokens by one :meth:`read` each."""
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
        state["_tokens"] = [
            None if isinstance(path, Path) else t
            for path, t in zip(self.paths, self._tokens, strict=True)
        ]  # a remote file pickles as its URL, size and version (NOTE [ remote token files ])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._tokens = [
            self._open(path, self.dtype) if isinstance(path, Path) else tokens
            for path, tokens in zip(self.paths, self._tokens, strict=True)
        ]

    def __repr__(self) -> str:
        return (
            f"TokenCorpus({len(self.paths)} files, {self.num_tokens} tokens, "
            f"{self.num_documents} documents)"
        )
