"""A batch's ``pack`` windows packed end to end by the compiled kernel.

NOTE [ compiled window packing ]
A seek re-packs the windows its first batch meets (NOTE [ packed sequences ]): eight
windows of 1,000 documents at ``L = 2048`` and batches of 8. In numpy that is about sixty
array passes on some 9,000 pieces (the pieces, one stable sort, the bins' keyed orders by
the batched Feistel network, NOTE [ batched permutations ], the grouping by sequence and
the windows' columns), each a fresh allocation whose pages a new process faults in: 3 to 4
ms of CPU in a fresh process, most of a resume's first batch. ``pack_windows`` in
``_kernel_pack_windows.c`` runs the same steps in one call without the GIL, on the
documents' two ends that ``TokenCorpus.spans`` read and checked: each window's pieces in
window order, sorted by decreasing size with ties in window order (a stable radix sort of
the room left), best-fit by ``_kernel_pack.c``'s loop, the bins' reading order by the
keyed permutation on the same 32-bit words as numpy (cycle-walked), and the pieces
grouped by sequence, in window order within one (a stable counting sort). The arrays are
those of the numpy path, which stays in ``PackOrder`` as the fallback and the reference
(tests/tokens/test_tokens_pack_windows.py compares them on random corpora, windows,
capacities and seeds, and the kernel's orders with ``FeistelPermutation.orders``).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import numpy.typing as npt

from .._permute import _round_seeds

__all__ = ["Window", "pack_compiled"]

I64 = npt.NDArray[np.int64]
#: A packed window: ``(offsets, docs, firsts, counts, closes)`` (``PackOrder.window``).
Window = tuple[I64, I64, I64, I64, npt.NDArray[np.bool_]]


def pack_compiled(
    kernel: ModuleType,
    columns: tuple[I64, I64, I64],
    span: I64,
    ws: list[int],
    capacity: int,
    split: bool,
    bin_key: int,
) -> tuple[I64, list[Window]]:
    """Windows ``ws`` packed by the kernel: each one's bin count, and each one packed.

    Args:
        kernel: The compiled kernel (``_native.kernel``).
        columns: The windows' documents one window after the other, and where each
            starts and stops in the corpus (``TokenCorpus.spans``).
        span: Documents of each window.
        ws: The windows' numbers (the bins' orders are keyed by them).
        capacity: Tokens a bin holds, ``L + 1``.
        split: Cut a long document into pieces (else keep its first ``capacity`` tokens).
        bin_key: The key of the bins' reading orders.

    Examples:
        Two windows (documents 4 and 1 of 3 and 5 tokens, then document 0 of 2) in bins of
        5 tokens: the first window's two pieces fit no bin together.

        >>> import numpy as np
        >>> from detsamplers import _native
        >>> docs, starts, stops = (np.array(v) for v in ([4, 1, 0], [9, 2, 0], [12, 7, 2]))
        >>> counts, windows = pack_compiled(_native.kernel, (docs, starts, stops),
        ...                                np.array([2, 1]), [3, 5], 5, True, 7)
        >>> counts.tolist(), [w[1].tolist() for w in windows], windows[0][0].tolist()
        ([2, 1], [[4, 1], [0]], [0, 1, 2])
    """
    docs, starts, stops = columns
    pieces = len(docs)
    if split:
        pieces = int((-(-(stops - starts) // capacity)).sum())
    counts = np.empty(len(ws), dtype=np.int64)
    docs_of, firsts, sizes = (np.empty(pieces, dtype=np.int64) for _ in range(3))
    closes = np.empty(pieces, dtype=np.bool_)
    offsets = np.empty(pieces + len(ws), dtype=np.int64)
    kernel.pack_windows(docs, starts, stops, span, capacity, split, _round_seeds(bin_key),
                        np.array(ws, dtype=np.int64), counts, docs_of, firsts, sizes, closes,
                        offsets)  # fmt: skip
    out: list[Window] = []
    at = piece = 0
    for count in counts.tolist():
        own = offsets[at : at + count + 1]
        a, b = piece, piece + int(own[-1])
        out.append((own.copy(), docs_of[a:b].copy(), firsts[a:b].copy(), sizes[a:b].copy(),
                    closes[a:b].copy()))  # fmt: skip
        at, piece = at + count + 1, b
    return counts, out
