"""The ``pack`` order: whole documents packed by best-fit-decreasing, window by window.

NOTE [ packed sequences ]
Concatenating documents and cutting the stream (``chunk``, ``concat``) splits most
documents across two sequences; packing keeps each whole and pads what is left of a
sequence. With capacity ``C = L + 1`` tokens a sequence (the other modes read ``L + 1``
tokens too: the inputs and the shifted labels):

- **Pieces.** A document of ``n <= C`` tokens is one piece. A longer one is cut into
  ``ceil(n / C)`` pieces of ``C`` tokens but the last (``long_documents="split"``), or
  kept as its first ``C`` tokens (``"truncate"``: its other tokens are never trained
  on; ``TokenSequences.stats()`` counts them).
- **Windows.** The ``D`` documents in a keyed shuffled order (NOTE [ keyed permutation ],
  key hashed from the seed, NOTE [ seed mixing ]) are cut into windows of ``W``
  consecutive documents of that order (``window``); window ``w`` holds the documents at
  positions ``[wW, min((w + 1)W, D))``, each with all its pieces.
- **Bins.** Each window's pieces, sorted by decreasing size (ties in window order), go
  one by one into the open bin with the least room that fits them (ties: the bin opened
  first), or into a new bin: best-fit-decreasing. Bin ``b`` of a window keeps its pieces
  in window order, then padding up to ``C``. Sorting groups similar lengths (the first
  bins hold the longest pieces), so the bins of window ``w`` are read in the order of a
  keyed permutation of their count, evaluated at ``w`` (a batch's windows together,
  NOTE [ batched permutations ]).
- **Index.** Sequence ``k`` lies in window ``w = max{w : N[w] <= k}`` where ``N`` holds the
  ``ceil(D / W) + 1`` cumulative bin counts, and is its bin number ``k - N[w]`` in that
  order. ``N`` costs one best-fit pass over every window: in the compiled kernel a scan of
  the document ends in file order and a fit per window (NOTE [ compiled pack index ]), else
  in numpy (a vectorised gather and sort, then the best-fit loop) block by block of whole
  windows (``BUILD_BLOCK`` documents: the build holds one block's arrays and the ``D / W``
  counts); the same counts either way. It is built once per (corpus, ``L``, ``W``,
  ``long_documents``, seed) and cached beside the corpus's first file as
  ``<file>.pack-<digest>.npy`` (a header binding it to the files' names, sizes and
  modification times and to the settings, then ``N``). A cache that fails its checks
  (not a regular ``.npy`` of int64, a size unlike its header, another binding, ``N`` not
  increasing) is rebuilt and rewritten; one whose counts lie in a way these checks miss
  is found when a window re-packs to another count, an error naming the file. A seek
  re-packs one window, O(W log W); a batch's windows are packed together (one gather,
  one sort, one grouping for all of them).
- **Kept windows.** Packed windows are kept in a least-recently-used table keyed by the
  window alone (the bins are the same every epoch): the ``CACHED_WINDOWS`` last used
  always, older ones while all kept hold at most ``CACHED_PIECES`` pieces. A window is a
  pure function of ``w``, so a kept window equals a fresh pack; the table changes the
  time a batch takes, never a value. A batch's windows already kept are marked used
  before the missing ones are packed, so packing them never evicts one the batch reads.
- **Kernel.** The best-fit loop runs in the compiled kernel when it is there
  (``_kernel_pack.c``, NOTE [ compiled mixture kernel ]): the same sorted keys, search
  and moves as :func:`best_fit_decreasing`, so the same bins; the Python functions here
  stay as the fallback and the reference (tests/tokens/test_tokens_pack_kernel.py). A
  batch's windows are packed end to end in one compiled call, pieces to columns (NOTE
  [ compiled window packing ]); :func:`pack_numpy` stays as its fallback and reference.

Every piece once per epoch: the document order is a bijection, the windows partition it,
and best-fit places every piece of a window in exactly one of its bins; no bin holds more
than ``C`` tokens, and a piece never crosses bins, so a document of at most ``C`` tokens
is whole in one sequence. The bins are the same every epoch (as in OLMo-core's offline
packing): making new ones per epoch would change their number, the dataset's length,
and cost a pass over every document per epoch. The loader's own per-epoch shuffle
(``DataLoader(sequences, shuffle=True, seed=...)``) reorders them every epoch, so each
epoch sees the same sequences in a new order. Sequence ``k`` is a pure function of
``(corpus, L, W, long_documents, seed, k)``.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import stat
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _native
from .._permute import FeistelPermutation
from .._seeds import derive
from ._boundaries import store_ends
from ._concat import Pieces
from ._corpus import TokenCorpus
from ._files import open_npy
from ._pack_index import build_bar, count_compiled
from ._pack_recall import recall_window, remember_window, windows_key
from ._pack_rows import gather_rows
from ._pack_windows import Window, pack_compiled

__all__ = [
    "LONG_DOCUMENTS",
    "PackOrder",
    "best_fit_decreasing",
    "count_bins",
]

I64 = npt.NDArray[np.int64]
#: What to do with a document longer than ``L + 1`` tokens.
LONG_DOCUMENTS = ("split", "truncate")
#: Windows whose packed bins are always kept (a batch of a shuffled loader touches several).
CACHED_WINDOWS = 16
#: Pieces kept over all kept windows beyond the ``CACHED_WINDOWS`` most recent: the cache's
#: memory (about 28 bytes a piece), whatever the window size.
CACHED_PIECES = 1 << 18
#: Documents (whole windows) packed per step of the index build: its memory.
BUILD_BLOCK = 1 << 16
#: Values before the cumulative bin counts in ``<file>.pack-<digest>.npy``.
PACK_HEADER = 8
_PACK_MAGIC = 0x64657470616B3031  # "detpak01"


def best_fit_decreasing(sizes: list[int], capacity: int) -> tuple[list[int], int]:
    """Best-fit of ``sizes`` (already in decreasing order) into bins of ``capacity``.

    Each size goes into the open bin with the least room that fits it, the bin opened
    first among equals, or into a new bin. A bin's room is kept as ``room * scale + bin``
    in one sorted list, so one ``bisect`` finds the best bin and its number.

    Returns:
        The bin of each size, and the number of bins.

    Examples:
        >>> best_fit_decreasing([5, 4, 3, 2, 1], capacity=6)
        ([0, 1, 2, 1, 0], 3)
    """
    scale = len(sizes) + 1
    rooms: list[int] = []  # room * scale + bin, sorted: bisect finds the tightest fit
    out: list[int] = []
    opened = 0
    left, insort, pop = bisect.bisect_left, bisect.insort, rooms.pop
    for size in sizes:
        need = size * scale
        i = left(rooms, need)
        if i == len(rooms):
            value = (capacity - size) * scale + opened
            opened += 1
        else:
            value = pop(i) - need
        out.append(value % scale)
        if value >= scale:  # some room left
            insort(rooms, value)
    return out, opened


def count_bins(sizes: list[int], bounds: list[int], capacity: int) -> list[int]:
    """The bins best-fit makes of each slice ``sizes[bounds[w]:bounds[w + 1]]``.

    Each slice must be in decreasing order. The count depends only on the rooms left,
    not on which of two equal rooms takes a piece, so no bin numbers are kept.

    Examples:
        >>> count_bins([5, 4, 3, 2, 1, 6, 6], [0, 5, 7], capacity=6)
        [3, 2]
    """
    out: list[int] = []
    left, insort = bisect.bisect_left, bisect.insort
    for w in range(len(bounds) - 1):
        rooms: list[int] = []
        opened = 0
        for size in sizes[bounds[w] : bounds[w + 1]]:
            i = left(rooms, size)
            if i == len(rooms):
                room = capacity - size
                opened += 1
            else:
                room = rooms.pop(i) - size
            if room:
                insort(rooms, room)
        out.append(opened)
    return out


def _best_fit_windows(sizes: I64, edges: I64, capacity: int, out: I64) -> I64:
    """:func:`best_fit_decreasing` of each ``sizes[edges[i]:edges[i + 1]]``, bins into ``out``.

    In the compiled kernel when it is there (NOTE [ compiled mixture kernel ]); the same
    bins either way. Returns each slice's number of bins.
    """
    kernel = _native.kernel
    counts = np.empty(len(edges) - 1, dtype=np.int64)
    cut = edges.tolist()
    for i in range(len(counts)):
        a, b = cut[i], cut[i + 1]
        if kernel is not None:
            counts[i] = kernel.pack_bins(sizes[a:b], capacity, out[a:b])
        else:
            placed, counts[i] = best_fit_decreasing(sizes[a:b].tolist(), capacity)
            out[a:b] = placed
    return counts


def _count_windows(sizes: I64, bounds: I64, capacity: int) -> I64:
    """:func:`count_bins`, in the compiled kernel when it is there."""
    kernel = _native.kernel
    if kernel is None:
        return np.array(count_bins(sizes.tolist(), bounds.tolist(), capacity), dtype=np.int64)
    counts = np.empty(len(bounds) - 1, dtype=np.int64)
    kernel.pack_counts(sizes, bounds, capacity, counts)
    return counts


def _pieces_of(lengths: I64, capacity: int, split: bool) -> tuple[I64, I64, I64]:
    """Each document's pieces: (its document's position, its offset in it, its size)."""
    per = -(-lengths // capacity) if split else np.ones_like(lengths)
    owner = np.repeat(np.arange(len(lengths), dtype=np.int64), per)
    offset = np.arange(len(owner), dtype=np.int64) - np.repeat(np.cumsum(per) - per, per)
    offset *= capacity
    return owner, offset, np.minimum(capacity, lengths[owner] - offset)


def pack_numpy(
    columns: tuple[I64, I64, I64],
    span: I64,
    ws: list[int],
    capacity: int,
    split: bool,
    bin_key: int,
) -> tuple[I64, list[Window]]:
    """Windows ``ws`` packed in numpy: the reference of NOTE [ compiled window packing ].

    The same arguments and results as :func:`~._pack_windows.pack_compiled`.

    Examples:
        >>> docs, starts, stops = (np.array(v) for v in ([4, 1, 0], [9, 2, 0], [12, 7, 2]))
        >>> counts, windows = pack_numpy((docs, starts, stops), np.array([2, 1]), [3, 5], 5,
        ...                              True, 7)
        >>> counts.tolist(), [w[1].tolist() for w in windows], windows[0][0].tolist()
        ([2, 1], [[4, 1], [0]], [0, 1, 2])
    """
    docs, starts, stops = columns
    lengths = stops - starts
    owner, offset, size = _pieces_of(lengths, capacity, split)
    slot = np.repeat(np.arange(len(ws), dtype=np.int64), span)[owner]  # each piece's window
    # Each window's pieces by decreasing size, stably: one stable sort of one key
    # (window, then room left), the order ``lexsort((-size, slot))`` gives.
    by_size = np.argsort(slot * (capacity + 1) + (capacity - size), kind="stable")
    edges = np.searchsorted(slot, np.arange(len(ws) + 1), side="left")
    placed = np.empty(len(size), dtype=np.int64)
    counts = _best_fit_windows(size[by_size], edges, capacity, placed)
    # Sequence j of window w is its bin read[j]: a bin's rank in the reading order,
    # offset by the sequences of the windows before it in ``ws``.
    # All the windows' bin orders in one pass (NOTE [ batched permutations ]).
    ranks = np.empty(int(counts.sum()), dtype=np.int64)
    base = np.cumsum(counts) - counts
    read = FeistelPermutation.orders(bin_key, counts, np.array(ws, dtype=np.int64))
    ranks[read + np.repeat(base, counts)] = np.arange(len(ranks), dtype=np.int64)
    bin_of = np.empty(len(size), dtype=np.int64)
    bin_of[by_size] = placed + np.repeat(base, np.diff(edges))
    sequence = ranks[bin_of]
    grouped = np.argsort(sequence, kind="stable")
    sizes = np.bincount(sequence, minlength=len(ranks))
    closes = offset + size == lengths[owner]
    docs_of, firsts, sizes_of, closes_of = (docs[owner][grouped], (starts[owner] + offset)[grouped],
                                            size[grouped], closes[grouped])  # fmt: skip
    cut = edges.tolist()
    out: list[Window] = []
    for i, at in enumerate(base.tolist()):
        offsets = np.zeros(int(counts[i]) + 1, dtype=np.int64)
        np.cumsum(sizes[at : at + int(counts[i])], out=offsets[1:])
        a, b = cut[i], cut[i + 1]
        out.append((offsets, docs_of[a:b].copy(), firsts[a:b].copy(), sizes_of[a:b].copy(),
                    closes_of[a:b].copy()))  # fmt: skip
    return counts, out


class PackOrder:
    """The bins of ``corpus``'s documents packed window by window (NOTE [ packed sequences ]).

    Args:
        corpus: The documents.
        seq_len: ``L``; a bin holds ``L + 1`` tokens.
        seed: Keys the document order and each window's bin order.
        window: ``W``, documents per window.
        long_documents: ``"split"`` or ``"truncate"``.
        cache: Read and write the bin counts beside the corpus's first local file.
        progress: Called with the documents packed so far while the bin counts are built.

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "t.npy"
        >>> np.save(path, np.array([1, 0, 2, 2, 0, 3, 3, 3, 0, 4, 0], dtype=np.uint16))
        >>> order = PackOrder(TokenCorpus(path, eod_id=0), 4, seed=0, window=4)
        >>> len(order), order.stats()["padding_tokens"]
        (3, 4)
        >>> sorted(int(order.pieces(k)[2].sum()) for k in range(3))
        [2, 4, 5]
    """

    def __init__(
        self,
        corpus: TokenCorpus,
        seq_len: int,
        seed: int,
        window: int,
        long_documents: str = "split",
        cache: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self._corpus = corpus
        self._progress = progress
        self._capacity = seq_len + 1
        self._window = window
        self._split = long_documents == "split"
        documents = corpus.num_documents
        self._documents = documents
        self._windows = -(-documents // window)
        self._order_key = derive(seed, "tokens-pack-documents")
        self._order = FeistelPermutation(documents, self._order_key)
        self._bin_key = derive(seed, "tokens-pack-bins")
        binding = {
            **corpus.config(),
            "seq_len": seq_len,
            "seed": seed,
            "window": window,
            "long_documents": long_documents,
            "mtimes": [os.stat(p).st_mtime_ns if isinstance(p, Path) else 0 for p in corpus.paths],
        }
        digest = hashlib.blake2b(json.dumps(binding, sort_keys=True).encode(), digest_size=8)
        self._digest = int.from_bytes(digest.digest(), "little", signed=True)
        first = corpus.paths[0]
        self.path: Path | None = None
        if cache and all(isinstance(p, Path) for p in corpus.paths) and isinstance(first, Path):
            self.path = first.with_name(f"{first.name}.pack-{digest.hexdigest()}.npy")
        self._packed: OrderedDict[int, Window] = OrderedDict()
        self._kept_pieces = 0  # the pieces of the windows in ``_packed``
        header = self._load() if self.path is not None else None
        if header is None:
            header = self._build()
            if self.path is not None:
                store_ends(self.path, header)
        self._header = header[:PACK_HEADER].copy()
        self._cumulative = np.array(header[PACK_HEADER:], dtype=np.int64)
        self._files_key = windows_key(corpus, self._digest, self.path, self._cumulative)

    def __len__(self) -> int:
        return int(self._cumulative[-1])

    def stats(self) -> dict[str, Any]:
        """What packing does to the corpus: sequences, pieces, padding and lost tokens."""
        bins, pieces, packed = (int(v) for v in self._header[[4, 6, 7]])
        room = bins * self._capacity
        return {
            "sequences": bins,
            "documents": self._documents,
            "pieces": pieces,
            "tokens": self._corpus.num_tokens,
            "padding_tokens": room - packed,
            "truncated_tokens": self._corpus.num_tokens - packed,
            "padding_fraction": (room - packed) / room,
        }

    def _positions(self, start: int, stop: int) -> I64:
        """The documents at shuffled positions ``[start, stop)``."""
        return self._order.at_epoch(np.arange(start, stop, dtype=np.int64), 0)

    def _build(self) -> I64:
        """The header and the cumulative bin counts, by one best-fit pass per window.

        In the compiled kernel where it runs (NOTE [ compiled pack index ]), else in numpy
        block by block of whole windows (``BUILD_BLOCK`` documents at most, one window at
        least), so the build's memory is that of one block, whatever the corpus's size.
        """
        kernel = _native.kernel
        with build_bar(self._documents, self._progress) as progress:
            found = None
            if kernel is not None:
                found = count_compiled(kernel, self._corpus, self._order_key, self._window,
                                       self._capacity, self._split, progress)  # fmt: skip
            bins, pieces, packed = found if found is not None else self._count(progress)
        if self._split:
            packed = self._corpus.num_tokens
        out = np.empty(PACK_HEADER + self._windows + 1, dtype=np.int64)
        out[:PACK_HEADER] = self._binding(int(bins.sum()), pieces, packed)
        out[PACK_HEADER] = 0
        np.cumsum(bins, out=out[PACK_HEADER + 1 :])
        return out

    def _count(self, progress: Callable[[int], None] | None) -> tuple[I64, int, int]:
        """Each window's bins, the pieces and the tokens packed (truncate only), in numpy."""
        capacity, size_w = self._capacity, self._window
        bins = np.empty(self._windows, dtype=np.int64)
        pieces = packed = 0
        step = max(1, BUILD_BLOCK // size_w)  # windows per block
        for a in range(0, self._windows, step):
            b = min(a + step, self._windows)
            lo, hi = a * size_w, min(b * size_w, self._documents)
            docs = self._positions(lo, hi)
            bounds = self._corpus.starts(np.concatenate([docs, docs + 1]))
            lengths = bounds[len(docs) :] - bounds[: len(docs)]
            del docs, bounds
            windows = np.arange(len(lengths), dtype=np.int64) // size_w
            if self._split:
                pieces += int((-(-lengths // capacity)).sum())
                full, rest = lengths // capacity, lengths % capacity
            else:
                pieces += len(lengths)
                packed += int(np.minimum(lengths, capacity).sum())
                full = (lengths >= capacity).astype(np.int64)
                rest = np.where(lengths >= capacity, 0, lengths)
            # A full piece fills a bin on its own; the rest are best-fit per window, each
            # window's sizes decreasing (one lexsort for the block's windows).
            bins[a:b] = np.bincount(windows, weights=full, minlength=b - a).astype(np.int64)
            kept = rest > 0
            sizes, owners = rest[kept], windows[kept]
            order = np.lexsort((-sizes, owners))
            edges = np.searchsorted(owners[order], np.arange(b - a + 1), side="left")
            bins[a:b] += _count_windows(
                np.ascontiguousarray(sizes[order]), edges.astype(np.int64), capacity
            )
            if progress is not None:
                progress(hi)
        return bins, pieces, packed

    def _binding(self, bins: int, pieces: int, packed: int) -> list[int]:
        return [_PACK_MAGIC, 1, self._digest, self._windows, bins, self._documents, pieces, packed]

    def _load(self) -> I64 | None:
        """The cached header and counts if they pass NOTE [ packed sequences ]'s checks."""
        assert self.path is not None
        try:
            if not stat.S_ISREG(os.stat(self.path).st_mode):
                return None
            mapped = open_npy(self.path, ("int64",), what="pack index")
        except (OSError, ValueError):
            return None
        if len(mapped) != PACK_HEADER + self._windows + 1:  # checked before any copy
            return None
        stored = np.array(mapped)
        head, cumulative = stored[:PACK_HEADER], stored[PACK_HEADER:]
        expected = self._binding(int(head[4]), int(head[6]), int(head[7]))
        if head.tolist() != expected or int(cumulative[0]) != 0:
            return None
        if int(cumulative[-1]) != int(head[4]) or not bool((np.diff(cumulative) > 0).all()):
            return None
        return stored

    def window(self, w: int) -> tuple[I64, I64, I64, I64, npt.NDArray[np.bool_]]:
        """Window ``w`` packed: ``(offsets, docs, firsts, counts, closes)``.

        The pieces are grouped by sequence: sequence ``N[w] + j`` holds pieces
        ``offsets[j]:offsets[j + 1]`` (its bin's, in window order).
        """
        found = self._packed.get(w)
        if found is None:
            self._prepare_windows([w])
            found = self._packed[w]
        self._packed.move_to_end(w)
        return found

    def prepare(self, ks: list[int]) -> None:
        """Pack the windows of sequences ``ks`` not kept yet, all in one pass.

        A batch of a shuffled loader touches several windows; packing them together
        shares each numpy step among them (the bins are those :meth:`window` makes).
        """
        found = np.searchsorted(self._cumulative, np.asarray(ks, dtype=np.int64), side="right")
        self._prepare_windows((found - 1).tolist())

    def _prepare_windows(self, ws: list[int]) -> None:
        wanted = []
        for w in dict.fromkeys(ws):
            if w in self._packed:
                self._packed.move_to_end(w)  # used: not evicted by the packing below
            elif not self._recall(w):
                wanted.append(w)
        self._pack_windows(wanted[-CACHED_WINDOWS:])
        for w in wanted[-CACHED_WINDOWS:]:
            remember_window(self._files_key, w, self._packed.get(w))

    def _recall(self, w: int) -> bool:
        """Keep window ``w`` as packed by an order over the same unchanged files, if any."""
        found = recall_window(self._files_key, w)
        if found is None:
            return False
        self._packed[w] = found
        self._kept_pieces += len(found[1])
        return True

    def _pack_windows(self, ws: list[int]) -> None:
        """Pack windows ``ws`` (NOTE [ packed sequences ]) and keep them.

        In the compiled kernel when it is there (NOTE [ compiled window packing ]), else
        by :func:`pack_numpy`: the same windows either way.
        """
        if not ws:
            return
        size_w = self._window
        first = np.array(ws, dtype=np.int64) * size_w
        span = np.minimum(first + size_w, self._documents) - first
        local = np.arange(int(span.sum()), dtype=np.int64) - np.repeat(np.cumsum(span) - span, span)
        docs = self._order.at_epoch(np.repeat(first, span) + local, 0)
        starts, stops = self._corpus.spans(docs)
        kernel = _native.kernel
        if kernel is not None:
            counts, packed = pack_compiled(kernel, (docs, starts, stops), span, ws,
                                           self._capacity, self._split, self._bin_key)  # fmt: skip
        else:
            counts, packed = pack_numpy((docs, starts, stops), span, ws, self._capacity,
                                        self._split, self._bin_key)  # fmt: skip
        self._check_counts(ws, counts)
        for w, window in zip(ws, packed, strict=True):
            if w in self._packed:  # not reached by prepare or window: they pack new ones
                self._kept_pieces -= len(self._packed[w][1])
            self._packed[w] = window
            self._kept_pieces += len(window[1])
        while len(self._packed) > CACHED_WINDOWS and self._kept_pieces > CACHED_PIECES:
            _, evicted = self._packed.popitem(last=False)
            self._kept_pieces -= len(evicted[1])

    def _check_counts(self, ws: list[int], counts: I64) -> None:
        """Refuse a window whose bins are not as many as the pack index says."""
        for w, count in zip(ws, counts.tolist(), strict=True):
            expected = int(self._cumulative[w + 1] - self._cumulative[w])
            if count != expected:
                where = f"the pack index {self.path}" if self.path is not None else "the pack index"
                raise ValueError(
                    f"{where} should hold the bins of each window, but window {w} packs into "
                    f"{count} bins where it says {expected}; delete the file to rebuild it"
                )

    def rows(self, ks: list[int]) -> tuple[list[Window], I64]:
        """Sequences ``ks``'s windows and bins: sequence ``ks[r]`` is bin ``js[r]`` of window ``r``.

        The windows are packed (or found kept) as :meth:`prepare` does; each is the tuple
        :meth:`window` gives, so a batch is read from them without copying their columns
        (NOTE [ packed batch rows ]).
        """
        wanted = np.asarray(ks, dtype=np.int64)
        found = np.searchsorted(self._cumulative, wanted, side="right") - 1
        windows = found.tolist()
        self._prepare_windows(windows)
        packed = self._packed
        sources = []
        for w in windows:
            kept = packed.get(w)  # not kept when a batch reads over CACHED_WINDOWS windows
            sources.append(kept if kept is not None else self.window(w))
        return sources, wanted - self._cumulative[found]

    def batch(self, ks: list[int]) -> tuple[I64, I64, I64, npt.NDArray[np.bool_], I64]:
        """Sequences ``ks``'s pieces, one row after the other, and each row's piece count.

        The same pieces as :meth:`pieces` gives one by one: :meth:`rows`, then each row is
        one slice of its window's columns, and each column one concatenation.
        """
        return gather_rows(*self.rows(ks))

    def pieces(self, k: int) -> Pieces:
        """Sequence ``k``'s pieces (documents, first corpus tokens, counts, closes)."""
        w = int(np.searchsorted(self._cumulative, k, side="right")) - 1
        offsets, docs, firsts, counts, closes = self.window(w)
        j = k - int(self._cumulative[w])
        at = slice(int(offsets[j]), int(offsets[j + 1]))
        return docs[at], firsts[at], counts[at], closes[at]
