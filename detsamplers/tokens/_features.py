"""What a model consumes: a window of ``L + 1`` tokens as inputs, labels and boundaries.

NOTE [ sequence features ]
A sequence is a window of ``L + 1`` tokens made of pieces of documents (a piece is the
part of one document inside the window; the first may start inside its document and
the last may stop inside its). From it:

- ``input_ids`` are tokens ``0 .. L - 1`` and ``labels`` tokens ``1 .. L`` (shifted), but
  ``labels[i] = -100`` where token ``i`` is the last of its document: its target would be
  the next document's first token, across a boundary.
- ``document_ids[i]`` is the corpus number of input ``i``'s document, and
  ``position_ids[i]`` counts from 0 at the start of each piece: attention restarts there
  (a piece continuing a document from the previous sequence restarts at 0, as in Hugging
  Face's ``DataCollatorWithFlattening``).
- ``cu_seqlens`` (int32, FlashAttention's varlen convention) are the offsets of the
  pieces' inputs, ``[0, n_1, n_1 + n_2, ..., L]``, padded to the fixed size ``L + 1`` by
  repeating ``L`` (zero-length sequences at the end), so that sequences stack.

``collate_tokens`` stacks a batch to ``(B, L)`` tensors and flattens ``cu_seqlens`` over the
``B * L`` tokens of the batch read row after row (``B L + 1`` entries, padded the same way),
as ``DataCollatorWithFlattening`` does for a batch flattened into one row. A
block-diagonal causal mask is ``document_ids[:, :, None] == document_ids[:, None, :]`` and
causal within a row (a document never appears twice in one sequence).

``TokenSequences(outputs=...)`` names the arrays wanted (``input_ids`` always, in
:data:`KEYS` order whatever order they were given in): the others are not computed at all,
and ``collate_tokens`` stacks the keys its samples have. ``outputs=("input_ids",
"labels")`` is the work of a loader that hands out the raw window only, as litdata's
``TokensLoader`` does, plus the boundary masking of the labels; in ``chunk`` a batch of it
is one compiled pass (NOTE [ compiled chunk rows ]).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

__all__ = [
    "IGNORE_INDEX",
    "KEYS",
    "BatchRows",
    "check_outputs",
    "collate_tokens",
    "features",
    "features_rows",
    "is_collated",
    "uncollate_tokens",
]

I64 = npt.NDArray[np.int64]
#: The label of a target that is not trained on (PyTorch's cross-entropy default).
IGNORE_INDEX = -100
#: Every array a sequence can hold, in the order ``outputs`` are kept.
KEYS = ("input_ids", "labels", "position_ids", "document_ids", "cu_seqlens")


def check_outputs(outputs: Any) -> tuple[str, ...]:
    """``outputs`` validated, in :data:`KEYS` order.

    Raises:
        TypeError: ``outputs`` is not a tuple or list of strings.
        ValueError: it names an unknown array or one twice, or lacks ``input_ids``.

    Examples:
        >>> check_outputs(["labels", "input_ids"])
        ('input_ids', 'labels')
    """
    if not isinstance(outputs, (tuple, list)) or not all(isinstance(k, str) for k in outputs):
        raise TypeError(
            f"outputs should be a tuple of array names from {', '.join(KEYS)}, but got "
            f"outputs={outputs!r} of type {type(outputs).__name__}"
        )
    unknown = [k for k in outputs if k not in KEYS]
    if unknown:
        raise ValueError(
            f"outputs should name arrays among {', '.join(KEYS)}, but got unknown "
            f"{', '.join(map(repr, unknown))} in outputs={tuple(outputs)!r}; fix the spelling"
        )
    if len(set(outputs)) != len(outputs):
        raise ValueError(
            f"outputs should name each array once, but got outputs={tuple(outputs)!r}; "
            "remove the repeated name"
        )
    if "input_ids" not in outputs:
        raise ValueError(
            f"outputs should include 'input_ids', but got outputs={tuple(outputs)!r}; add "
            "'input_ids' (a batch's shape is read from it)"
        )
    return tuple(k for k in KEYS if k in outputs)


def features(
    tokens: I64,
    docs: I64,
    counts: I64,
    closes: npt.NDArray[np.bool_],
    outputs: tuple[str, ...] = KEYS,
) -> dict[str, npt.NDArray[Any]]:
    """A sequence's model inputs from its window of tokens and its pieces.

    Args:
        tokens: The window's ``L + 1`` tokens.
        docs: Each piece's document.
        counts: Each piece's tokens (they sum to ``L + 1``).
        closes: Whether each piece ends its document.
        outputs: The arrays to compute, from :func:`check_outputs`.

    Examples:
        >>> import numpy as np
        >>> out = features(np.array([5, 6, 0, 7, 8]), np.array([3, 4]), np.array([3, 2]),
        ...                np.array([True, False]))
        >>> out["labels"].tolist(), out["position_ids"].tolist(), out["cu_seqlens"].tolist()
        ([6, 0, -100, 8], [0, 1, 2, 0], [0, 3, 4, 4, 4])
    """
    length = len(tokens) - 1
    ends = np.cumsum(counts)
    out: dict[str, npt.NDArray[Any]] = {"input_ids": tokens[:length].copy()}
    if "labels" in outputs:
        labels = tokens[1:].copy()
        last = ends[closes] - 1
        labels[last[last < length]] = IGNORE_INDEX
        out["labels"] = labels
    # Positions and document ids are each one np.repeat over the pieces, no per-token gather.
    if "position_ids" in outputs:
        positions = np.arange(length + 1, dtype=np.int64) - np.repeat(ends - counts, counts)
        out["position_ids"] = positions[:length]
    if "document_ids" in outputs:
        out["document_ids"] = np.repeat(docs, counts)[:length]
    if "cu_seqlens" in outputs:
        # The inner ends are the offsets below L, already sorted and (pieces holding a
        # token) distinct: no np.unique.
        inner = ends[(ends < length) & (counts > 0)]
        cu = np.full(length + 1, length, dtype=np.int32)
        cu[0] = 0
        cu[1 : 1 + len(inner)] = inner
        out["cu_seqlens"] = cu
    return out


def features_rows(
    tokens: npt.NDArray[np.integer[Any]],
    docs: I64,
    counts: I64,
    closes: npt.NDArray[np.bool_],
    pieces: I64,
    outputs: tuple[str, ...] = KEYS,
) -> list[dict[str, npt.NDArray[Any]]]:
    """:func:`features` of several sequences at once: the same arrays, one numpy pass.

    A batch's sequences are rows of one ``(B, L + 1)`` window table and their pieces one
    list (row after row), so each feature is one array operation over the batch instead
    of a dozen small ones per sequence; each sequence's arrays are rows of the batch's.

    Args:
        tokens: The windows, ``(B, L + 1)``, of any integer dtype (the arrays are int64).
        docs: Each piece's document, the rows' pieces one after the other.
        counts: Each piece's tokens (each row's sum to ``L + 1``).
        closes: Whether each piece ends its document.
        pieces: How many pieces each row has.
        outputs: The arrays to compute, from :func:`check_outputs`.

    Examples:
        >>> import numpy as np
        >>> rows = features_rows(np.array([[5, 6, 0, 7, 8], [1, 0, 2, 3, 0]]),
        ...                      np.array([3, 4, 4, 5, 6]), np.array([3, 2, 1, 1, 3]),
        ...                      np.array([True, False, True, True, True]), np.array([2, 3]))
        >>> rows[1]["labels"].tolist(), rows[1]["position_ids"].tolist()
        ([-100, -100, 3, 0], [0, 0, 0, 1])
        >>> rows[1]["cu_seqlens"].tolist()
        [0, 1, 2, 4, 4]
    """
    count, width = tokens.shape
    length = width - 1
    ends = np.cumsum(counts)  # in the flattened table
    row = np.repeat(np.arange(count, dtype=np.int64), pieces)
    local = ends - row * width
    # Each int64 (B, L) table made contiguous at once (from the file's dtype, when read so),
    # so that the collate converts it without a copy.
    table: dict[str, npt.NDArray[Any]] = {"input_ids": tokens[:, :length].astype(np.int64)}
    if "labels" in outputs:
        labels = tokens[:, 1:].astype(np.int64)
        last = local[closes] - 1
        inside = last < length
        labels[row[closes][inside], last[inside]] = IGNORE_INDEX
        table["labels"] = labels
    if "position_ids" in outputs:
        flat = np.arange(count * width, dtype=np.int64) - np.repeat(ends - counts, counts)
        table["position_ids"] = flat.reshape(count, width)[:, :length]
    if "document_ids" in outputs:
        table["document_ids"] = np.repeat(docs, counts).reshape(count, width)[:, :length]
    if "cu_seqlens" in outputs:
        # Each row's inner ends (below L) at columns 1, 2, ... of its row.
        inner = (local < length) & (counts > 0)
        running = np.cumsum(inner)
        before = np.concatenate([[0], running])[np.cumsum(pieces) - pieces]
        cu = np.full((count, width), length, dtype=np.int32)
        cu[:, 0] = 0
        cu[row[inner], (running - before[row])[inner]] = local[inner]
        table["cu_seqlens"] = cu
    return BatchRows(table)


class BatchRows(list[dict[str, npt.NDArray[Any]]]):
    """A batch's sequences as rows of one table per key (NOTE [ batch rows ]).

    NOTE [ batch rows ]
    :func:`features_rows` computes each array of a batch as one ``(B, ...)`` table and hands
    out its rows, so that a dataset's ``__getitems__`` returns a list of per-sequence dicts
    as torch's fetcher expects. :func:`collate_tokens` would then copy the rows back into
    tables (``np.stack``). A ``BatchRows`` keeps the tables beside the rows, and
    ``collate_tokens`` converts the tables directly (one copy at most: a table that is a
    strided view is made contiguous), as long as the list still holds the same row dicts
    holding the same arrays (:meth:`tables`); a row changed in place changes its table too,
    since a row is a view of it. Anything else collates row by row, as before. A builder
    may hand over what it already made of a table as the collate would
    (``collated``: the packed rows' flattened ``cu_seqlens``, NOTE [ packed batch rows ]);
    that is used while :meth:`tables` holds, so change such a row's ``cu_seqlens`` by
    assigning a new array, not in place.

    Examples:
        >>> import numpy as np
        >>> rows = BatchRows({"input_ids": np.arange(6).reshape(2, 3)})
        >>> rows[1]["input_ids"].tolist(), rows.tables() is not None
        ([3, 4, 5], True)
        >>> rows[0] = {"input_ids": np.zeros(3)}
        >>> rows.tables() is None
        True
    """

    def __init__(
        self,
        table: dict[str, npt.NDArray[Any]],
        collated: Mapping[str, npt.NDArray[Any]] | None = None,
    ) -> None:
        keys = tuple(table)
        # Iterating a (B, ...) table gives its row views in C, without one index call each;
        # the rows' dicts are made in C too (a batch of five tables makes 40 views a batch).
        views = list(zip(*table.values(), strict=True))  # every table has the batch's B rows
        super().__init__(map(dict, map(zip, itertools.repeat(keys), views)))
        self._table = table
        #: What the builder already made of a table as ``collate_tokens`` would (the
        #: flattened ``cu_seqlens``), used as long as :meth:`tables` holds.
        self.collated = dict(collated or {})
        self._rows = tuple(self)
        self._width = len(keys)
        self._views = list(itertools.chain.from_iterable(views))

    def tables(self) -> dict[str, npt.NDArray[Any]] | None:
        """The tables, or ``None`` if the list or a row no longer holds what was made."""
        rows = self._rows
        if len(self) != len(rows) or not all(map(operator.is_, self, rows)):
            return None
        if not all(map(self._width.__eq__, map(len, rows))):
            return None
        held = list(itertools.chain.from_iterable(map(dict.values, rows)))
        if not all(map(operator.is_, held, self._views)):
            return None
        return self._table


def _boundaries(cu: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The offsets of a padded ``cu_seqlens`` without its padding (one final ``L``)."""
    total = cu[-1]
    return cu[: int(np.searchsorted(cu, total, side="left")) + 1]


def collate_tokens(samples: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    """Stack sequences into a batch, with ``cu_seqlens`` over the flattened batch.

    Pass it as ``collate_fn``; the default collate works too, stacking each sequence's
    own ``cu_seqlens`` into ``(B, L + 1)`` (NOTE [ sequence features ]).

    Args:
        samples: Sequences from :class:`~detsamplers.tokens.TokenSequences`.

    Returns:
        ``input_ids``, ``labels``, ``position_ids``, ``document_ids``: int64 ``(B, L)``;
        ``cu_seqlens``: int32 ``(B L + 1,)``, the pieces' offsets in the batch read row
        after row, padded by repeating ``B L``. Only the keys the samples hold (the
        sequences' ``outputs``).

    Raises:
        ValueError: ``samples`` is empty or its sequences differ in length.

    Examples:
        >>> import numpy as np
        >>> from detsamplers.tokens import collate_tokens
        >>> one = {"input_ids": np.array([1, 2]), "labels": np.array([2, -100]),
        ...        "position_ids": np.array([0, 1]), "document_ids": np.array([0, 0]),
        ...        "cu_seqlens": np.array([0, 2, 2], dtype=np.int32)}
        >>> batch = collate_tokens([one, one])
        >>> batch["input_ids"].shape, batch["cu_seqlens"].tolist()
        (torch.Size([2, 2]), [0, 2, 4, 4, 4])
    """
    if not samples:
        raise ValueError("samples should hold at least one sequence, but got an empty batch")
    lengths = {len(sample["input_ids"]) for sample in samples}
    if len(lengths) != 1:
        raise ValueError(
            f"samples should be sequences of one length, but got lengths {sorted(lengths)}; "
            "batch sequences of one TokenSequences"
        )
    length = lengths.pop()
    built = samples if isinstance(samples, BatchRows) else None
    tables = built.tables() if built is not None else None
    if built is not None and tables is not None:
        return _collate_tables(tables, length, built.collated)
    out = {
        key: torch.as_tensor(np.stack([np.asarray(s[key]) for s in samples]), dtype=torch.int64)
        for key in KEYS[:4]
        if key in samples[0]
    }
    if "cu_seqlens" not in samples[0]:
        return out
    total = length * len(samples)
    cu = np.full(total + 1, total, dtype=np.int32)
    offsets = np.concatenate(
        [_boundaries(np.asarray(s["cu_seqlens"])) + i * length for i, s in enumerate(samples)]
    )
    step = np.diff(offsets)
    if (step >= 0).all():  # rows in order: only the joins repeat (row i's end, row i+1's 0)
        offsets = offsets[np.concatenate([[True], step > 0])]
    else:
        offsets = np.unique(offsets)
    cu[: len(offsets)] = offsets
    out["cu_seqlens"] = torch.from_numpy(cu)
    return out


def _collate_tables(
    tables: Mapping[str, npt.NDArray[Any]],
    length: int,
    collated: Mapping[str, npt.NDArray[Any]],
) -> dict[str, torch.Tensor]:
    """``collate_tokens`` of a :class:`BatchRows`' tables: the same tensors, no stacking."""
    out = {
        key: torch.from_numpy(np.ascontiguousarray(tables[key], dtype=np.int64))
        for key in KEYS[:4]
        if key in tables
    }
    if "cu_seqlens" not in tables:
        return out
    if "cu_seqlens" in collated:  # flattened by the builder (NOTE [ packed batch rows ])
        out["cu_seqlens"] = torch.from_numpy(collated["cu_seqlens"])
        return out
    # Row j's offsets shifted by j L, each kept where it rises: the padding (repeats of L)
    # and row j + 1's leading 0 (row j's L) drop, as the row-by-row join does.
    cu = np.asarray(tables["cu_seqlens"], dtype=np.int64)
    rows = len(cu)
    total = length * rows
    shifted = cu[:, 1:] + (np.arange(rows, dtype=np.int64) * length)[:, None]
    offsets = shifted[cu[:, 1:] != cu[:, :-1]]
    flat = np.full(total + 1, total, dtype=np.int32)
    flat[0] = 0
    flat[1 : 1 + len(offsets)] = offsets
    out["cu_seqlens"] = torch.from_numpy(flat)
    return out


def is_collated(batch: Any) -> bool:
    """Whether ``batch`` has the layout of :func:`collate_tokens`'s output.

    That is the keys of a sequence, ``(B, L)`` tensors, and ``cu_seqlens`` of ``B L + 1``
    entries over the flattened batch.

    Examples:
        >>> import torch
        >>> batch = {key: torch.zeros(2, 3, dtype=torch.int64) for key in KEYS[:4]}
        >>> is_collated({**batch, "cu_seqlens": torch.tensor([0, 3, 6, 6, 6, 6, 6])})
        True
        >>> is_collated({**batch, "cu_seqlens": torch.zeros(2, 4)})
        False
    """
    if not isinstance(batch, Mapping) or set(batch) != set(KEYS):
        return False
    if not all(isinstance(batch[key], torch.Tensor) for key in KEYS):
        return False
    shapes = {tuple(batch[key].shape) for key in KEYS[:4]}
    if len(shapes) != 1:
        return False
    shape = shapes.pop()
    cu = batch["cu_seqlens"]
    return len(shape) == 2 and cu.ndim == 1 and cu.shape[0] == shape[0] * shape[1] + 1


def uncollate_tokens(batch: Mapping[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """Split a batch of :func:`collate_tokens` back into its sequences, as tensors.

    The inverse of ``collate_tokens``: row ``j``'s ``cu_seqlens`` are the batch's offsets
    inside ``[j L, (j + 1) L]``, shifted to start at 0 and padded to ``L + 1`` by repeating
    ``L`` (NOTE [ sequence features ]). ``detsamplers.testing`` uses it to compare token
    batches record by record when a resume changes the batch size or world size.

    Args:
        batch: A batch that :func:`collate_tokens` returned.

    Raises:
        ValueError: ``batch`` does not have the layout of ``collate_tokens``'s output.

    Examples:
        >>> import numpy as np
        >>> one = {"input_ids": np.array([1, 2]), "labels": np.array([2, -100]),
        ...        "position_ids": np.array([0, 1]), "document_ids": np.array([0, 0]),
        ...        "cu_seqlens": np.array([0, 2, 2], dtype=np.int32)}
        >>> two = {**one, "position_ids": np.array([0, 0]), "document_ids": np.array([4, 5]),
        ...        "cu_seqlens": np.array([0, 1, 2], dtype=np.int32)}
        >>> rows = uncollate_tokens(collate_tokens([one, two]))
        >>> [row["cu_seqlens"].tolist() for row in rows]
        [[0, 2, 2], [0, 1, 2]]
    """
    if not is_collated(batch):
        keys = sorted(batch) if isinstance(batch, Mapping) else []
        raise ValueError(
            "batch should be the output of collate_tokens (the keys "
            f"{', '.join(KEYS)}, (B, L) tensors and cu_seqlens of B L + 1 entries), but got "
            f"{type(batch).__name__} with keys {keys}; split only what collate_tokens returned"
        )
    rows, length = batch["input_ids"].shape
    offsets = batch["cu_seqlens"].numpy(force=True)
    out = []
    for j in range(rows):
        inside = offsets[(offsets >= j * length) & (offsets <= (j + 1) * length)] - j * length
        inside = np.unique(np.concatenate([[0], inside, [length]]))
        cu = np.full(length + 1, length, dtype=np.int32)
        cu[: len(inside)] = inside
        row = {key: batch[key][j] for key in KEYS[:4]}
        row["cu_seqlens"] = torch.from_numpy(cu)
        out.append(row)
    return out
