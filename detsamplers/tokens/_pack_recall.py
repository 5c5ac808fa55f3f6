"""A ``pack`` window's bins, kept for the next order over the same unchanged files.

NOTE [ packed windows remembered ]
A seek re-packs the windows its batch meets (NOTE [ packed sequences ]): it reads the
ends of their documents, scattered over the file, and packs them best-fit. The bins of
window ``w`` are a pure function of the corpus's bytes and of what ``PackOrder``'s digest
binds (the files' names and sizes, ``L``, ``seed``, ``window``, ``long_documents``), of the
corpus's ``dtype`` and ``eod_id`` (which say how the same bytes are read), and of
the pack index that says how many bins each window holds. So a window packed by one order
is kept here (at most ``KEPT`` windows, least recently used out first) under that digest
and the identities of the corpus's files and of the pack index, taken before they were
read (NOTE [ facts of unchanged files ]), and a later order of the same process whose
digest and identities are equal takes it instead of packing it again: a second resume at
the same place packs nothing. The arrays kept are read-only (orders share them). Nothing
is kept for a remote corpus, a corpus without its identities, or files changed within
``RACY_NS`` of being read.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._corpus import TokenCorpus
from ._remembered import Remembered, identities

__all__ = ["recall_window", "remember_window", "windows_key"]

Window = tuple[Any, ...]
_WINDOWS = Remembered()


def windows_key(
    corpus: TokenCorpus, digest: int, index: Path | None, cumulative: npt.NDArray[np.int64]
) -> Hashable | None:
    """What keys an order's windows: ``None`` if nothing may be kept for it."""
    seen = corpus._files_seen
    if seen is None or not seen[1]:
        return None
    own: Any = ()
    if index is not None:
        found = identities([index])
        if found is None or not found[1]:
            return None
        own = found[0]
    return (digest, corpus.dtype, corpus.eod_id, seen[0], own, len(cumulative), int(cumulative[-1]))


def recall_window(key: Hashable | None, w: int) -> Window | None:
    """Window ``w`` kept under ``key``, or ``None``."""
    return None if key is None else _WINDOWS.get((key, w))


def remember_window(key: Hashable | None, w: int, packed: Window | None) -> None:
    """Keep window ``w``'s packed arrays under ``key`` (read-only from now on)."""
    if key is None or packed is None:
        return
    for column in packed:
        column.flags.writeable = False
    _WINDOWS.put((key, w), packed)
