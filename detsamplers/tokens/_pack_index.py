"""The ``pack`` index's bin counts in the compiled kernel, a block of windows per call.

NOTE [ compiled pack index ]
The pack index (NOTE [ packed sequences ]) needs each window's bin count, not its bins.
In numpy a block of windows costs some twenty array passes (the document order, both
ends of each document, the pair check, the pieces, a ``lexsort`` by window and size,
the count): 180 ms for 1e6 documents at ``L = 2048`` and windows of 1,000. ``pack_index``
in ``_kernel_pack_index.c`` makes one pass instead, without the GIL: each position's
document by the same keyed permutation (``_kernel_pack_windows.c``'s network), its two
ends read from the file's ends (fetched a few documents ahead) and checked as
``TokenCorpus.spans`` checks them (NOTE [ pair check ]), its full pieces counted and its
last piece counted by size. Best-fit-decreasing then needs neither a sort nor the bins:
its count depends only on the rooms left (``count_bins``), so the sizes are taken largest
first from their counts, and the open bins are a multiset of rooms (a count per room and
a two-level bitmap), where the least room that fits is one successor search. The counts
are those of the numpy path, which stays as the fallback and the reference
(tests/tokens/test_tokens_pack_index.py builds both on random corpora, files, ``L``,
windows and ``long_documents``).

It runs where every file's ends are an int64 array in memory or mapped (local files,
``.bin`` and ``.npy`` with ``eod_id`` or sidecars, Megatron pairs) and ``L + 1`` is at
most ``MAX_CAPACITY`` (two counts of 4 bytes a size); else the numpy path runs. A
document whose ends fail the check stops the build with the check's error, which names
the ends cache. A build of more than ``BAR_DOCUMENTS`` documents shows a progress bar
(tqdm's, on a terminal only), advanced block by block.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from .._permute import _round_seeds
from ._corpus import TokenCorpus

__all__ = ["BAR_DOCUMENTS", "MAX_CAPACITY", "build_bar", "count_compiled"]

I64 = npt.NDArray[np.int64]
#: The largest ``L + 1`` the kernel counts (``PI_MAX_CAPACITY`` in the C file).
MAX_CAPACITY = 1 << 21
#: Documents (whole windows) counted per kernel call: a progress step, about 20 ms.
COMPILED_BLOCK = 1 << 20
#: Builds of more documents than this show a progress bar (a second or more in numpy).
BAR_DOCUMENTS = 1 << 23


def _int64_ends(corpus: TokenCorpus) -> list[I64] | None:
    """Each file's ends as the kernel reads them, or None if one is not an int64 array."""
    out = []
    for ends in corpus._ends:
        if not isinstance(ends, np.ndarray) or ends.dtype != np.int64 or ends.ndim != 1:
            return None
        if not ends.flags.c_contiguous:
            return None
        out.append(ends)
    return out


def count_compiled(
    kernel: ModuleType,
    corpus: TokenCorpus,
    key: int,
    window: int,
    capacity: int,
    split: bool,
    progress: Callable[[int], None] | None = None,
) -> tuple[I64, int, int] | None:
    """Each window's bin count, the pieces and the tokens packed; None where it cannot run.

    Args:
        kernel: The compiled kernel (``_native.kernel``).
        corpus: The documents.
        key: The document order's key (``FeistelPermutation(num_documents, key)``).
        window: Documents per window.
        capacity: Tokens a bin holds, ``L + 1``.
        split: Cut long documents into pieces (else keep their first ``capacity`` tokens).
        progress: Called with the documents counted so far, after each block.

    Returns:
        The counts as ``PackOrder``'s numpy path makes them, the pieces, and the tokens
        packed (only with ``split=False``; 0 otherwise), or None: ends not in memory, or
        a capacity over ``MAX_CAPACITY``.

    Raises:
        ValueError: a document's ends fail the pair check (the message names the file).

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from detsamplers import _native
        >>> path = Path(tempfile.mkdtemp()) / "t.npy"
        >>> np.save(path, np.array([1, 0, 2, 2, 0, 3, 3, 3, 0, 4, 0], dtype=np.uint16))
        >>> corpus = TokenCorpus(path, eod_id=0)
        >>> counts, pieces, _ = count_compiled(_native.kernel, corpus, 7, 2, 5, True)
        >>> counts.tolist(), pieces
        ([2, 1], 4)
    """
    ends = _int64_ends(corpus)
    if ends is None or capacity > MAX_CAPACITY:
        return None
    documents = corpus.num_documents
    doc_start = np.ascontiguousarray(corpus._doc_start, dtype=np.int64)
    tokens = np.ascontiguousarray(np.diff(corpus._token_start), dtype=np.int64)
    seeds = np.ascontiguousarray(_round_seeds(key), dtype=np.uint64)
    counts = np.empty(-(-documents // window), dtype=np.int64)
    step = max(1, COMPILED_BLOCK // window) * window  # documents per call, whole windows
    pieces = packed = 0
    for lo in range(0, documents, step):
        hi = min(lo + step, documents)
        out = counts[lo // window : -(-hi // window)]
        got, kept, bad = kernel.pack_index(
            ends, doc_start, tokens, seeds, lo, hi, window, capacity, split, out
        )
        if bad >= 0:
            _refuse(corpus, bad)
        pieces += got
        packed += kept
        if progress is not None:
            progress(hi)
    return counts, pieces, packed


def _refuse(corpus: TokenCorpus, doc: int) -> None:
    """Raise the pair check's error for document ``doc``, which the kernel refused."""
    corpus.spans(np.array([doc], dtype=np.int64))  # names the ends cache, as a read does
    raise ValueError(  # not reached while the kernel and spans check alike
        f"the document ends of {corpus.paths[0]} should increase inside each file, but "
        f"document {doc}'s do not; delete the ends caches beside it to rebuild them"
    )


@contextlib.contextmanager
def build_bar(documents: int, progress: Callable[[int], None] | None) -> Iterator[Any]:
    """``progress``, or for a build of over ``BAR_DOCUMENTS`` documents a tqdm bar's.

    tqdm is imported only then (a fresh process pays 15 to 25 ms for its first bar,
    NOTE [ token corpus ]'s ``_progress``); it shows only on a terminal.

    Examples:
        >>> with build_bar(10, None) as step:
        ...     step is None
        True
    """
    if progress is not None or documents <= BAR_DOCUMENTS:
        yield progress
        return
    tqdm = importlib.import_module("tqdm").tqdm  # tqdm ships no type stubs
    with tqdm(total=documents, desc="pack index", unit="doc", unit_scale=True,
              disable=None, leave=False) as bar:  # fmt: skip
        done = [0]

        def step(count: int) -> None:
            bar.update(count - done[0])
            done[0] = count

        yield step
