"""A ``chunk`` batch of ``input_ids`` and ``labels`` in one compiled pass.

NOTE [ compiled chunk rows ]
A ``chunk`` batch asking for ``input_ids`` and ``labels`` only (litdata's work plus the
labels' masks, NOTE [ sequence features ]) needs, per window, its ``L + 1`` tokens, the
document ends inside it and two int64 tables. The numpy path (NOTE [ batched chunk
windows ], then :func:`features_rows`) does that in some forty numpy calls and eight
``preadv`` per batch, whose fixed costs were most of the batch at ``B = 8``. The kernel's
``chunk_rows`` (``_kernel_chunk.c``) does the same in one call, without the GIL: per window
one ``pread`` into a scratch row (the file opened and matched to the map as the numpy path
does it), the two searches of numpy's ``searchsorted`` in the file's ends, the same checks
(each document by its two ends, NOTE [ pair check ], then that the searches bracket the
window; skipped once every region of the ends has passed, as there), and one pass that
widens the tokens into the final contiguous ``(B, L)`` tables, with ``-100`` at each
document's last token inside the row. The tables go to :class:`BatchRows` as the numpy
path's do, so the collate hands them to torch without a copy.

Whatever the numpy path would refuse, the kernel only reports: an end that fails a check,
or a token outside ``[0, vocab_size)`` (its least and greatest id are returned), and the
batch is then read by the numpy path, which raises naming the cache or the file and
offset. A file that shrank raises here with the numpy path's message. The numpy path
stays the reference and the fallback (no kernel, other outputs, a batch across files, a
remote file, a dtype the kernel does not read, ends not held as int64):
``tests/tokens/test_tokens_chunk_rows.py`` checks the two equal on random corpora, dtypes,
``L`` and windows, and that each refusal raises the same error either way.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from .._native import kernel
from ._ends_check import mapped_file
from ._features import BatchRows
from ._windows import open_mapped

if TYPE_CHECKING:
    from ._corpus import TokenCorpus

__all__ = ["chunk_rows"]

I64 = npt.NDArray[np.int64]
#: The kernel's code of each token dtype it reads (numpy's ``dtype.str`` without byte order).
KINDS = {"u1": "B", "u2": "H", "u4": "I", "i4": "i", "i8": "q"}
#: The outputs the kernel computes.
COMPILED = frozenset({"input_ids", "labels"})


def chunk_rows(
    corpus: TokenCorpus, starts: I64, width: int, outputs: tuple[str, ...]
) -> BatchRows | None:
    """The batch's rows of windows ``[starts[j], starts[j] + width)``, or ``None``.

    ``None`` where the compiled pass does not apply or found something the numpy path must
    name (NOTE [ compiled chunk rows ]): the caller then reads the batch by that path.

    Raises:
        ValueError: the token file ends before a window (it shrank while open).

    Examples:
        >>> import tempfile, numpy as np
        >>> from pathlib import Path
        >>> from detsamplers.tokens import TokenCorpus
        >>> path = Path(tempfile.mkdtemp()) / "t.npy"
        >>> np.save(path, np.array([5, 6, 0, 7, 0, 8, 9, 9, 0], dtype=np.uint16))
        >>> rows = chunk_rows(TokenCorpus(path, eod_id=0), np.array([4, 0]), 4,
        ...                   ("input_ids", "labels"))
        >>> [row["labels"].tolist() for row in rows] if rows is not None else "no kernel"
        [[-100, 9, 9], [6, 0, -100]]
    """
    if kernel is None or not hasattr(kernel, "chunk_rows") or not COMPILED.issuperset(outputs):
        return None
    token_start = corpus._token_start
    files = np.searchsorted(token_start, starts, side="right") - 1
    f = int(files[0])
    mapped, ends = corpus._tokens[f], corpus._ends[f]
    if not isinstance(mapped, np.ndarray) or bool((files != f).any()):
        return None
    kind = KINDS.get(mapped.dtype.str[1:]) if mapped.dtype.isnative else None
    plain_ends = isinstance(ends, np.ndarray) and ends.dtype == np.int64 and ends.flags.c_contiguous
    found = mapped_file(mapped)
    if kind is None or not plain_ends or found is None:
        return None
    base, size = int(token_start[f]), int(token_start[f + 1] - token_start[f])
    local = np.ascontiguousarray(starts - base, dtype=np.int64)
    if int(local.min()) < 0 or int(local.max()) + width > size:
        return None
    fd = open_mapped(found[0], corpus._identity[f])
    if fd is None:
        return None
    length = width - 1
    table = {key: np.empty((len(local), length), dtype=np.int64) for key in outputs}
    try:
        status, row, least, greatest = kernel.chunk_rows(
            fd, found[1], kind, local, width, ends, size, not corpus._checks[f].complete,
            table["input_ids"], table.get("labels"), None,
        )  # fmt: skip
    finally:
        os.close(fd)
    if status == 2:  # least: the bytes the file still held there
        at = found[1] + int(local[row]) * mapped.itemsize
        raise ValueError(
            f"token file {found[0]} should hold {width * mapped.itemsize} bytes at byte {at}, "
            f"but it ends {least} bytes in; it changed while open, open the corpus again"
        )
    vocab = corpus.vocab_size
    if status != 0 or (vocab is not None and (least < 0 or greatest >= vocab)):
        return None  # the numpy path names the end or the token
    return BatchRows(table)
