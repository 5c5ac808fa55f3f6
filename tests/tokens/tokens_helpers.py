"""Shared helpers of the token-stream tests: random corpora written as real files."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

from detsamplers.tokens import TokenCorpus, TokenSequences, _boundaries

#: The end-of-document id of the corpora written here (other tokens are >= 1).
EOD = 0

#: A corpus: files, each a list of document lengths.
corpora = st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=12), min_size=1, max_size=3)


def write_unique(folder: Path, files: list[list[int]], first: int = 1) -> TokenCorpus:
    """Files of documents whose every token is distinct (first, first + 1, ...), with sidecars."""
    folder.mkdir(parents=True, exist_ok=True)
    counter = itertools.count(first)
    paths, sidecars = [], []
    for i, lengths in enumerate(files):
        tokens = np.array([next(counter) for _ in range(sum(lengths))], dtype=np.uint32)
        path, sidecar = folder / f"part{i}.npy", folder / f"part{i}.lengths.npy"
        np.save(path, tokens)
        np.save(sidecar, np.array(lengths, dtype=np.int64))
        paths.append(path)
        sidecars.append(sidecar)
    return TokenCorpus(paths, lengths=sidecars)


def write_eod(folder: Path, files: list[list[int]], seed: int = 0) -> TokenCorpus:
    """``.bin`` files (uint16) of random documents, each ending with ``EOD``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i, lengths in enumerate(files):
        docs = [np.append(rng.integers(1, 50, size=n - 1), EOD) for n in lengths]
        path = folder / f"part{i}.bin"
        np.concatenate(docs).astype(np.uint16).tofile(path)
        paths.append(path)
    return TokenCorpus(paths, dtype="uint16", eod_id=EOD, progress=False)


def window(sequences: TokenSequences, index: int) -> np.ndarray:
    """The ``L + 1`` tokens of sequence ``index``, read piece by piece from the corpus."""
    _, firsts, counts, _ = sequences.pieces(index)
    return np.concatenate(
        [
            sequences.corpus.read(f, f + c)
            for f, c in zip(firsts.tolist(), counts.tolist(), strict=True)
        ]
    )


def write_lengths(folder: Path, lengths: list[int], name: str = "t") -> tuple[Path, Path]:
    """A token file of ``sum(lengths)`` distinct tokens ``1, 2, ...`` and its lengths sidecar."""
    folder.mkdir(parents=True, exist_ok=True)
    path, sidecar = folder / f"{name}.npy", folder / f"{name}.lengths.npy"
    np.save(path, np.arange(1, sum(lengths) + 1, dtype=np.uint32))
    np.save(sidecar, np.array(lengths, dtype=np.uint32))
    return path, sidecar


def ends_cache_of(sidecar: Path) -> Path:
    """The document ends cache a lengths sidecar gets beside it."""
    return sidecar.with_name(sidecar.name + ".ends.npy")


def count_position_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the values read by position from the ends cache and the sidecar, from now on.

    Each read appends how many values it asked for (``_boundaries.read_at`` of a mapped
    array, ``read_file_at`` of a file); the list returned grows as the reads happen.
    """
    seen: list[int] = []
    real_at, real_file_at = _boundaries.read_at, _boundaries.read_file_at

    def read_at(values: Any, at: Any) -> Any:
        seen.append(len(at))
        return real_at(values, at)

    def read_file_at(name: str, offset: int, dtype: Any, at: Any) -> Any:
        seen.append(len(at))
        return real_file_at(name, offset, dtype, at)

    monkeypatch.setattr(_boundaries, "read_at", read_at)
    monkeypatch.setattr(_boundaries, "read_file_at", read_file_at)
    return seen


def write_documents(
    folder: Path, files: list[list[int]], dtype: str, npy: bool, seed: int
) -> TokenCorpus:
    """Files of random documents of ``dtype`` ending with ``EOD``, as ``.npy`` or ``.bin``
    (``.bin`` holds uint16 or uint32 only: other dtypes are written as ``.npy``)."""
    folder.mkdir(parents=True, exist_ok=True)
    npy = npy or dtype not in ("uint16", "uint32")
    rng = np.random.default_rng(seed)
    paths = []
    for i, lengths in enumerate(files):
        docs = [np.append(rng.integers(1, 60_000, size=n - 1), EOD) for n in lengths]
        tokens = np.concatenate(docs).astype(dtype)
        path = folder / f"part{i}.{'npy' if npy else 'bin'}"
        if npy:
            np.save(path, tokens)
        else:
            tokens.tofile(path)
        paths.append(path)
    if npy:
        return TokenCorpus(paths, eod_id=EOD, progress=False)
    return TokenCorpus(paths, dtype=dtype, eod_id=EOD, progress=False)
