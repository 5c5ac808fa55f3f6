"""``TokenWriter``: documents appended to a corpus folder that ``TokenCorpus`` reads back.

NOTE [ token writer ]
A corpus folder holds raw ``.bin`` token files (``part-00000.bin``, ...), each with a
lengths sidecar (``part-00000.lengths.npy``, NOTE [ document boundaries ]), and a manifest,
``corpus.json``, that names them with the dtype, the end-of-document id and the counts.
The sidecar is the default boundary because it is exact whatever the ids (no id is
reserved, nothing is scanned at open); with ``eod_id`` each document also ends with that id
(appended unless the document already ends with it), so the files read the same by
``eod_id=`` too, as nanoGPT's and OLMo's readers expect. An ``eod_id`` inside a document
would split it when read that way: it is an error.

A crashed build never leaves a folder that looks complete: each file is written under a
temporary name (``.part-00000.bin.<random>.tmp``) and renamed only at ``close``, after
every file is written, and the manifest, the mark of a complete corpus, is written last
(itself through a temporary name). An exception inside ``with TokenWriter(...)`` removes
the temporary files; a killed process leaves only ``.tmp`` files and no manifest. A folder
that already holds a manifest is refused unless ``overwrite=True``, in which case the old
manifest is removed before the first rename, then the old files it named.

The dtype is checked against the ids, never silently wrapped: an id below 0, at or above
``vocab_size``, or above the dtype's largest value is a ``ValueError`` naming the document
and the id. ``dtype=None`` chooses ``uint16`` when ``vocab_size`` fits it (at most 65,536)
and ``uint32`` otherwise. ``max_tokens_per_file`` starts a new file before a document that
would pass it; a document is never split across files (each file ends a document), so a
document longer than the limit gets a file of its own.
"""

from __future__ import annotations

import glob
import json
import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import check_bool, check_int
from ._corpus import TokenCorpus
from ._files import BIN_DTYPES, check_path

__all__ = ["MANIFEST", "TokenWriter", "read_manifest"]

#: The manifest that marks a complete corpus folder.
MANIFEST = "corpus.json"
#: The manifest's format tag and version.
FORMAT, VERSION = "detsamplers-tokens", 1
#: A manifest is a short JSON file: anything longer is refused unread.
MAX_MANIFEST = 64 << 20


def _part(index: int) -> str:
    return f"part-{index:05d}"


def _temporary(folder: Path, prefix: str) -> tuple[int, str]:
    """A temporary file in ``folder`` with the mode a plain ``open`` would give (umask)."""
    fd, name = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)
    return fd, name


def _choose_dtype(dtype: Any, vocab_size: int | None) -> str:
    if dtype is None:
        return "uint16" if vocab_size is not None and vocab_size <= 1 << 16 else "uint32"
    if dtype not in BIN_DTYPES:
        raise ValueError(
            f"dtype should be one of {', '.join(BIN_DTYPES)} or None (chosen from vocab_size), "
            f"but got dtype={dtype!r}"
        )
    if vocab_size is not None and vocab_size - 1 > np.iinfo(dtype).max:
        raise ValueError(
            f"dtype should hold every id below vocab_size={vocab_size}, but got dtype={dtype!r} "
            f"(largest id {np.iinfo(dtype).max}); pass dtype='uint32' or leave it None"
        )
    return str(dtype)


class TokenWriter:
    """Append documents to a corpus folder, renamed into place only at ``close``.

    Writes raw ``.bin`` token files with a lengths sidecar each and a ``corpus.json``
    manifest (NOTE [ token writer ]); ``corpus()`` opens what was written as a
    ``TokenCorpus``.

    Args:
        folder: The output folder (created if missing).
        dtype: ``"uint16"``, ``"uint32"``, or None: ``uint16`` if ``vocab_size`` is at most
            65,536, else ``uint32``.
        vocab_size: If given, every id must lie in ``[0, vocab_size)``.
        eod_id: If given, each document ends with this id (appended unless the document
            already ends with it); it may not occur inside a document.
        max_tokens_per_file: If given, a new file starts before a document that would take
            the current one past this many tokens (documents are never split).
        overwrite: Replace a complete corpus already in ``folder`` (else an error).

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range, or ``folder`` holds a complete corpus and
            ``overwrite`` is False.

    Examples:
        >>> import tempfile
        >>> from detsamplers.tokens import TokenWriter
        >>> folder = tempfile.mkdtemp()
        >>> with TokenWriter(folder, vocab_size=100, eod_id=0) as writer:
        ...     writer.write([5, 6, 7])
        ...     writer.write([8])
        >>> corpus = writer.corpus()
        >>> corpus.num_documents, corpus.document(0).tolist(), corpus.paths[0].name
        (2, [5, 6, 7, 0], 'part-00000.bin')
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        dtype: str | None = None,
        vocab_size: int | None = None,
        eod_id: int | None = None,
        max_tokens_per_file: int | None = None,
        overwrite: bool = False,
    ) -> None:
        folder = check_path(folder, "folder")
        if vocab_size is not None:
            vocab_size = check_int("vocab_size", vocab_size, minimum=1)
        if eod_id is not None:
            eod_id = check_int("eod_id", eod_id, minimum=0)
            if vocab_size is not None and eod_id >= vocab_size:
                raise ValueError(
                    f"eod_id should be below vocab_size={vocab_size}, but got eod_id={eod_id}"
                )
        if max_tokens_per_file is not None:
            max_tokens_per_file = check_int("max_tokens_per_file", max_tokens_per_file, minimum=1)
        check_bool("overwrite", overwrite)
        self.dtype = _choose_dtype(dtype, vocab_size)
        if eod_id is not None and eod_id > np.iinfo(self.dtype).max:
            raise ValueError(
                f"eod_id should fit dtype {self.dtype} (at most {np.iinfo(self.dtype).max}), "
                f"but got eod_id={eod_id}; pass dtype='uint32'"
            )
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"folder should be a folder, but {folder} is a file; pick another")
        if (folder / MANIFEST).exists() and not overwrite:
            raise ValueError(
                f"folder {folder} should not hold a complete corpus, but it has {MANIFEST}; "
                "pass overwrite=True (--overwrite) to replace it, or pick another folder"
            )
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.vocab_size = vocab_size
        self.eod_id = eod_id
        self.max_tokens_per_file = max_tokens_per_file
        self.overwrite = overwrite
        self.num_documents = 0
        self.num_tokens = 0
        self._limit = int(np.iinfo(self.dtype).max) if vocab_size is None else vocab_size - 1
        self._done: list[tuple[Path, Path, int, int]] = []  # tmp tokens, tmp lengths, counts
        self._handle: Any = None
        self._temporary: Path | None = None
        self._lengths: list[int] = []
        self._file_tokens = 0
        self._closed = False
        self._paths: list[Path] = []

    # -- writing --------------------------------------------------------------------------

    def _checked(self, document: Any) -> npt.NDArray[Any]:
        at = self.num_documents
        try:
            array = np.asarray(document)
        except (ValueError, OverflowError) as error:
            raise ValueError(
                f"document {at} should be a flat sequence of token ids, but numpy cannot read "
                f"it ({error})"
            ) from error
        if array.dtype == object and array.ndim == 1:  # ints too large for int64
            wide = [v for v in array.tolist() if type(v) is int and not 0 <= v <= self._limit]
            if wide:
                raise ValueError(
                    f"document {at} should hold ids in [0, {self._limit + 1}), but holds "
                    f"{wide[0]}; check the tokenizer"
                )
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise TypeError(
                f"document {at} should be a 1-D sequence of int token ids, but got an array "
                f"of dtype {array.dtype} and shape {array.shape}; convert the tokenizer's output "
                "to a list of ints"
            )
        if array.size:
            low, high = int(array.min()), int(array.max())
            if low < 0 or high > self._limit:
                bad = low if low < 0 else high
                bound = (
                    f"vocab_size={self.vocab_size}"
                    if self.vocab_size is not None
                    else f"dtype {self.dtype} (at most {self._limit})"
                )
                raise ValueError(
                    f"document {at} should hold ids in [0, {self._limit + 1}) for {bound}, but "
                    f"holds {bad}; check the tokenizer, vocab_size or dtype"
                )
        if self.eod_id is not None:
            inner = array[:-1] if array.size and int(array[-1]) == self.eod_id else array
            if inner.size and bool((inner == self.eod_id).any()):
                where = int(np.flatnonzero(inner == self.eod_id)[0])
                raise ValueError(
                    f"document {at} should not hold eod_id={self.eod_id} before its end, but "
                    f"token {where} is it, which would split the document when read by eod_id"
                )
            if inner.size == array.size:
                array = np.append(array, self.eod_id)
        return array.astype(self.dtype, copy=False)

    def _start_file(self) -> None:
        fd, name = _temporary(self.folder, f".{_part(len(self._done))}.bin.")
        self._handle = os.fdopen(fd, "wb")
        self._temporary = Path(name)
        self._lengths = []
        self._file_tokens = 0

    def _finish_file(self) -> None:
        if self._handle is None:
            return
        assert self._temporary is not None
        self._handle.close()
        self._handle = None
        fd, name = _temporary(self.folder, f".{_part(len(self._done))}.lengths.npy.")
        lengths = np.asarray(self._lengths, dtype=np.int64)
        if len(lengths) and int(lengths.max()) < 1 << 32:
            lengths = lengths.astype(np.uint32)
        with os.fdopen(fd, "wb") as handle:
            np.save(handle, lengths, allow_pickle=False)
        self._done.append((self._temporary, Path(name), self._file_tokens, len(self._lengths)))
        self._temporary = None

    def write(self, document: Sequence[int] | npt.NDArray[Any]) -> None:
        """Append one document (its token ids); an empty one is skipped unless ``eod_id``.

        Raises:
            TypeError: the document is not a 1-D sequence of ints.
            ValueError: an id lies below 0, at or above ``vocab_size``, above the dtype's
                largest value, or is ``eod_id`` before the document's end; or the writer is
                closed.
        """
        if self._closed:
            raise ValueError(f"TokenWriter for {self.folder} should be open, but it is closed")
        array = self._checked(document)
        if not array.size:
            return
        limit = self.max_tokens_per_file
        if (
            self._handle is not None
            and limit is not None
            and self._file_tokens + array.size > limit
        ):
            self._finish_file()
        if self._handle is None:
            self._start_file()
        self._handle.write(array.tobytes())
        self._lengths.append(int(array.size))
        self._file_tokens += int(array.size)
        self.num_tokens += int(array.size)
        self.num_documents += 1

    # -- closing --------------------------------------------------------------------------

    def close(self) -> list[Path]:
        """Rename every file into place, then write the manifest; the token files' paths.

        Raises:
            ValueError: no document was written (a corpus needs at least one token).
        """
        if self._closed:
            return list(self._paths)
        self._finish_file()
        if not self._done:
            self.abort()
            raise ValueError(
                f"TokenWriter for {self.folder} should get at least one non-empty document "
                "before close, but got none; check the inputs"
            )
        old = self.folder / MANIFEST
        stale: list[Path] = []
        if old.exists():  # overwrite (checked at open): the folder stops looking complete first
            try:
                stale = [Path(p) for p in read_manifest(self.folder)["paths_all"]]
            except ValueError:
                stale = []
            old.unlink()
        entries: list[tuple[str, str, int, int]] = []
        for index, (tokens, lengths, count, docs) in enumerate(self._done):
            name = _part(index)
            os.replace(tokens, self.folder / f"{name}.bin")
            os.replace(lengths, self.folder / f"{name}.lengths.npy")
            entries.append((f"{name}.bin", f"{name}.lengths.npy", count, docs))
        keep = {self.folder / name for e in entries for name in e[:2]}
        for path in stale:
            # A sidecar's cached ends (NOTE [ cached document ends ]) and a first file's pack
            # indexes (NOTE [ packed sequences ]) go with the old files.
            path.with_name(f"{path.name}.ends.npy").unlink(missing_ok=True)
            for cached in path.parent.glob(f"{glob.escape(path.name)}.pack-*.npy"):
                cached.unlink(missing_ok=True)
            if path not in keep:
                path.unlink(missing_ok=True)
        manifest = {
            "format": FORMAT, "version": VERSION, "dtype": self.dtype, "eod_id": self.eod_id,
            "vocab_size": self.vocab_size, "num_tokens": self.num_tokens,
            "num_documents": self.num_documents,
            "files": [
                {"tokens": bin_, "lengths": lengths_, "num_tokens": count, "num_documents": docs}
                for bin_, lengths_, count, docs in entries
            ],
        }  # fmt: skip
        fd, name = _temporary(self.folder, f".{MANIFEST}.")
        with os.fdopen(fd, "w") as handle:
            json.dump(manifest, handle, indent=1)
        os.replace(name, old)
        self._closed = True
        self._paths = [self.folder / e[0] for e in entries]
        return list(self._paths)

    def abort(self) -> None:
        """Remove the temporary files; the folder is left as it was before the writer."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        for path in [self._temporary] + [p for done in self._done for p in done[:2]]:
            if path is not None:
                path.unlink(missing_ok=True)
        self._temporary = None
        self._done = []
        self._closed = True

    def corpus(self) -> TokenCorpus:
        """The written corpus, opened by its lengths sidecars (after ``close``)."""
        if not self._paths:
            raise ValueError(
                f"TokenWriter for {self.folder} should be closed before corpus(), but it is not"
            )
        return TokenCorpus(**read_manifest(self.folder)["corpus"])

    def __enter__(self) -> TokenWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        return (
            f"TokenWriter({str(self.folder)!r}, dtype={self.dtype!r}, "
            f"{self.num_documents} documents, {self.num_tokens} tokens)"
        )


def _field(manifest: dict[str, Any], key: str, kinds: tuple[type, ...], path: Path) -> Any:
    value = manifest.get(key)
    if not isinstance(value, kinds) or isinstance(value, bool):
        raise ValueError(
            f"corpus manifest {path} should have {key!r} of type "
            f"{' or '.join(k.__name__ for k in kinds)}, but it has {value!r}; rebuild the corpus"
        )
    return value


def read_manifest(folder: Path) -> dict[str, Any]:
    """A corpus folder's manifest, checked: its fields and ``corpus`` (``TokenCorpus`` kwargs).

    The manifest is data (NOTE [ token files ]): a regular file of bounded size, JSON, its
    file names plain names inside ``folder``.

    Raises:
        ValueError: the manifest is missing, not a regular file, too large, not JSON, or a
            field has the wrong type or names a path outside the folder.
    """
    path = folder / MANIFEST
    try:
        info = os.stat(path)
    except OSError as error:
        raise ValueError(f"corpus manifest {path} cannot be read: {error.strerror}") from error
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MANIFEST:
        raise ValueError(
            f"corpus manifest {path} should be a regular file of at most {MAX_MANIFEST} bytes, "
            "but it is not; rebuild the corpus"
        )
    try:
        with open(path, "rb") as handle:
            manifest = json.loads(handle.read(MAX_MANIFEST + 1))
    except (OSError, ValueError, RecursionError) as error:
        raise ValueError(f"corpus manifest {path} should be JSON, but {error}") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"corpus manifest {path} should be a {FORMAT} manifest, but it is not")
    dtype = _field(manifest, "dtype", (str,), path)
    if dtype not in BIN_DTYPES:
        raise ValueError(
            f"corpus manifest {path} should name a dtype of {BIN_DTYPES}, but names {dtype!r}"
        )
    eod_id = manifest.get("eod_id")
    if eod_id is not None:
        _field(manifest, "eod_id", (int,), path)
    vocab_size = manifest.get("vocab_size")
    if vocab_size is not None:
        _field(manifest, "vocab_size", (int,), path)
    files = _field(manifest, "files", (list,), path)
    tokens: list[Path] = []
    lengths: list[Path] = []
    for entry in files:
        for key, out in (("tokens", tokens), ("lengths", lengths)):
            name = entry.get(key) if isinstance(entry, dict) else None
            if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
                raise ValueError(
                    f"corpus manifest {path} should name files inside its folder, but names "
                    f"{name!r}; rebuild the corpus"
                )
            out.append(folder / name)
    if not tokens:
        raise ValueError(f"corpus manifest {path} should list at least one file, but lists none")
    corpus = {"paths": tokens, "dtype": dtype, "lengths": lengths, "vocab_size": vocab_size}
    return {**manifest, "corpus": corpus, "paths_all": [*tokens, *lengths]}
