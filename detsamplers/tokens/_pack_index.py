"""The ``pack`` index's bin counts in the compiled kernel, a block of windows per call.

NOTE [ compiled pack index ]
The pack index (NOTE [ packed sequences ]) needs each window's bin count, not its bins.
In numpy a block of windows costs some twenty array passes (the document order, both
ends of each document gathered from all over the ends file, the pair check, the pieces,
a ``lexsort`` by window and size, the count): 0.27 s of CPU for 1e6 documents at
``L = 2048`` and windows of 1,000, the ends file's pages resident throughout. The
compiled build turns the gather around, in two kernel calls without the GIL:

- **Scan.** ``pack_scan`` reads each file's ends in file order, a run of ``SCAN_RUN``
  at a time (by ``pread`` from the file the ends map, so the scan holds one buffer, not
  the map's pages), checks every document by its two ends as ``TokenCorpus.spans`` does
  (NOTE [ pair check ]), finds its position in the shuffled document order by the
  inverse of the keyed permutation (``_kernel_pack_windows.c``'s Feistel network, its
  rounds undone last first, a round over 512 documents at a time so that the compiler
  vectorises it, cycle-walked), and keeps its last piece's size at that
  position (2 bytes, 4 above a capacity of 65,536) and its full pieces in that
  position's window. A corpus of more than ``PASS_POSITIONS`` documents is scanned once
  per that many positions, so the sizes kept stay bounded.
- **Fit.** ``pack_fit`` reads each window's sizes in position order and runs
  best-fit-decreasing on them without a sort or the bins: its count depends only on the
  rooms left (``count_bins``), so the sizes are counted per value and taken largest
  first, and the open bins are a multiset of rooms (a count per room and a two-level
  bitmap), where the least room that fits is one successor search. A size over half a
  bin fits no room left by the larger ones before it: it opens a bin without a search.

The counts are those of the numpy path, which stays as the fallback and the reference
(tests/tokens/test_tokens_pack_index.py builds both on random corpora, files, ``L``,
windows, ``long_documents``, runs and passes). Where the time goes (``perf`` at 1e7
documents): about 55% the fit, 28% the scan's checks and scattered stores, 9% the
inverse permutation, 5% reading the ends. Megatron-Core's ``GPTDataset`` index
concatenates and packs nothing: a tenth of its time leaves about 6 ns a document for one
permutation and one best-fit step, less than the fit alone takes
(docs/benchmarks-tokens-quiet.md has the figures).

It runs where every file's ends are an int64 array, mapped or in memory (local files,
``.bin`` and ``.npy`` with ``eod_id`` or sidecars, Megatron pairs) and ``L + 1`` is at
most ``MAX_CAPACITY``; else the numpy path runs. A document whose ends fail the check
stops the build with the check's error, which names the ends cache; a cache that shrank
while open is named too. A build of more than ``BAR_DOCUMENTS`` documents shows a
progress bar (tqdm's, on a terminal only), advanced run by run.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from .._permute import _round_seeds
from ._corpus import TokenCorpus
from ._ends_check import mapped_file, open_regular

__all__ = ["BAR_DOCUMENTS", "MAX_CAPACITY", "build_bar", "count_compiled"]

I64 = npt.NDArray[np.int64]
#: The largest ``L + 1`` the kernel counts (``PI_MAX_CAPACITY`` in the C file).
MAX_CAPACITY = 1 << 21
#: Ends read per scan call (a progress step, and the read buffer's 8 bytes each).
SCAN_RUN = 1 << 15
#: Positions (whole windows) a pass of the scan keeps a size for (2 bytes each, 4 for a
#: capacity over 65,536): a corpus of more documents is scanned once per pass.
PASS_POSITIONS = 1 << 27
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


def _runs(ends: I64, buffer: I64) -> Iterator[tuple[int, I64]]:
    """``ends`` run by run (``len(buffer)`` at most): read from the file it maps, if any.

    A mapped file is read by ``pread`` into ``buffer``, so the scan's memory is that
    buffer, not the pages of the whole map (NOTE [ ends read by position ]).

    Raises:
        ValueError: the file is shorter than its map (it changed while open).
    """
    found = mapped_file(ends)
    if found is None or not hasattr(os, "preadv"):  # in memory, or no preadv: the array
        for a in range(0, len(ends), len(buffer)):
            yield a, ends[a : a + len(buffer)]
        return
    name, offset = found
    fd = open_regular(name)
    try:
        for a in range(0, len(ends), len(buffer)):
            run = buffer[: min(len(buffer), len(ends) - a)]
            got = os.preadv(fd, [run.data.cast("B")], offset + 8 * a)
            if got != run.nbytes:
                raise ValueError(
                    f"file {name} should hold {run.nbytes} bytes at byte {offset + 8 * a}, but "
                    f"it ends {got} bytes in; it changed while open, open the corpus again"
                )
            yield a, run
    finally:
        os.close(fd)


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
        progress: Called with the documents counted so far, after each run of ends.

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
    files = _int64_ends(corpus)
    if files is None or capacity > MAX_CAPACITY:
        return None
    documents = corpus.num_documents
    doc_start = corpus._doc_start.tolist()
    tokens = np.diff(corpus._token_start).tolist()
    seeds = np.ascontiguousarray(_round_seeds(key), dtype=np.uint64)
    counts = np.empty(-(-documents // window), dtype=np.int64)
    buffer = np.empty(SCAN_RUN, dtype=np.int64)
    wide = np.uint16 if capacity <= 1 << 16 else np.uint32
    step = max(1, PASS_POSITIONS // window) * window  # positions a pass, whole windows
    passes = -(-documents // step)
    pieces = packed = scanned = 0
    for lo in range(0, documents, step):
        hi = min(lo + step, documents)
        rests = np.zeros(hi - lo, dtype=wide)
        full = np.zeros(-(-(hi - lo) // window), dtype=np.int64)
        for f, ends in enumerate(files):
            before = 0  # the end before each run: the last of the run before it
            for a, run in _runs(ends, buffer):
                got, kept, bad = kernel.pack_scan(
                    run, doc_start[f] + a, a, before, tokens[f], documents, seeds, lo, hi,
                    window, capacity, split, rests, full,
                )  # fmt: skip
                if bad >= 0:
                    _refuse(corpus, bad)
                pieces += got
                packed += kept
                scanned += len(run)
                before = int(run[-1])
                if progress is not None:
                    progress(scanned // passes)
        kernel.pack_fit(rests, full, window, capacity, counts[lo // window : -(-hi // window)])
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
