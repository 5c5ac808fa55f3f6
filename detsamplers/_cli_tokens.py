"""``python -m detsamplers tokens``: build a token corpus from text, and print its statistics.

NOTE [ tokens command ]
``tokens build`` tokenizes text files, JSON lines or a Hugging Face dataset saved on local
disk with the user's tokenizer and writes a corpus folder through ``TokenWriter``
(NOTE [ token writer ], NOTE [ tokens build ]). ``tokens stats PATH...`` opens token files
with ``TokenCorpus``'s own options (``--dtype``, ``--eod-id`` or ``--lengths``, or a corpus
folder's manifest) and prints its files, documents, tokens, the min, mean and max document
length and a histogram of lengths in log-spaced (power of two) bins, or ``--json``. The
lengths are read in blocks of ``STATS_BLOCK`` documents, so a corpus of 1e8 documents needs
no array of them all. Exit statuses are ``inspect``'s (NOTE [ inspect ]): 0 done, 1 a file
that cannot be read or fails its checks (the message names it), 2 a bad argument, 141 the
reader of the output went away.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "corpus_stats", "pack_stats", "run"]

#: Documents whose lengths are read at once by ``stats``.
STATS_BLOCK = 1 << 20
#: The exit status of a command whose output pipe closed: 128 + SIGPIPE, as a shell shows it.
_BROKEN_PIPE = 141


def add_parser(commands: Any) -> None:
    """Add the ``tokens`` command (``build``, ``stats``) to the CLI's subparsers."""
    from ._cli_tokens_build import add_build_parser

    tokens = commands.add_parser(
        "tokens",
        help="build a token corpus from text with your tokenizer, or print a corpus's statistics",
        description="Token corpora for detsamplers.tokens: `build` writes one from text, JSON "
        "lines or a saved Hugging Face dataset; `stats` prints documents, tokens and lengths.",
    )
    actions = tokens.add_subparsers(dest="tokens_command", required=True)
    add_build_parser(actions)
    stats = actions.add_parser(
        "stats",
        help="files, documents, tokens and a length histogram of a token corpus",
        description="Open token files as TokenCorpus does (or a folder written by `tokens "
        "build`) and print their documents, tokens, min/mean/max document length and a "
        "histogram of lengths in power-of-two bins.",
    )
    stats.add_argument("paths", nargs="+", help="token files (.npy, .bin) or one corpus folder")
    stats.add_argument("--dtype", choices=("uint16", "uint32"), help="the dtype of .bin files")
    stats.add_argument("--eod-id", type=int, default=None, help="the end-of-document id")
    stats.add_argument(
        "--lengths", nargs="+", default=None, help="one lengths .npy per token file, in order"
    )
    stats.add_argument(
        "--vocab-size", type=int, default=None, help="also check every id is below it (reads all)"
    )
    stats.add_argument("--json", action="store_true", help="print JSON")
    pack = stats.add_argument_group(
        "packing", 'the padding mode="pack" would give, for each --seq-len and --window'
    )
    pack.add_argument("--seq-len", type=int, nargs="+", default=None, help="L, one or more")
    pack.add_argument(
        "--window", type=int, nargs="+", default=[1000], help="documents per window (1000)"
    )
    pack.add_argument("--long-documents", choices=("split", "truncate"), default="split")
    pack.add_argument("--seed", type=int, default=0, help="the seed of the document order")
    pack.add_argument(
        "--progress", action="store_true", help="show the progress bar off a terminal too"
    )


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run ``tokens build`` or ``tokens stats``; the exit status (NOTE [ tokens command ])."""
    if args.tokens_command == "build":
        from ._cli_tokens_build import run_build

        return run_build(parser, args)
    return _run_stats(parser, args)


def _open(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    from .tokens import TokenCorpus
    from .tokens._writer import MANIFEST, read_manifest

    if args.eod_id is not None and args.lengths is not None:
        parser.error(
            f"--eod-id and --lengths should be given one, not both, but got --eod-id "
            f"{args.eod_id} and --lengths {' '.join(args.lengths)}"
        )
    for name in ("eod_id", "vocab_size"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "eod_id" else 1):
            option = "--" + name.replace("_", "-")
            parser.error(f"{option} should be a non-negative integer, but got {value}")
    folder = Path(args.paths[0])
    if len(args.paths) == 1 and folder.is_dir() and args.eod_id is None and args.lengths is None:
        if not (folder / MANIFEST).exists():
            raise ValueError(
                f"token folder {folder} should hold the {MANIFEST} of a corpus written by "
                "`tokens build`, but it has none; pass its token files with --eod-id or --lengths"
            )
        options = read_manifest(folder)["corpus"]
        if args.vocab_size is not None:
            options["vocab_size"] = args.vocab_size
        return TokenCorpus(**options)
    if args.eod_id is None and args.lengths is None:
        parser.error(
            "--eod-id or --lengths should be given for token files (documents end after an id, "
            f"or at a sidecar's lengths), but got neither for {' '.join(args.paths)}"
        )
    return TokenCorpus(
        args.paths,
        dtype=args.dtype,
        eod_id=args.eod_id,
        lengths=args.lengths,
        vocab_size=args.vocab_size,
    )


def corpus_stats(corpus: Any, check_ids: bool = False) -> dict[str, Any]:
    """Files, documents, tokens, min/mean/max length and the log2 histogram of ``corpus``.

    Args:
        corpus: A ``TokenCorpus``.
        check_ids: Read every token, so that an id at or above ``vocab_size`` is an error.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> from detsamplers.tokens import TokenCorpus
        >>> path = Path(tempfile.mkdtemp()) / "t.bin"
        >>> np.array([5, 0, 6, 7, 0, 1, 2, 3, 4, 0], dtype=np.uint16).tofile(path)
        >>> out = corpus_stats(TokenCorpus(path, dtype="uint16", eod_id=0))
        >>> out["documents"], out["tokens"], out["length"]
        (3, 10, {'min': 2, 'mean': 3.3333333333333335, 'max': 5})
        >>> [(bin["low"], bin["high"], bin["documents"]) for bin in out["histogram"]]
        [(2, 3, 2), (4, 7, 1)]
    """
    import numpy as np  # here, not at the top: `--help` answers without numpy or torch

    counts = np.zeros(64, dtype=np.int64)
    low, high = None, 0
    for first in range(0, corpus.num_documents, STATS_BLOCK):
        lengths = corpus.lengths(first, min(corpus.num_documents, first + STATS_BLOCK))
        bins = np.frexp(lengths.astype(np.float64))[1] - 1  # floor(log2(length)), exact
        counts += np.bincount(bins, minlength=64)[:64]
        low = int(lengths.min()) if low is None else min(low, int(lengths.min()))
        high = max(high, int(lengths.max()))
    if check_ids:
        for start in range(0, corpus.num_tokens, STATS_BLOCK * 16):
            corpus.read(start, min(corpus.num_tokens, start + STATS_BLOCK * 16))
    used = np.flatnonzero(counts)
    histogram = [
        {"low": 1 << int(i), "high": (2 << int(i)) - 1, "documents": int(counts[i])}
        for i in range(int(used[0]), int(used[-1]) + 1)
    ]
    return {
        "files": [str(path) for path in corpus.paths],
        "documents": corpus.num_documents,
        "tokens": corpus.num_tokens,
        "dtype": corpus.dtype,
        "boundaries": corpus.config()["documents"],
        "length": {"min": low, "mean": corpus.num_tokens / corpus.num_documents, "max": high},
        "histogram": histogram,
    }


def pack_stats(
    corpus: Any,
    seq_lens: list[int],
    windows: list[int],
    long_documents: str = "split",
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """What ``mode="pack"`` makes of ``corpus`` for each ``L`` and window, as a run would.

    Each row is ``TokenSequences.stats()`` with its settings; the bins are counted by the
    pass that builds the pack index (NOTE [ packed sequences ]), not cached.

    Args:
        corpus: A ``TokenCorpus``.
        seq_lens: The values of ``L``.
        windows: The values of ``window``.
        long_documents: ``"split"`` or ``"truncate"``.
        seed: The seed of the document order.
        progress: Called with the documents packed since the last call.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> from detsamplers.tokens import TokenCorpus
        >>> path = Path(tempfile.mkdtemp()) / "t.bin"
        >>> np.array([5, 0, 6, 7, 0, 1, 2, 3, 4, 0], dtype=np.uint16).tofile(path)
        >>> corpus = TokenCorpus(path, dtype="uint16", eod_id=0)
        >>> row = pack_stats(corpus, [3], [3], long_documents="truncate")[0]
        >>> row["sequences"], row["padding_tokens"], row["truncated_tokens"]
        (3, 3, 1)
    """
    from .tokens._pack import PackOrder

    rows = []
    for seq_len in seq_lens:
        for window in windows:
            done = [0]

            def step(documents: int, done: list[int] = done) -> None:
                if progress is not None:
                    progress(documents - done[0])
                done[0] = documents

            order = PackOrder(corpus, seq_len, seed, window, long_documents, False, step)
            step(corpus.num_documents)
            settings = {"seq_len": seq_len, "window": window, "long_documents": long_documents}
            rows.append({**settings, "seed": seed, **order.stats(), "dropped_tokens": 0})
    return rows


def _print(out: dict[str, Any]) -> None:
    length = out["length"]
    print(f"files      {len(out['files'])}")
    for path in out["files"]:
        print(f"  {path}")
    print(f"documents  {out['documents']:,}")
    print(f"tokens     {out['tokens']:,}")
    print(f"dtype      {out['dtype'] or 'from .npy headers'}, documents by {out['boundaries']}")
    print(f"length     min {length['min']:,}, mean {length['mean']:,.1f}, max {length['max']:,}")
    print("histogram  (document length in tokens: documents)")
    most = max(b["documents"] for b in out["histogram"])
    width = len(f"{out['histogram'][-1]['high']:,}")
    for b in out["histogram"]:
        bar = "#" * round(40 * b["documents"] / most)
        share = 100 * b["documents"] / out["documents"]
        line = f"  {b['low']:>{width},} - {b['high']:>{width},}  {b['documents']:>12,} "
        print(f"{line}{share:5.1f}%  {bar}".rstrip())
    if out.get("pack"):
        first = out["pack"][0]
        print(f"pack       long_documents={first['long_documents']}, seed {first['seed']}")
        print(f"  {'seq_len':>8} {'window':>9} {'sequences':>13} {'padding':>9} {'truncated':>15}")
        for row in out["pack"]:
            padding = f"{100 * row['padding_fraction']:.3f}%"
            print(
                f"  {row['seq_len']:>8,} {row['window']:>9,} {row['sequences']:>13,} "
                f"{padding:>9} {row['truncated_tokens']:>15,}"
            )


def _pack_with_bar(corpus: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    tqdm = importlib.import_module("tqdm").tqdm  # tqdm ships no type stubs
    total = corpus.num_documents * len(args.seq_len) * len(args.window)
    disable = False if args.progress else None  # None: only on a terminal
    with tqdm(total=total, desc="pack", unit="doc", unit_scale=True, disable=disable,
              file=sys.stderr) as bar:  # fmt: skip
        return pack_stats(
            corpus, args.seq_len, args.window, args.long_documents, args.seed, bar.update
        )


def _run_stats(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    for name in ("seq_len", "window"):
        for value in getattr(args, name) or ():
            if value < 1:
                option = "--" + name.replace("_", "-")
                parser.error(
                    f"{option} should be positive integers, but got {value}; pass 1 or more"
                )
    try:
        corpus = _open(parser, args)
        out = corpus_stats(corpus, check_ids=args.vocab_size is not None)
        if args.seq_len is not None:
            out["pack"] = _pack_with_bar(corpus, args)
    except (ValueError, TypeError, OSError) as error:
        print(f"stats failed: {error}", file=sys.stderr)
        return 1
    try:
        if args.json:
            print(json.dumps(out, indent=1))
        else:
            _print(out)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: stop quietly, as inspect does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return _BROKEN_PIPE
    return 0
