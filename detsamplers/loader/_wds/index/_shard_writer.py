"""A shard writer that writes each shard's index file as it writes the tar.

NOTE [ writing shards with their index ]
:class:`ShardWriter` is webdataset's own ``ShardWriter`` (same arguments, same tar bytes)
with one addition: while a shard is written, each member's name, data offset and size
are recorded as :mod:`tarfile` adds it (the data of a member of ``size`` bytes ends, padded
to 512-byte blocks, where the archive's offset stands after ``addfile``), and when the
shard is closed they are grouped into samples by the scan's own grouping (NOTE [ shard
index ]) and written atomically to ``<shard>.index.npz`` (NOTE [ index file format ]),
keyed by the closed shard's size and modification time, before webdataset's ``post``
callback runs. :class:`WebDatasetSource` then opens the shard without reading it. Nothing
is read back: the cost is one list append per member.

A member name holding a NUL byte is cut there when the tar is read back, so the names
recorded would not be the names read: then (only) the finished shard is scanned once to
build its index. The writer writes local, uncompressed tars only, which is what the
source reads: a remote or piped pattern, a custom ``opener`` and compression are refused.

Arguments webdataset takes silently but that lose or misname samples are refused too: a
``maxcount`` below 1 or a ``maxsize`` that is not positive (the first shard would be left
empty and every sample get a shard of its own), a negative ``start_shard``, a ``pattern``
that does not format the shard number (every shard would overwrite the first), a
``__key__`` whose last path component is empty or holds a dot and a field name holding a
``/`` (the member ``key.field`` would read back under another key, or not at all), and a
``write()`` after ``close()``.

With ``pack_small=n`` a sample's fields of at most ``n`` bytes, once encoded, are written as
one member (NOTE [ packed small fields ], shard/_small_fields.py): the writer encodes the
sample with webdataset's encoder itself, packs those fields when there are two or more, and
writes the result with the tar writer's encoder turned off (an encoded ``.gz`` field would
otherwise be compressed twice). The index sees the packed member as any other. Unless
``mtime`` is given, every member's time is then the writer's start in whole seconds: webdataset
stamps each member with ``time.time()``, a float, which :mod:`tarfile` can only store in a
pax record of its own, 1,024 bytes a member.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import webdataset as wds

from ...._errors import check_int
from ..remote._urls import is_remote, local_path
from ..shard._small_fields import PACKED_SUFFIX, pack_fields, unpack_fields
from ._index_shards import INDEX_SUFFIX
from ._scan_shard import _group, scan_shard
from ._shard_index_file import encode_index

__all__ = ["ShardWriter"]

_BLOCK = 512


class ShardWriter(wds.ShardWriter):  # type: ignore[misc]  # webdataset is untyped
    """webdataset's ``ShardWriter`` that also writes each shard's ``.index.npz``.

    The arguments and the tar files are webdataset's (``pattern % shard_number`` names each
    shard; ``write(sample)`` takes a dict with ``__key__`` and one entry per member). Each
    shard ``data-000000.tar`` gets ``data-000000.tar.index.npz`` next to it when it is
    closed, so :class:`WebDatasetSource` and :class:`WebDataLoader` open it without a scan.

    Args:
        pattern: A local path pattern, e.g. ``"out/data-%06d.tar"`` (a str or ``os.PathLike``).
        maxcount: At most this many samples per shard.
        maxsize: Start a new shard once a shard holds this many bytes of member data.
        post: Called with each shard's path once it and its index file are written.
        start_shard: The number of the first shard.
        verbose: Print a line as each shard is started (webdataset's default: 1).
        pack_small: Write a sample's fields of at most this many bytes (once encoded) as
            one member, ``<key>.packed_fields.msgpack``, when it has two or more (``None``,
            the default: one member per field, as webdataset writes). A member costs 512
            bytes of header and up to 511 of padding (1,024 more for the pax record of
            webdataset's fractional ``mtime``, which packing writes in whole seconds unless
            ``mtime`` is given); ``WebDatasetSource`` splits the
            fields back, and plain webdataset reads them as one value of bytes that
            :meth:`unpack_fields` splits (NOTE [ packed small fields ]).
        **kw: webdataset's ``TarWriter`` options (``encoder``, ``mtime``, ``format``,
            ``user``, ``group``, ``mode``, ``keep_meta``); ``compress`` must be unset or
            ``False``.

    Raises:
        ValueError: ``pattern`` names a remote, piped or compressed shard, or holds no
            ``%d``-style format for the shard number; ``compress`` asks for compression (the
            source seeks into shards, so it needs plain tars); ``maxcount`` is below 1,
            ``maxsize`` is not positive, ``start_shard`` or ``pack_small`` is negative.
        TypeError: ``opener`` is given (the index is written next to a local file), or an
            argument has the wrong type.

    ``write(sample)`` raises ``ValueError`` for a sample that would not read back as
    written (see the module's note) and after ``close()``.

    Examples:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with ShardWriter(os.path.join(folder, "d-%02d.tar"), maxcount=2, verbose=0) as sink:
        ...     for i in range(3):
        ...         sink.write({"__key__": f"s{i}", "cls": i})
        >>> sorted(os.listdir(folder))
        ['d-00.tar', 'd-00.tar.index.npz', 'd-01.tar', 'd-01.tar.index.npz']
    """

    def __init__(
        self,
        pattern: str | os.PathLike[str],
        maxcount: int = 100000,
        maxsize: float = 3e9,
        post: Any = None,
        start_shard: int = 0,
        verbose: int = 1,
        pack_small: int | None = None,
        **kw: Any,
    ) -> None:
        if "opener" in kw:
            raise TypeError(
                "ShardWriter does not take opener: it writes each shard's index file next to "
                "a local file; write to a local pattern and copy the shards and their "
                ".index.npz files afterwards (or use webdataset.ShardWriter without an index)"
            )
        if isinstance(pattern, os.PathLike):
            pattern = os.fsdecode(os.fspath(pattern))
        if not isinstance(pattern, str):
            raise TypeError(
                "pattern should be a str or os.PathLike such as 'out/data-%06d.tar', but got "
                f"pattern of type {type(pattern).__name__}"
            )
        compress = kw.get("compress")
        if compress not in (None, False) or pattern.endswith(("gz", "bz2", "xz")):
            raise ValueError(
                f"ShardWriter writes uncompressed tars (got pattern={pattern!r}, "
                f"compress={compress!r}): the source seeks into shards, which a compressed "
                "tar cannot give; drop compress and use a pattern ending in .tar"
            )
        if pattern.startswith("pipe:") or is_remote(pattern):
            raise ValueError(
                f"ShardWriter writes local shards only (got pattern={pattern!r}); write to a "
                "local folder and upload the shards with their .index.npz files"
            )
        if post is not None and not callable(post):
            raise TypeError(f"post must be a callable or None, not {post!r}")
        _check_pattern(pattern)
        maxcount = check_int("maxcount", maxcount, minimum=1)
        start_shard = check_int("start_shard", start_shard, minimum=0)
        self._pack_small: int | None = None
        if pack_small is not None:
            self._pack_small = check_int("pack_small", pack_small, minimum=0)
            self._encoder = wds.writer.make_encoder(kw.get("encoder", True))
            if kw.get("mtime") is None:  # a float mtime costs each member a pax record
                kw["mtime"] = int(time.time())
        if isinstance(maxsize, bool) or not isinstance(maxsize, (int, float)):
            raise TypeError(
                f"maxsize should be a positive number of bytes, but got maxsize={maxsize!r} "
                f"of type {type(maxsize).__name__}"
            )
        if not maxsize > 0:
            raise ValueError(
                f"maxsize should be a positive number of bytes, but got maxsize={maxsize}: "
                "every sample would start a new shard and the first would stay empty; pass "
                "the bytes of member data a shard may hold, e.g. maxsize=1e9"
            )
        self._user_post = post
        self._closed = False
        self._last_key: str | None = None
        self._members: list[tuple[str, int, int]] = []
        super().__init__(pattern, maxcount, maxsize, self._finished, start_shard, verbose, **kw)

    def next_stream(self) -> None:
        """Close the current shard (writing its index) and start the next one."""
        super().next_stream()
        self._members = members = []
        tar = self.tarstream.tarstream
        addfile = tar.addfile

        def recording_addfile(tarinfo: Any, fileobj: Any = None) -> None:
            addfile(tarinfo, fileobj)
            padded = -(-tarinfo.size // _BLOCK) * _BLOCK if fileobj is not None else 0
            members.append((tarinfo.name, tar.offset - padded, tarinfo.size))

        tar.addfile = recording_addfile
        if self._pack_small is not None:  # write() encodes the sample itself
            self.tarstream.encoder = _as_encoded

    def write(self, obj: Any) -> None:
        """Write one sample: a dict with ``__key__`` and one entry per member.

        Raises:
            ValueError: the writer is closed, or the sample would read back under another
                key (or not at all): see the module's note.
            TypeError: ``obj`` is not a dict, or its ``__key__`` is not a string.
        """
        if self._closed:
            raise ValueError(
                f"write() after close(): this ShardWriter (pattern={self.pattern!r}) is "
                f"closed; open a new ShardWriter(pattern, start_shard={self._next_shard}) to "
                "go on with the next shard number"
            )
        _check_sample(obj)
        if self._pack_small is not None:
            obj = self._packed(obj, self._pack_small)
        super().write(obj)

    def _packed(self, obj: Any, limit: int) -> dict[str, Any]:
        """``obj`` encoded, its fields of at most ``limit`` bytes in one member."""
        encoded: dict[str, Any] = self._encoder(obj)
        small = {
            name: value
            for name, value in sorted(encoded.items())
            if name[:1] != "_" and _packable(name) and len(_as_bytes(value)) <= limit
        }
        if len(small) < 2:
            return encoded
        out = {name: value for name, value in encoded.items() if name not in small}
        out[PACKED_SUFFIX] = pack_fields({name: _as_bytes(v) for name, v in small.items()})
        return out

    #: A sample read by plain webdataset, its packed fields split back (a copy).
    unpack_fields = staticmethod(unpack_fields)

    def close(self) -> None:
        """Close the last shard (writing its index); closing again does nothing."""
        if self._closed:
            return
        self._next_shard = self.shard
        self._closed = True
        super().close()

    def _finished(self, fname: str) -> None:
        """Write the index file of the shard just closed, then call the user's ``post``."""
        write_index(local_path(fname), self._members)
        if self._user_post is not None:
            self._user_post(fname)


def _as_encoded(sample: Any) -> Any:
    """The tar writer's encoder once :meth:`ShardWriter.write` has encoded the sample."""
    return sample


def _as_bytes(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _packable(name: str) -> bool:
    """Whether a field read back from a packed member keeps its name (it is lower-case)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return name == name.lower()


def _check_pattern(pattern: str) -> None:
    """Raise unless ``pattern % n`` names a different file for each shard number ``n``."""
    try:
        names = {pattern % 0, pattern % 1}
    except (TypeError, ValueError):
        names = set()
    if len(names) == 2:
        return
    hint = (
        "; webdataset formats the shard number with %, not str.format: write "
        f"{pattern.replace('{}', '%06d')!r}"
        if "{}" in pattern
        else ""
    )
    raise ValueError(
        f"pattern should hold one integer format for the shard number, such as %06d in "
        f"'out/data-%06d.tar', but got pattern={pattern!r}: pattern % shard_number would "
        f"{'fail' if not names else 'give every shard the same file name'}{hint}"
    )


def _check_sample(obj: Any) -> None:
    """Raise unless the members of ``obj`` read back as one sample with its ``__key__``."""
    if not isinstance(obj, Mapping):
        raise TypeError(
            "sample should be a dict with '__key__' and one entry per member, but got "
            f"{type(obj).__name__}"
        )
    key = obj.get("__key__")
    if key is None:
        return  # webdataset's own error: "object must contain a __key__"
    if not isinstance(key, str):
        raise TypeError(
            f"sample['__key__'] should be a string, but got {key!r} of type {type(key).__name__}"
        )
    if "\0" in key:
        raise ValueError(
            f"sample['__key__'] should not hold a NUL byte, but got {key!r}: a tar member's "
            "name ends at its first NUL, so the member would read back under a truncated key "
            "with no field, and readers drop it; replace the NUL, e.g. key.replace('\\0', '_')"
        )
    base = key.rpartition("/")[2]
    if not base or "." in base:
        read = key.rsplit(".", maxsplit=base.count("."))[0]
        raise ValueError(
            "sample['__key__'] should not hold a dot in its last path component nor end "
            f"with '/', but got {key!r}: a member is named key.field, and a reader splits "
            "the name at the first dot of its file name, so it would read back "
            f"{f'under the key {read!r}' if base else 'under no key'}; replace the dots, "
            "e.g. key.replace('.', '_')"
        )
    for field in obj:
        if isinstance(field, str) and field.lower() == PACKED_SUFFIX:
            raise ValueError(
                f"sample field names should not be {PACKED_SUFFIX!r}, but sample {key!r} has "
                f"{field!r}: the source reads that member as a sample's packed fields "
                "(ShardWriter(pack_small=...)); rename the field"
            )
        if isinstance(field, str) and not field.startswith("_") and ("/" in field or "\0" in field):
            raise ValueError(
                f"sample field names should not hold '/' or a NUL byte, but sample {key!r} has "
                f"{field!r}: "
                f"the member {key + '.' + field!r} would not read back as a field of the "
                "sample; rename the field"
            )


def write_index(path: str, members: list[tuple[str, int, int]]) -> None:
    """Write ``path + INDEX_SUFFIX`` for the closed shard ``path`` from its recorded members.

    ``members`` are ``(name, data offset, size)`` of its regular files in tar order.
    """
    stat = os.stat(path)
    if any("\0" in name for name, _, _ in members):
        keys, samples = scan_shard(path)  # names are cut at NUL when read back
    else:
        listing = (
            [m[0] for m in members],
            [m[1] for m in members],
            [m[2] for m in members],
            [True] * len(members),
        )
        keys, samples = _group(path, listing, stat.st_size)
    data = encode_index(keys, samples, stat.st_size, None, stat.st_mtime_ns)
    file = path + INDEX_SUFFIX
    temporary = f"{file}.{os.getpid()}.tmp"
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
        os.replace(temporary, file)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
