"""Scanning a shard: list a tar's members and group them into samples as webdataset does.

It implements the scan of NOTE [ shard index ] (index/_index_shards.py): every 512-byte header read
at once with numpy when it can, else walked one by one, else listed by :mod:`tarfile`
(NOTE [ tar header walk ], shard/_tar_walk.py); a truncated or corrupt shard is an error that
names it, never a shard with fewer samples.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import tarfile
from typing import Any

from ..shard._file_checks import open_regular
from ..shard._packed_members import PackedMembers
from ..shard._tar_walk import Listing
from ..shard._tar_walk import listing as _listing
from ..shard._tar_walk import read_headers as _read_headers
from ..shard._tar_walk import walk_headers as _walk_headers

__all__ = ["scan_shard"]

# webdataset.tariterators.base_plus_ext and tar_file_iterator's skip_meta, verbatim.
_BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_SKIP_META = re.compile(r"__[^/]*__($|/)")
_BLOCK = 512
_CHUNK = 1 << 20
_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd")


def _corrupt(path: str, what: str) -> ValueError:
    return ValueError(
        f"shard {path!r} is truncated or corrupt: {what}; rewrite it (for example with "
        "detsamplers.loader.ShardWriter, which also writes its index) or remove it from urls"
    )


def _check_tail(path: str, handle: Any, end: int, size: int) -> None:
    """Check that only zero bytes, at least one block of them, follow offset ``end``."""
    if size - end < _BLOCK:
        raise _corrupt(path, f"it ends at byte {size} without tar's end-of-archive block")
    handle.seek(end)
    while chunk := handle.read(_CHUNK):
        if chunk.count(0) != len(chunk):
            raise _corrupt(path, f"bytes after offset {end} are not a valid tar member header")


def scan_shard(
    path: str, remote: tuple[Any, int] | None = None
) -> tuple[tuple[str, ...], PackedMembers]:
    """List a shard and group its members into samples (NOTE [ shard index ]).

    Args:
        path: A local path to an uncompressed tar file, or the URL of ``remote``.
        remote: A remote shard as a seekable file and its size (``None``: open ``path``).

    Returns:
        ``(keys, members)``: each sample's key, and its members as [suffix, offset, size]
        (a :class:`PackedMembers`: flat lists, no list per member).

    Raises:
        FileNotFoundError: the shard does not exist.
        ValueError: it is compressed, truncated or corrupt, or has a
            repeated suffix within one sample.
    """
    opened: Any
    if remote is None:  # a FIFO or a device is refused by name, never waited on
        opened = open_regular(path, "shard", path)
        size = os.fstat(opened.fileno()).st_size
    else:
        opened, size = remote
    with opened as handle:
        listed = None
        if remote is None and size >= _BLOCK:
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                try:
                    length = min(size, len(mapped))
                    listed = _walk_headers(mapped, length) or _read_headers(mapped, length)
                except IndexError:  # the file shrank meanwhile: tarfile reports it
                    listed = None
        if listed is None:
            listed = _tarfile_members(path, handle, size)
        listing, end = listed
        keys, samples = _group(path, listing, size)
        _check_tail(path, handle, end, size)
    return keys, samples


#: The kinds of header whose data tarfile reads whole (the rest it seeks past).
_RECORDS = {b"x": "pax header", b"g": "pax global header", b"L": "GNU long-name header",
            b"K": "GNU long-link header", b"S": "GNU sparse header"}  # fmt: skip


class _Bounded:
    """A shard's file for :mod:`tarfile`: no read asks for more than the file holds.

    tarfile reads a pax or GNU long-name header's data in one ``read(size)`` of its
    header's size field, and Python allocates the bytes asked for before it reads: a
    header claiming 7 GiB in a 3 KiB shard would take 7 GiB. A read of more than a block
    past the end of the file is refused instead, naming the shard and the header.
    """

    def __init__(self, path: str, handle: Any, size: int) -> None:
        self.path, self.handle, self.size = path, handle, size

    def read(self, count: int | None = -1) -> bytes:
        position = self.handle.tell()
        left = max(0, self.size - position)
        if count is None or count < 0:
            count = left
        if count > left and count > _BLOCK:
            self.handle.seek(position - _BLOCK)
            header = self.handle.read(_BLOCK)
            name = header[:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            kind = _RECORDS.get(header[156:157], "header")
            field, claim = header[124:136], count
            if field[:1] == b"\x80":  # GNU base-256
                claim = int.from_bytes(field[1:], "big")
            else:  # octal, as tarfile reads it
                with contextlib.suppress(ValueError):
                    claim = int(field.split(b"\0", 1)[0].strip() or b"0", 8)
            raise _corrupt(
                self.path,
                f"the {kind} at byte {position - _BLOCK} (member {name!r}) claims {claim} "
                f"bytes of data, but only {left} bytes follow it in the file",
            )
        data: bytes = self.handle.read(min(count, left))
        return data

    def __getattr__(self, name: str) -> Any:  # seek, tell, name, mode: the file's own
        return getattr(self.handle, name)


def _tarfile_members(path: str, handle: Any, size: int) -> tuple[Listing, int]:
    """The members of the tar in ``handle`` listed by :mod:`tarfile` (as :func:`_read_headers`)."""
    handle = _Bounded(path, handle, size)  # a header's claim never allocates past the file
    try:
        tar = tarfile.open(path, "r:", fileobj=handle)  # noqa: SIM115 - closed below
    except tarfile.TarError as exn:
        handle.seek(0)
        if handle.read(6).startswith(_COMPRESSED):
            raise ValueError(
                f"shard {path!r} is compressed; the source seeks into shards, so it needs "
                "uncompressed tars: decompress it (e.g. gunzip) and pass the .tar"
            ) from None
        raise _corrupt(path, f"it is not a readable tar archive ({exn})") from None
    with tar:
        try:
            infos = tar.getmembers()
        except tarfile.TarError as exn:
            raise _corrupt(path, str(exn)) from None
        end = tar.offset
    return _listing([(i.name, i.offset_data, i.size, i.isreg()) for i in infos]), end


# _BASE_PLUS_EXT over names joined by newlines (none of them holding one): every line
# matches, the key and suffix groups empty where webdataset's pattern does not match.
_LINE_KEYS = re.compile(r"^(?:((?:.*/|)[^.\n]+)[.][^/\n]*|.*)$", re.MULTILINE)
_LINE_SUFFIXES = re.compile(r"^(?:(?:.*/|)[^.\n]+[.]([^/\n]*)|.*)$", re.MULTILINE)


def _split_names(names: list[str]) -> tuple[list[str], list[str]] | None:
    """Each name's key and lower-cased suffix (``""``, ``""`` if webdataset ignores it).

    Two regular-expression passes over all the names at once (their one group each
    makes ``findall`` return strings, not a tuple per name); ``None`` when a name holds
    a newline or starts with ``__`` (the caller then matches names one by one).
    """
    text = "\n".join(names)
    if not names or "\n__" in "\n" + text or text.count("\n") != len(names) - 1:
        return None
    keys: list[str] = _LINE_KEYS.findall(text)
    suffixes: list[str] = _LINE_SUFFIXES.findall(text)
    if text.isascii():
        split = "\n".join(suffixes).lower().split("\n")
    else:
        split = [suffix.lower() for suffix in suffixes]
    if len(keys) != len(names) or len(split) != len(names):
        return None
    return keys, split


def _group(path: str, listing: Listing, size: int) -> tuple[tuple[str, ...], PackedMembers]:
    """Group members into samples as webdataset does (NOTE [ shard index ])."""
    names, offsets, lengths, regular = listing
    for name, offset, length in zip(names, offsets, lengths, strict=True):
        if offset + length > size:
            raise _corrupt(path, f"member {name!r} runs past the end of the file")
    kept = [i for i, flag in enumerate(regular) if flag]
    kept_names = [names[i] for i in kept]
    split = _split_names(kept_names)
    if split is None:
        match_name, skip_meta = _BASE_PLUS_EXT.match, _SKIP_META.match
        split = [], []
        for name in kept_names:
            match = None
            if not skip_meta(name) and not (
                "/" not in name and name.startswith("__") and name.endswith("__")
            ):
                match = match_name(name)
            split[0].append(match.group(1) if match else "")
            split[1].append(match.group(2).lower() if match else "")
    keys: list[str] = []
    starts: list[int] = []
    suffixes: list[str] = []
    member_offsets: list[int] = []
    sizes: list[int] = []
    last = ""
    for i, key, suffix in zip(kept, split[0], split[1], strict=True):
        if not key:
            continue
        if key != last:
            keys.append(key)
            starts.append(len(suffixes))
            last = key
        elif suffix in suffixes[starts[-1] :]:
            raise ValueError(
                f"shard {path!r} has a duplicate file name {names[i]!r} in sample {key!r}, "
                "which webdataset refuses too; give each member of a sample its own suffix"
            )
        suffixes.append(suffix)
        member_offsets.append(offsets[i])
        sizes.append(lengths[i])
    starts.append(len(suffixes))
    return tuple(keys), PackedMembers(suffixes, member_offsets, sizes, starts)
