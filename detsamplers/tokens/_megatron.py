r"""Megatron-Core's ``.bin``/``.idx`` pair read as one token file, without Megatron installed.

NOTE [ megatron files ]
Megatron-Core's ``IndexedDataset`` (``megatron/core/datasets/indexed_dataset.py``) keeps
its tokens in ``<prefix>.bin`` (no header: every sequence's tokens, back to back) and
describes them in ``<prefix>.idx``, all little-endian::

    9 bytes   magic b"MMIDIDX\x00\x00"
    8 bytes   version, uint64 (always 1)
    1 byte    token dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16
              (6 float64 and 7 float32 are not token ids and are refused)
    8 bytes   S, the number of sequences, uint64
    8 bytes   D + 1, the number of document indices, uint64
    S int32   sequence lengths, in tokens
    S int64   sequence pointers, in bytes into the .bin
    D+1 int64 document indices: document d is sequences [idx[d], idx[d + 1])
    S int8    sequence modes, only in multimodal files (not read here)

What a document is here: one Megatron document, its sequences concatenated (a file
written without ``--split-sentences`` has one sequence per document, so the two agree;
with it, a document is the whole text, not a sentence). Megatron's ``GPTDataset`` shuffles
sequences instead; for us sequences are only how the file stores a document.

An ``.idx`` is read back, never trusted (NOTE [ token files ]): both files are opened only
if they are regular files, and the header's counts are checked against the ``.idx``'s
size before anything is mapped: the file must be exactly ``34 + 12 S + 8 (D + 1)`` bytes,
or ``S`` more with modes, so a header that lies about its counts fails naming the file
and nothing is allocated from them. The arrays are then memory-mapped and checked in
blocks of ``CHECK_BLOCK`` (bounded memory): lengths are not negative, pointers are
exactly the running sum of lengths times the dtype's size from 0 (so the ``.bin`` is one
stream of tokens, read by the corpus like a raw ``.bin``), the last sequence ends at the
end of the ``.bin``, and the document indices run from 0 to ``S``, strictly increasing,
each document holding at least one token. What the corpus keeps is what every file gives
it (NOTE [ document boundaries ]): the ``.bin`` memory-mapped (never read at open) and the
documents' token ends, 8 bytes per document gathered from the pointers. Opening reads the
``.idx`` once, O(S + D), and nothing of the ``.bin``; a pickled corpus maps the ``.bin``
again after the header checks alone (O(1)).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ._files import _open_regular

__all__ = [
    "CHECK_BLOCK",
    "MAGIC",
    "MegatronHeader",
    "bin_path",
    "megatron_ends",
    "megatron_tokens",
    "read_header",
]

I64 = npt.NDArray[np.int64]
MAGIC = b"MMIDIDX\x00\x00"
#: Magic, version, dtype code, sequence count, document index count: 34 bytes.
HEADER = struct.Struct("<9sQBQQ")
#: Megatron's ``DType`` codes of integer tokens.
DTYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 8: "uint16"}
FLOATS = {6: "float64", 7: "float32"}
#: Sequences (or documents) checked per step at open: 1M, about 16 MB of arrays at a time.
CHECK_BLOCK = 1 << 20


class MegatronHeader(NamedTuple):
    """An ``.idx`` header checked against its file's size."""

    dtype: np.dtype[Any]
    sequences: int
    documents: int


def bin_path(idx: Path) -> Path:
    """The ``.bin`` of the pair whose index is ``idx``."""
    return idx.with_suffix(".bin")


def read_header(idx: Path) -> MegatronHeader:
    """Read the header of ``idx`` and check it against the file's size.

    Raises:
        ValueError: the file is not regular, too short, has another magic, version or
            dtype code, or a size other than its counts say (NOTE [ megatron files ]).
    """
    with _open_regular(idx) as handle:
        return _header(handle, idx)


def _header(handle: Any, idx: Path) -> MegatronHeader:
    size = os.fstat(handle.fileno()).st_size
    head = handle.read(HEADER.size)
    if len(head) < HEADER.size:
        raise ValueError(
            f"Megatron index {idx} should start with a {HEADER.size}-byte header, but it is "
            f"{size} bytes; pass the .idx that Megatron's IndexedDatasetBuilder wrote"
        )
    magic, version, code, sequences, indices = HEADER.unpack(head)
    if magic != MAGIC:
        raise ValueError(
            f"Megatron index {idx} should start with the magic {MAGIC!r}, but it starts with "
            f"{magic!r}; it is not a Megatron .idx file"
        )
    if version != 1:
        raise ValueError(
            f"Megatron index {idx} should be of version 1, but its header says version "
            f"{version}; this reader knows Megatron-Core's version 1 only"
        )
    if code not in DTYPES:
        what = f"{FLOATS[code]}, not token ids" if code in FLOATS else "no dtype"
        raise ValueError(
            f"Megatron index {idx} should have a token dtype code in {sorted(DTYPES)} "
            f"({', '.join(DTYPES.values())}), but it has code {code}, which is {what}; "
            "write the tokens as integers"
        )
    expected = HEADER.size + 12 * sequences + 8 * indices
    if size not in (expected, expected + sequences):
        raise ValueError(
            f"Megatron index {idx} should be {expected} bytes as its header says "
            f"({sequences} sequences and {indices} document indices after a "
            f"{HEADER.size}-byte header, or {sequences} more with modes), but it is {size} "
            "bytes; the file is truncated or its header lies"
        )
    if sequences < 1 or indices < 2:
        raise ValueError(
            f"Megatron index {idx} should describe at least one document, but its header "
            f"says {sequences} sequences and {indices} document indices; remove it from "
            "the corpus"
        )
    return MegatronHeader(np.dtype(DTYPES[code]).newbyteorder("<"), sequences, indices - 1)


def megatron_tokens(idx: Path) -> npt.NDArray[Any]:
    """Memory-map the ``.bin`` of ``idx`` after the header checks alone (O(1)).

    Raises:
        ValueError: a header check fails, or the ``.bin`` is not a regular file or not
            whole tokens of the header's dtype.
    """
    header = read_header(idx)
    data = bin_path(idx)
    with _open_regular(data) as handle:
        size = os.fstat(handle.fileno()).st_size
        itemsize = header.dtype.itemsize
        if size == 0 or size % itemsize:
            raise ValueError(
                f"Megatron data file {data} should hold whole {header.dtype.name} tokens as "
                f"{idx.name} says ({itemsize} bytes each, at least one), but it is {size} "
                "bytes; pair each .idx with the .bin written beside it"
            )
        return np.memmap(handle, dtype=header.dtype, mode="r", shape=(size // itemsize,))


def _index_arrays(handle: Any, header: MegatronHeader) -> tuple[Any, Any, Any]:
    """The lengths, pointers and document indices of an ``.idx``, memory-mapped."""
    s, base = header.sequences, HEADER.size
    lengths = np.memmap(handle, dtype="<i4", mode="r", offset=base, shape=(s,))
    pointers = np.memmap(handle, dtype="<i8", mode="r", offset=base + 4 * s, shape=(s,))
    indices = np.memmap(
        handle, dtype="<i8", mode="r", offset=base + 12 * s, shape=(header.documents + 1,)
    )
    return lengths, pointers, indices


def _check_pointers(idx: Path, lengths: Any, pointers: Any, itemsize: int, limit: int) -> int:
    """Check that pointers are the running sum of lengths; the bytes they cover in all."""
    carry = 0
    for start in range(0, len(lengths), CHECK_BLOCK):
        block = np.asarray(lengths[start : start + CHECK_BLOCK], dtype=np.int64)
        if int(block.min()) < 0:
            at = start + int(np.argmin(block))
            raise ValueError(
                f"Megatron index {idx} should hold sequence lengths of at least 0, but "
                f"sequence {at} has length {int(lengths[at])}; the file is corrupt"
            )
        block *= itemsize  # bytes per sequence
        expected = np.cumsum(block)
        total = int(expected[-1])
        expected -= block
        expected += carry
        got = pointers[start : start + CHECK_BLOCK]
        bad = np.flatnonzero(got != expected)
        if len(bad):
            at = int(bad[0])
            raise ValueError(
                f"Megatron index {idx} should point sequence {start + at} at byte "
                f"{int(expected[at])} of the .bin (the lengths before it times {itemsize} "
                f"bytes), but it points at byte {int(got[at])}; only contiguous files, as "
                "IndexedDatasetBuilder writes them, are read"
            )
        carry += total
        if carry > limit:  # past the .bin: stop before the sum can near int64's end
            break
    return carry


def _document_ends(
    idx: Path, pointers: Any, indices: Any, header: MegatronHeader, count: int
) -> I64:
    """Each document's token end, gathered from the pointers of the sequences after it."""
    s, itemsize = header.sequences, header.dtype.itemsize
    first, last = int(indices[0]), int(indices[-1])
    if first != 0 or last != s:
        raise ValueError(
            f"Megatron index {idx} should have document indices from 0 to its {s} sequences, "
            f"but they run from {first} to {last}; the file is corrupt"
        )
    ends = np.empty(header.documents, dtype=np.int64)
    for start in range(0, header.documents, CHECK_BLOCK):
        block = indices[start : start + CHECK_BLOCK + 1]
        bad = np.flatnonzero(block[1:] <= block[:-1])
        if len(bad):
            at = start + int(bad[0])
            raise ValueError(
                f"Megatron index {idx} should have strictly increasing document indices, "
                f"but document {at} runs from sequence {int(indices[at])} to "
                f"{int(indices[at + 1])}; the file is corrupt"
            )
        stops = np.asarray(block[1:], dtype=np.int64)
        found = ends[start : start + len(stops)]
        if int(stops[-1]) == s:  # the last document ends at the end of the .bin
            found[-1] = count
            stops = stops[:-1]
        found[: len(stops)] = pointers[stops]
        found[: len(stops)] //= itemsize
    empty = np.flatnonzero(ends[1:] <= ends[:-1]) + 1  # document 0 is checked on its own
    if int(ends[0]) <= 0 or len(empty):
        at = 0 if int(ends[0]) <= 0 else int(empty[0])
        raise ValueError(
            f"Megatron index {idx} should give every document at least one token, but "
            f"document {at} (sequences {int(indices[at])} to {int(indices[at + 1])}) has "
            "none; drop empty documents when writing it"
        )
    return ends


def megatron_ends(idx: Path, tokens: npt.NDArray[Any]) -> I64:
    """The token end of each document of the pair ``idx`` (NOTE [ megatron files ]).

    Args:
        idx: The ``.idx`` file.
        tokens: Its ``.bin``, memory-mapped by :func:`megatron_tokens`.

    Raises:
        ValueError: a check of NOTE [ megatron files ] fails (the message names the file).

    Examples:
        >>> import struct, tempfile, numpy as np
        >>> from pathlib import Path
        >>> idx = Path(tempfile.mkdtemp()) / "c.idx"
        >>> np.array([7, 8, 9, 6], dtype=np.uint16).tofile(idx.with_suffix(".bin"))
        >>> header = MAGIC + struct.pack("<QBQQ", 1, 8, 3, 3)  # 3 sequences, 2 documents
        >>> arrays = [np.array(a, dtype=t) for a, t in [([2, 1, 1], "<i4"),
        ...           ([0, 4, 6], "<i8"), ([0, 2, 3], "<i8")]]
        >>> _ = idx.write_bytes(header + b"".join(a.tobytes() for a in arrays))
        >>> megatron_ends(idx, megatron_tokens(idx)).tolist()
        [3, 4]
    """
    with _open_regular(idx) as handle:
        header = _header(handle, idx)
        lengths, pointers, indices = _index_arrays(handle, header)
    limit = len(tokens) * header.dtype.itemsize
    covered = _check_pointers(idx, lengths, pointers, header.dtype.itemsize, limit)
    if covered != limit:
        where = (
            f"run past its end (to byte {covered} at least)"
            if covered > limit
            else f"end at byte {covered}, {limit - covered} bytes before its end"
        )
        raise ValueError(
            f"Megatron index {idx} should describe the {limit} bytes of "
            f"{bin_path(idx).name} exactly, but its sequences {where}; pair each .idx with "
            "the .bin written beside it"
        )
    return _document_ends(idx, pointers, indices, header, len(tokens))
