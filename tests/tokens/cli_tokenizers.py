"""Tokenizers for the ``tokens build`` tests, named as ``module:function`` on the command line."""

from __future__ import annotations

import numpy as np

#: The vocabulary of :func:`encode`: byte values 1..256 (0 is free for an end-of-document id).
VOCAB = 257


def encode(text: str) -> list[int]:
    """Each UTF-8 byte of ``text`` plus 1, so that 0 never occurs."""
    return [byte + 1 for byte in text.encode("utf-8")]


def encode_numpy(text: str) -> np.ndarray:
    """:func:`encode` as a numpy array of uint32, as some tokenizers return."""
    return np.asarray(encode(text), dtype=np.uint32)


def floats(text: str) -> list[float]:
    """Not ids: floats."""
    return [0.5] * len(text)


def strings(text: str) -> list[str]:
    """Not ids: the characters themselves."""
    return list(text)


def too_large(text: str) -> list[int]:
    """An id far above any vocabulary."""
    return [1, 10**6]


def nested(text: str) -> list[list[int]]:
    """A batch of one instead of one document."""
    return [encode(text)]


def raises(text: str) -> list[int]:
    """A tokenizer that fails on its input."""
    raise KeyError(text)


NOT_CALLABLE = 3
