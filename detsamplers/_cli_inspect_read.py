"""The files ``inspect`` reads: bounded, read as data, checked by the library's own checks.

NOTE [ inspect reads data ]
Every file ``inspect`` opens is opened with ``O_NONBLOCK`` (a FIFO opens at once instead
of waiting for a writer) and checked on its descriptor with ``fstat`` before any byte is
read: anything but a regular file (a FIFO, a device such as a symlink to ``/dev/zero``, a
socket, a folder where a file is expected) is refused, naming the file. A JSON state may
have ``MAX_JSON_BYTES``; it is read with a bounded read and parsed with a nesting limit
(Python's recursion limit, caught). A torch file in torch's zip format may be of any size,
since its tensors are mapped, never read (``mmap=True``), but its zip index and its
pickle may have ``MAX_PICKLE_BYTES`` each, checked from the zip's end record before the
index is read; a file in the legacy format is read whole, so it may have
``MAX_PICKLE_BYTES`` in all. It is then loaded through the checked descriptor
(``/proc/self/fd``, where there is one) with ``torch.load(weights_only=True)``: a pickle
that would run code is refused, never run.

What was read is then sorted by its keys into the states the library saves, and each is
checked with the check its own ``load_state_dict`` makes first, before it compares the
state with a live object: a chain state (the samplers, ``MixSampler``) with
``check_shape``, a loader's (``DataLoader.get_data_loader()``, its batch sampler) with
``check_loader_keys`` too, a ``WebDatasetSource``'s or ``WebDataLoader``'s with
``check_source_shape`` and a ``WebDatasetMix``'s with ``check_mix_shape``. A trial's
rank file holds one of these under ``loader`` (a source's with the trial's ``digest``
added, which its loading removes first). A state these checks refuse would not load, so
``inspect`` refuses it too, with their message.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable, Mapping
from typing import Any

from ._files_open import NotRegularFileError, file_kind, open_regular_fd

__all__ = [
    "KINDS",
    "MAX_JSON_BYTES",
    "MAX_PICKLE_BYTES",
    "InspectError",
    "classify",
    "read_json",
    "read_torch",
]

#: The largest JSON state or metadata read (a real one is a few KiB).
MAX_JSON_BYTES = 16 << 20
#: The largest pickle, and zip index, of a torch file (a rank file's is a few KiB).
MAX_PICKLE_BYTES = 16 << 20
_END = b"PK\x05\x06"  # the zip's end of central directory record
_END64 = b"PK\x06\x06"  # its zip64 form
_TAIL = 22 + 65535 + 20 + 56  # the end record, its longest comment, the zip64 records


class InspectError(Exception):
    """A file that cannot be read as a checkpoint or a state; the message names it."""


def _open_regular(path: str, limit: int | None) -> tuple[int, int]:
    """A descriptor of ``path`` and its size, once it is a regular file of at most ``limit``."""
    try:  # NOTE [ regular files only ]
        fd, info = open_regular_fd(path, stat_first=False)
    except NotRegularFileError as error:
        raise InspectError(
            f"{path}: should be a regular file (a saved state or a checkpoint's file), but it "
            f"is {file_kind(error.mode)}; pass the file itself"
        ) from None
    except OSError as error:
        raise InspectError(f"{path}: cannot be opened ({error.strerror or error})") from None
    if limit is not None and info.st_size > limit:
        os.close(fd)
        raise InspectError(
            f"{path}: should have at most {limit} bytes, but has {info.st_size}; it is not a "
            "state detsamplers saved"
        )
    return fd, info.st_size


def _read(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_json(path: str) -> Any:
    """The JSON in ``path``, read as NOTE [ inspect reads data ] says."""
    fd, _ = _open_regular(path, MAX_JSON_BYTES)
    try:
        raw = _read(fd, MAX_JSON_BYTES)
    finally:
        os.close(fd)
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise InspectError(
            f"{path}: its JSON nests deeper than Python's recursion limit; it is not a state "
            "detsamplers saved"
        ) from None
    except (UnicodeDecodeError, ValueError) as error:
        raise InspectError(f"{path}: not a readable JSON file ({error})") from None


def _zip_index_size(fd: int, size: int) -> int | None:
    """The size of the zip's central directory from its end record, or None if not a zip."""
    start = max(0, size - _TAIL)
    tail = os.pread(fd, size - start, start)
    at = tail.rfind(_END)
    if at < 0 or len(tail) - at < 22:
        return None
    index = int.from_bytes(tail[at + 12 : at + 16], "little")
    if index == 0xFFFFFFFF:  # zip64: the size is in the zip64 end record before
        at64 = tail.rfind(_END64, 0, at)
        if at64 < 0 or len(tail) - at64 < 56:
            return None
        index = int.from_bytes(tail[at64 + 40 : at64 + 48], "little")
    return index


def _check_zip(path: str, fd: int, size: int) -> bool:
    """Whether ``path`` is a zip, once its index and pickle are within the bounds."""
    index = _zip_index_size(fd, size)
    if index is None:
        return False
    where = f"{path}: its zip index has {index} bytes"
    if index <= MAX_PICKLE_BYTES:
        with os.fdopen(os.dup(fd), "rb") as f:
            try:
                with zipfile.ZipFile(f) as archive:
                    entries = archive.infolist()
                pickles = [i.file_size for i in entries if i.filename.endswith(".pkl")]
            except (zipfile.BadZipFile, OSError, ValueError) as error:
                raise InspectError(f"{path}: not a complete torch file ({error})") from None
        if sum(pickles) <= MAX_PICKLE_BYTES:
            return True
        where = f"{path}: its pickle has {sum(pickles)} bytes"
    raise InspectError(
        f"{where}, more than the {MAX_PICKLE_BYTES} a saved state or rank file may have; it "
        "is not a file detsamplers saved"
    )


def read_torch(path: str) -> Any:
    """The object in the torch file ``path``, read as NOTE [ inspect reads data ] says."""
    import torch

    fd, size = _open_regular(path, None)
    try:
        zipped = _check_zip(path, fd, size)
        if not zipped and size > MAX_PICKLE_BYTES:
            raise InspectError(
                f"{path}: should have at most {MAX_PICKLE_BYTES} bytes as a torch file in the "
                f"legacy format, but has {size}; it is not a state detsamplers saved"
            )
        through = f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") else path
        try:
            return torch.load(through, weights_only=True, mmap=zipped, map_location="cpu")
        except Exception as error:  # a foreign file can make the reader raise anything
            text = str(error).strip() or type(error).__name__
            raise InspectError(
                f"{path}: not a checkpoint file that loads as data with "
                f"torch.load(weights_only=True) ({text.splitlines()[0][:200]})"
            ) from None
    finally:
        os.close(fd)


def _checks() -> dict[str, Callable[[Any], Any]]:
    """Each state kind's own check (NOTE [ inspect reads data ])."""
    from ._state import check_shape
    from .loader._batches import check_loader_keys
    from .loader._wds._source_state import check_source_shape
    from .loader._wds.mix._mixture_state import check_mix_shape

    def loader(state: Any) -> Any:
        check_loader_keys(state)
        return check_shape(state, "LoaderBatchSampler", ("samples", "loader", "digest"))

    return {
        "loader": loader,
        "sampler": lambda state: check_shape(state, "sampler", ("samples",)),
        "source": check_source_shape,
        "mixture": check_mix_shape,
    }


def _kind(state: Mapping[str, Any]) -> str | None:
    if "config" in state or "counts" in state:
        config = state.get("config")
        weighted = isinstance(config, Mapping) and "weights" in config
        return "mixture" if "mixture" in state or weighted else "source"
    if "loader" in state or "digest" in state:
        return "loader"
    if "chain" in state or "position" in state:
        return "sampler"
    return None


#: Each kind's name in the report.
KINDS = {
    "loader": "loader state",
    "sampler": "sampler state",
    "source": "WebDatasetSource state",
    "mixture": "WebDatasetMix state",
}


def classify(obj: Any, path: str) -> tuple[str, dict[str, Any]] | None:
    """The kind and state in ``obj`` (a state, or a trial's rank file), or None.

    None is a rank file of a loader the trial skips itself. A state its own check refuses,
    and anything else, is an :class:`InspectError` naming ``path``.
    """
    where = path
    if isinstance(obj, Mapping) and "position" not in obj and ("rng" in obj or "loader" in obj):
        obj, where = obj.get("loader"), f"{path} (its 'loader' entry)"
        if obj is None:
            return None
    kind = _kind(obj) if isinstance(obj, Mapping) else None
    if kind is None:
        got = type(obj).__name__
        if isinstance(obj, Mapping):
            got += f" with keys {sorted(map(str, obj))[:8]}"
        raise InspectError(
            f"{where}: should be a state detsamplers saves (a loader's, sampler's, "
            f"WebDatasetSource's, WebDataLoader's or WebDatasetMix's state_dict(), or a "
            f"trial's rank file) or a checkpoint folder, but got {got}"
        )
    state = dict(obj)
    checked = state
    if kind == "source" and "digest" in state:  # a trial's rank state (NOTE [ trial data ])
        checked = {k: v for k, v in state.items() if k != "digest"}
    try:
        _checks()[kind](checked)
    except (TypeError, ValueError) as error:
        raise InspectError(f"{where}: a {KINDS[kind]} that would not load: {error}") from None
    return kind, state
