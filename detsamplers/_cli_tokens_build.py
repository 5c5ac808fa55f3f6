"""``python -m detsamplers tokens build``: text to a token corpus, in parallel processes.

NOTE [ tokens build ]
The documents have one order, fixed by the inputs: the files in the order given, and in
each its lines (``--documents line``, JSON lines) or the whole file (``--documents file``),
or a saved Hugging Face dataset's rows. The main process reads them into chunks of
``CHUNK`` documents; ``--workers N`` processes tokenize the chunks, at most ``AHEAD`` per
worker in flight (the input is read as fast as it is written, not ahead into memory), and
the main process takes the results in the order of the chunks and writes each in turn
through ``TokenWriter``.
The corpus is therefore the same bytes whatever N. A worker also parses JSON lines and
checks what the tokenizer returns (a 1-D sequence of ints, each in ``[0, vocab_size)``), so
an error names the file and line; the writer checks the ids against the dtype again.

Inputs are data (docs/security.md): each must be a regular file (a FIFO, ``/dev/zero`` or a
folder is refused before it is read, through ``O_NONBLOCK`` and ``fstat`` as
NOTE [ token files ]), and a document (a file, a line) longer than ``--max-document-bytes``
is an error naming it rather than an unbounded read. The tokenizer is the user's own code
(``module:function``, NOTE [ factory spec ]) or a ``tokenizers`` JSON file
(``--tokenizer-json``, which also gives ``--vocab-size`` when it is not given). A Hugging
Face dataset is read with ``datasets.load_from_disk``: a folder on local disk, never the hub.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import os
import stat
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._files_open import read_bounded

if TYPE_CHECKING:  # imported where used: `--help` answers without numpy or torch
    import numpy as np

__all__ = ["BuildError", "add_build_parser", "run_build"]

#: Documents tokenized per task of a worker.
CHUNK = 256
#: The default bound on one document's bytes (a whole file or one line).
MAX_DOCUMENT_BYTES = 256 << 20
#: A JSON-lines file's suffixes (``--format auto``).
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")

#: Tasks in flight per worker: the chunks read ahead of the writer.
AHEAD = 4

# One task: (kind, field, [(where, payload), ...]) with kind "text" or "json"; its result,
# the chunk's tokens (int64, concatenated) and each document's length.
Task = tuple[str, str, list[tuple[str, str]]]
Result = tuple["np.ndarray[Any, Any]", "np.ndarray[Any, Any]"]


class BuildError(ValueError):
    """An input, or what the tokenizer made of it, fails a check (the message names it)."""


def add_build_parser(actions: Any) -> None:
    """Add ``tokens build`` to the ``tokens`` subparsers."""
    build = actions.add_parser(
        "build",
        help="tokenize text, JSON lines or a saved Hugging Face dataset into a corpus folder",
        description="Tokenize documents with your tokenizer in parallel processes and write "
        "a corpus folder (raw .bin files, lengths sidecars, corpus.json) that TokenCorpus "
        "reads. The output is the same whatever --workers.",
    )
    build.add_argument("inputs", nargs="*", help="text or JSON-lines files, in order")
    build.add_argument("--output", required=True, help="the corpus folder to write")
    build.add_argument("--tokenizer", default=None, help="module:function, str -> list[int]")
    build.add_argument("--tokenizer-json", default=None, help="a `tokenizers` tokenizer.json")
    build.add_argument(
        "--format",
        choices=("auto", "text", "jsonl"),
        default="auto",
        help="input format (auto: .jsonl/.ndjson/.json are JSON lines)",
    )
    build.add_argument(
        "--documents",
        choices=("file", "line"),
        default="file",
        help="text: one document per file, or per non-blank line (file)",
    )
    build.add_argument("--field", default="text", help="the text field of JSON lines/rows (text)")
    build.add_argument("--hf-dataset", default=None, help="a dataset folder from save_to_disk")
    build.add_argument("--split", default=None, help="the split of a saved DatasetDict")
    build.add_argument("--workers", type=int, default=1, help="tokenizing processes (1)")
    build.add_argument("--eod-id", type=int, default=None, help="end each document with this id")
    build.add_argument("--vocab-size", type=int, default=None, help="refuse ids at or above it")
    build.add_argument(
        "--dtype",
        choices=("uint16", "uint32"),
        default=None,
        help="token dtype (default: uint16 if --vocab-size <= 65536, else uint32)",
    )
    build.add_argument(
        "--max-tokens-per-file",
        type=int,
        default=None,
        help="start a new .bin before a document that would pass it",
    )
    build.add_argument(
        "--max-document-bytes",
        type=int,
        default=MAX_DOCUMENT_BYTES,
        help=f"refuse a longer document ({MAX_DOCUMENT_BYTES >> 20} MiB)",
    )
    build.add_argument("--overwrite", action="store_true", help="replace a corpus in --output")
    build.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar (default: on a terminal)",
    )


# -- the tokenizer, in each process ---------------------------------------------------------

_tokenize: Callable[[str], Any] | None = None
_check: tuple[str, int | None] = ("", None)


def load_tokenizer(kind: str, spec: str) -> tuple[Callable[[str], Any], int | None]:
    """The tokenizer that ``--tokenizer`` or ``--tokenizer-json`` names, and its vocab size.

    Raises:
        ValueError: the spec does not name a callable, or the JSON file cannot be read.
    """
    if kind == "function":
        from ._cli_spec import load_callable

        return load_callable(spec, "--tokenizer", noun="function"), None
    info = os.stat(spec) if os.path.lexists(spec) else None
    if info is None or not stat.S_ISREG(info.st_mode):
        raise ValueError(f"--tokenizer-json should name a regular file, but got {spec!r}")
    tokenizers = importlib.import_module("tokenizers")
    try:
        tokenizer = tokenizers.Tokenizer.from_file(spec)
    except Exception as error:  # the Rust library raises its own exception type
        raise ValueError(
            f"--tokenizer-json {spec} cannot be read as a tokenizer ({error})"
        ) from None

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text).ids  # type: ignore[no-any-return]

    return encode, int(tokenizer.get_vocab_size())


def _init(kind: str, spec: str, name: str, vocab_size: int | None) -> None:
    global _tokenize, _check
    _tokenize = load_tokenizer(kind, spec)[0]
    _check = (name, vocab_size)


def _text(where: str, kind: str, field: str, payload: str) -> str:
    if kind == "text":
        return payload
    try:
        row = json.loads(payload)
    except (ValueError, RecursionError) as error:
        raise BuildError(f"{where} should be a JSON object, but it is not JSON ({error})") from None
    if not isinstance(row, dict):
        raise BuildError(
            f"{where} should be a JSON object with a {field!r} field, but it is a "
            f"{type(row).__name__}; write one object per line"
        )
    if field not in row:
        raise BuildError(
            f"{where} should have the field {field!r}, but has only {sorted(row)[:8]}; "
            "pass --field with the name of the text field"
        )
    value = row[field]
    if not isinstance(value, str):
        raise BuildError(
            f"{where} should have a string in {field!r}, but it holds a {type(value).__name__}"
        )
    return value


def tokenize_task(task: Task) -> Result:
    """One chunk's tokens, concatenated as int64, and each document's token count."""
    import numpy as np

    kind, field, items = task
    assert _tokenize is not None, "the tokenizer is loaded by _init in each process"
    name, vocab_size = _check
    parts, lengths = [], []
    for where, payload in items:
        text = _text(where, kind, field, payload)
        try:
            ids = _tokenize(text)
        except Exception as error:  # the user's code: any failure, named with its input
            raise BuildError(
                f"{where}: the tokenizer {name} should return ids, but it raised "
                f"{type(error).__name__}: {error}"
            ) from None
        try:
            array = np.asarray(ids)
        except (ValueError, OverflowError) as error:
            raise BuildError(
                f"{where}: the tokenizer {name} should return a list of int ids, but numpy "
                f"cannot read what it returned ({error})"
            ) from None
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise BuildError(
                f"{where}: the tokenizer {name} should return a list of int ids, but returned "
                f"{type(ids).__name__} of {array.dtype} values with shape {array.shape}"
            )
        if array.size:
            low, high = int(array.min()), int(array.max())
            if low < 0 or (vocab_size is not None and high >= vocab_size):
                bad = low if low < 0 else high
                raise BuildError(
                    f"{where}: the tokenizer {name} should return ids in [0, "
                    f"{vocab_size if vocab_size is not None else 'inf'}), but returned {bad}; "
                    "check --vocab-size or the tokenizer"
                )
        parts.append(array.astype(np.int64, copy=False))
        lengths.append(array.size)
    tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return tokens, np.asarray(lengths, dtype=np.int64)


# -- the inputs, in the main process --------------------------------------------------------


def _open_input(path: str) -> Any:
    try:
        info = os.stat(path)
    except OSError as error:
        raise BuildError(f"input {path} cannot be read: {error.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise BuildError(
            f"input {path} should be a regular file, but it is a FIFO, device, socket or "
            "folder, which could block or never end; pass text or JSON-lines files"
        )
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BuildError(f"input {path} should be a regular file, but it changed to another")
    return os.fdopen(fd, "rb")


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BuildError(
            f"{where} should be UTF-8 text, but byte {error.start} is not ({error.reason})"
        ) from None


def file_documents(path: str, kind: str, per: str, limit: int) -> Iterator[tuple[str, str]]:
    """``(where, payload)`` of each document of one input, ``where`` naming file and line."""
    with _open_input(path) as handle:
        if kind == "text" and per == "file":
            data = read_bounded(handle, limit)
            if len(data) > limit:
                raise BuildError(
                    f"input {path} should be a document of at most --max-document-bytes "
                    f"{limit} bytes, but it is longer; raise the limit or pass --documents line"
                )
            yield path, _decode(data, path)
            return
        line = 0
        while True:
            data = handle.readline(limit + 1)
            if not data:
                return
            line += 1
            where = f"{path} line {line}"
            if len(data) > limit and not data.endswith(b"\n"):
                raise BuildError(
                    f"{where} should be at most --max-document-bytes {limit} bytes, but it "
                    "is longer; raise the limit"
                )
            text = _decode(data, where)
            if text.strip():
                yield where, text.rstrip("\r\n") if kind == "text" else text


def dataset_documents(path: str, split: str | None, field: str) -> Iterator[tuple[str, str]]:
    """``(where, text)`` of each row of a dataset saved with ``save_to_disk``."""
    if not os.path.isdir(path):
        raise BuildError(f"--hf-dataset {path} should be a folder written by save_to_disk")
    datasets = importlib.import_module("datasets")
    try:
        data = datasets.load_from_disk(path)
    except (FileNotFoundError, ValueError) as error:
        raise BuildError(f"--hf-dataset {path} cannot be loaded from disk ({error})") from None
    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            raise BuildError(
                f"--split should name a split of {path}, one of {sorted(data)}, but got {split!r}"
            )
        data = data[split]
    if field not in data.column_names:
        raise BuildError(
            f"--field should name a column of {path}, one of {data.column_names}, but got {field!r}"
        )
    row = 0
    for batch in data.select_columns([field]).iter(batch_size=CHUNK):
        for text in batch[field]:
            if not isinstance(text, str):
                raise BuildError(f"{path} row {row} should hold a string in {field!r}")
            yield f"{path} row {row}", text
            row += 1


def tasks(args: argparse.Namespace) -> Iterator[Task]:
    """The documents of every input, in order, in chunks of ``CHUNK``."""
    for path in args.inputs or [None]:
        if path is None:
            kind, documents = "text", dataset_documents(args.hf_dataset, args.split, args.field)
        else:
            kind = args.format
            if kind == "auto":
                kind = "jsonl" if Path(path).suffix.lower() in JSONL_SUFFIXES else "text"
            per = "line" if kind == "jsonl" else args.documents
            documents = file_documents(path, kind, per, args.max_document_bytes)
            kind = "json" if kind == "jsonl" else "text"
        chunk: list[tuple[str, str]] = []
        for item in documents:
            chunk.append(item)
            if len(chunk) == CHUNK:
                yield kind, args.field, chunk
                chunk = []
        if chunk:
            yield kind, args.field, chunk


# -- the command ----------------------------------------------------------------------------


def ordered(pool: Any, work: Iterator[Task], ahead: int) -> Iterator[Result]:
    """Each task's result in the order of ``work``, at most ``ahead`` tasks in flight.

    ``Pool.imap`` would read the whole input into its queue ahead of the workers; this
    reads a chunk only when one of the ``ahead`` in flight has been written.
    """
    pending: deque[Any] = deque()
    for task in work:
        pending.append(pool.apply_async(tokenize_task, (task,)))
        if len(pending) >= ahead:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, str]:
    if (args.tokenizer is None) == (args.tokenizer_json is None):
        parser.error("--tokenizer or --tokenizer-json should be given, one, not both or neither")
    if bool(args.inputs) == (args.hf_dataset is not None):
        parser.error("INPUT files or --hf-dataset should be given, one, not both or neither")
    for option in ("workers", "vocab_size", "max_tokens_per_file", "max_document_bytes"):
        value = getattr(args, option)
        if value is not None and value < 1:
            flag = "--" + option.replace("_", "-")
            parser.error(f"{flag} should be a positive integer, but got {value}")
    if args.eod_id is not None and args.eod_id < 0:
        parser.error(f"--eod-id should be a non-negative integer, but got {args.eod_id}")
    if args.tokenizer is not None:
        return "function", args.tokenizer
    return "json", args.tokenizer_json


def run_build(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run ``tokens build``; the exit status (NOTE [ tokens command ])."""
    import numpy as np

    from .tokens import TokenWriter

    kind, spec = _check_args(parser, args)
    try:
        vocab = load_tokenizer(kind, spec)[1]
    except ValueError as error:
        parser.error(str(error))
    vocab_size = args.vocab_size if args.vocab_size is not None else vocab
    try:
        writer = TokenWriter(
            args.output,
            dtype=args.dtype,
            vocab_size=vocab_size,
            eod_id=args.eod_id,
            max_tokens_per_file=args.max_tokens_per_file,
            overwrite=args.overwrite,
        )
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    tqdm = importlib.import_module("tqdm").tqdm
    initargs = (kind, spec, spec, vocab_size)
    pool = None
    results: Iterator[Result]
    if args.workers > 1:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        pool = multiprocessing.get_context(method).Pool(args.workers, _init, initargs)
        results = ordered(pool, tasks(args), AHEAD * args.workers)
    else:
        _init(*initargs)
        results = map(tokenize_task, tasks(args))
    disable = None if args.progress is None else not args.progress  # None: on a terminal
    bar = tqdm(desc="tokens build", unit="doc", disable=disable, file=sys.stderr)
    started, read = time.perf_counter(), 0
    try:
        with bar, writer:
            for tokens, lengths in results:
                for piece in np.split(tokens, np.cumsum(lengths)[:-1]) if len(lengths) else []:
                    writer.write(piece)
                read += len(lengths)
                bar.update(len(lengths))
                rate = writer.num_tokens / max(time.perf_counter() - started, 1e-9)
                bar.set_postfix_str(f"{rate:,.0f} tok/s", refresh=False)
    except (BuildError, ValueError, TypeError, OSError) as error:
        print(f"tokens build failed: {error}", file=sys.stderr)
        return 1
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
    seconds = time.perf_counter() - started
    skipped = read - writer.num_documents
    print(
        f"{args.output}: {writer.num_documents:,} documents, {writer.num_tokens:,} tokens "
        f"({writer.dtype}) in {len(writer.close())} files, {seconds:.2f} s, "
        f"{writer.num_documents / seconds:,.0f} documents/s, {writer.num_tokens / seconds:,.0f} "
        f"tokens/s" + (f"; {skipped} empty documents skipped" if skipped else "")
    )
    return 0
