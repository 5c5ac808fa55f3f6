"""A checkpoint folder's ``metadata.json``: read, validated, and checked against its files.

NOTE [ checkpoint metadata ]
``metadata.json`` is written last (NOTE [ checkpoint layout ]), so a folder without it is
incomplete and passed over: a crash while it was written. Everything else about it is
checked before a resume trusts it, because it decides which files are read and where
training continues:

- the file is a regular file of at most :data:`MAX_METADATA_BYTES`, holding a JSON object;
- ``format_version`` is an int from 1 to :data:`FORMAT_VERSION`; a larger one was written
  by a newer detsamplers, and that is said, never skipped in favour of an older folder;
- each field has its type and range (``bool`` is not an int here), and the fields agree:
  ``global_batch_size`` is a multiple of ``world_size``, ``samples_trained`` follows from
  ``batch_segments``, ``records_consumed`` equals it, ``dataset_length`` is the last
  length of ``dataset_growth``, and a ``batch-N`` folder holds ``batches_trained == N``;
- ``files`` is exactly ``state-dict.pth`` and one rank file per rank of ``world_size``
  (so no name can point outside the folder), each a regular file.

A folder whose ``metadata.json`` does not parse (cut short where renames are not atomic)
or whose files are gone (a crash while retention deleted it) is incomplete too, and
:func:`find_latest_checkpoint` passes over it with a warning that names it; anything else
wrong is an error that names the file and the field. :func:`read_checkpoint_metadata` is
the one reader; tools that list checkpoint folders use it as well.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
from typing import Any

__all__ = [
    "FORMAT_VERSION",
    "MAX_METADATA_BYTES",
    "METADATA",
    "STATE",
    "IncompleteCheckpointError",
    "expected_files",
    "rank_file",
    "read_checkpoint_metadata",
]

FORMAT_VERSION = 1
METADATA = "metadata.json"
STATE = "state-dict.pth"
MAX_METADATA_BYTES = 16 * 1024 * 1024  # hparams and metrics included; real ones are ~1 KiB
FOLDER = re.compile(r"^batch-(\d+)$")

# name: (minimum, may be None); ints that are not bools.
_REQUIRED_INTS = {"batches_trained": 0, "global_batch_size": 1, "world_size": 1}
_OPTIONAL_INTS: dict[str, tuple[int | None, bool]] = {
    "samples_trained": (0, False),
    "records_consumed": (0, False),
    "aggregation_frequency": (1, False),
    "last_validation": (-1, False),
    "epoch_index": (0, False),
    "epoch_start_sample": (0, False),
    "dataset_length": (0, True),
    "data_seed": (None, True),
}
_OPTIONAL_TYPES: dict[str, tuple[type, ...]] = {
    "pending_gradients": (bool,),
    "hparams": (dict, type(None)),
    "validation_metrics": (dict, type(None)),
    "data_fingerprint": (str, type(None)),
    "data_digest": (str, type(None)),
    "data_global_digest": (str, type(None)),
    "dataset_growth": (list, type(None)),
    "batch_size_schedule": (int, str, list),
}


class IncompleteCheckpointError(ValueError):
    """A folder that is not (or no longer) a complete checkpoint: no metadata, or files gone.

    ``reason`` says what is missing, without the advice of the message.

    Examples:
        >>> error = IncompleteCheckpointError("path should be ...", "rank-0.pth is gone")
        >>> isinstance(error, ValueError), error.reason
        (True, 'rank-0.pth is gone')
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def rank_file(rank: int) -> str:
    """The name of rank ``rank``'s file in a checkpoint folder.

    Examples:
        >>> rank_file(3)
        'rank-3.pth'
    """
    return f"rank-{rank}.pth"


def expected_files(world_size: int) -> list[str]:
    """The files of a checkpoint of ``world_size`` ranks, sorted as ``metadata.json`` lists them.

    Examples:
        >>> expected_files(2)
        ['rank-0.pth', 'rank-1.pth', 'state-dict.pth']
    """
    return sorted([STATE, *(rank_file(r) for r in range(world_size))])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(where: str, metadata: dict[str, Any], name: str, minimum: int | None) -> None:
    value = metadata[name]
    if not _is_int(value) or (minimum is not None and value < minimum):
        bound = "an int" if minimum is None else f"an int >= {minimum}"
        raise ValueError(f"{where}: {name} should be {bound}, but got {name}={value!r}")


def _check_segments(where: str, metadata: dict[str, Any]) -> None:
    segments = metadata["batch_segments"]
    shaped = isinstance(segments, list) and segments and all(
        isinstance(s, list) and len(s) == 3 and all(_is_int(v) and v >= 0 for v in s)
        for s in segments
    )  # fmt: skip
    if not shaped or any(s[2] < 1 for s in segments):
        raise ValueError(
            f"{where}: batch_segments should be a non-empty list of [batch, sample, size] "
            f"lists of ints (size >= 1), but got batch_segments={segments!r}"
        )
    for before, after in itertools.pairwise(segments):
        if after[0] < before[0] or after[1] != before[1] + (after[0] - before[0]) * before[2]:
            raise ValueError(
                f"{where}: batch_segments should each start where the one before ends, but "
                f"got {before!r} then {after!r}"
            )
    batch, sample, size = segments[-1]
    batches = metadata["batches_trained"]
    if batch > batches:
        raise ValueError(
            f"{where}: batch_segments should start at or before batches_trained={batches}, "
            f"but the last starts at batch {batch}"
        )
    if "samples_trained" in metadata:
        samples = sample + (batches - batch) * size
        if metadata["samples_trained"] != samples:
            raise ValueError(
                f"{where}: samples_trained should be {samples} after {batches} batches of "
                f"batch_segments={segments!r}, but got samples_trained="
                f"{metadata['samples_trained']!r}"
            )


def _check_growth(where: str, metadata: dict[str, Any]) -> None:
    """``dataset_growth`` is ``[[0, N0], [p1, N1], ...]`` and ends at ``dataset_length``."""
    growth = metadata["dataset_growth"]
    shaped = growth and all(
        isinstance(g, list) and len(g) == 2 and all(_is_int(v) and v >= 0 for v in g)
        for g in growth
    )
    if not shaped or growth[0][0] != 0:
        raise ValueError(
            f"{where}: dataset_growth should be a non-empty list of [sample, length] lists of "
            f"ints >= 0, the first at sample 0, but got dataset_growth={growth!r}"
        )
    length = metadata.get("dataset_length", growth[-1][1])
    if length != growth[-1][1]:
        raise ValueError(
            f"{where}: dataset_length should be {growth[-1][1]}, the last length of "
            f"dataset_growth={growth!r}, but got dataset_length={length!r}; the file was "
            "edited: restore it, or resume from another checkpoint folder"
        )


def _validate(where: str, path: str, metadata: Any) -> dict[str, Any]:
    """Types, ranges and consistency of a parsed ``metadata.json``."""
    if not isinstance(metadata, dict):
        raise ValueError(f"{where}: should hold a JSON object, but holds {type(metadata).__name__}")
    version = metadata.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(
            f"{where}: format_version should be an int >= 1, but got format_version={version!r}"
        )
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{where}: the checkpoint was written by a newer detsamplers (checkpoint format "
            f"{version}; this version reads formats up to {FORMAT_VERSION}); upgrade "
            "detsamplers to resume from it, or move the folder out of checkpoint_dir to "
            "resume from an older checkpoint on purpose"
        )
    missing = [name for name in (*_REQUIRED_INTS, "seed", "files") if name not in metadata]
    if missing:
        raise ValueError(f"{where}: should have the fields {missing}, but they are missing")
    for name, minimum in _REQUIRED_INTS.items():
        _check_int(where, metadata, name, minimum)
    _check_int(where, metadata, "seed", None)
    for name, (least, nullable) in _OPTIONAL_INTS.items():
        if name in metadata and not (nullable and metadata[name] is None):
            _check_int(where, metadata, name, least)
    for name, kinds in _OPTIONAL_TYPES.items():
        value = metadata.get(name)
        if name in metadata and (
            not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
        ):
            allowed = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
            raise ValueError(
                f"{where}: {name} should be {allowed}, but got {name}={metadata[name]!r}"
            )
    size, batch = metadata["world_size"], metadata["global_batch_size"]
    if batch % size:
        raise ValueError(
            f"{where}: global_batch_size should be a multiple of world_size, but got "
            f"global_batch_size={batch} and world_size={size}"
        )
    if "batch_segments" in metadata:
        _check_segments(where, metadata)
    if metadata.get("dataset_growth") is not None:
        _check_growth(where, metadata)
    if metadata.get("records_consumed", metadata.get("samples_trained")) != metadata.get(
        "samples_trained", metadata.get("records_consumed")
    ):
        raise ValueError(
            f"{where}: records_consumed should equal samples_trained, but got "
            f"{metadata['records_consumed']!r} and {metadata['samples_trained']!r}"
        )
    match = FOLDER.match(os.path.basename(os.path.normpath(path)))
    if match and int(match.group(1)) != metadata["batches_trained"]:
        raise ValueError(
            f"{where}: batches_trained should be {int(match.group(1))} in a folder named "
            f"{os.path.basename(os.path.normpath(path))}, but got "
            f"batches_trained={metadata['batches_trained']}"
        )
    files = metadata["files"]
    if files != expected_files(size):
        raise ValueError(
            f"{where}: files should list {expected_files(size)} for world_size={size}, but "
            f"got files={files!r}"
        )
    return metadata


def read_checkpoint_metadata(path: str, parameter: str = "path") -> dict[str, Any]:
    """The validated metadata of the checkpoint folder ``path`` (NOTE [ checkpoint metadata ]).

    Args:
        path: A checkpoint folder.
        parameter: The name of the caller's parameter, for the messages.

    Raises:
        IncompleteCheckpointError: ``path`` has no ``metadata.json``, one that does not
            parse, or files it lists are gone.
        ValueError: ``metadata.json`` is damaged, too large, of a newer format, or
            inconsistent with itself or the folder; the message names the file and field.

    Examples:
        >>> import tempfile
        >>> folder = os.path.join(tempfile.mkdtemp(), "batch-000004")
        >>> os.mkdir(folder)
        >>> read_checkpoint_metadata(folder)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        detsamplers.trial._metadata.IncompleteCheckpointError: path should be a complete checkpoint folder with metadata.json, but got '.../batch-000004'; find one with find_latest_checkpoint(checkpoint_dir)
    """  # noqa: E501
    file = os.path.join(path, METADATA)
    try:
        info = os.stat(file)
    except OSError:
        raise IncompleteCheckpointError(
            f"{parameter} should be a complete checkpoint folder with {METADATA}, but got "
            f"{path!r}; find one with find_latest_checkpoint(checkpoint_dir)",
            f"it has no {METADATA}",
        ) from None
    where = f"cannot resume from {file}"
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{where}: it should be a regular file, but it is not")
    if info.st_size > MAX_METADATA_BYTES:
        raise ValueError(
            f"{where}: it should be at most {MAX_METADATA_BYTES} bytes, but it has "
            f"{info.st_size}; it was not written by detsamplers"
        )
    try:
        with open(file, "rb") as f:
            raw = f.read(MAX_METADATA_BYTES + 1)
        parsed = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        reason = f"its {METADATA} is not valid JSON ({error})"
        raise IncompleteCheckpointError(
            f"{where}: it is not valid JSON ({error}); it was cut short (a crash on storage "
            "without atomic renames) or damaged. Resume from an older checkpoint folder",
            reason,
        ) from error
    metadata = _validate(where, path, parsed)
    for name in metadata["files"]:
        try:
            regular = stat.S_ISREG(os.stat(os.path.join(path, name)).st_mode)
        except OSError:
            reason = f"{name}, listed in its {METADATA}, is gone"
            raise IncompleteCheckpointError(
                f"{parameter} should be a complete checkpoint folder, but in {path!r} {reason} "
                "(deleted by a crash during retention, or by hand); use "
                "find_latest_checkpoint(checkpoint_dir)",
                reason,
            ) from None
        if not regular:
            raise ValueError(f"{where}: {name} should be a regular file, but it is not")
    return metadata
