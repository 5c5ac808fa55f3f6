"""A sample's small fields in one tar member: the packed format, written and split back.

NOTE [ packed small fields ]
A tar member costs a 512-byte header and pads its data to a multiple of 512 bytes, so a
sample of a 3 KB image and a label takes about 5 KB as two members. ``ShardWriter(...,
pack_small=n)`` writes the fields of a sample that hold at most ``n`` bytes (once encoded)
as one member, ``<key>.packed_fields.msgpack``, when there are at least two of them; the
other fields stay members of their own. The member's data is a MessagePack map from each
field's name (a str) to its bytes (a bin), in the fields' order, so any MessagePack library
reads it (``msgpack.unpackb(data)``). The writer emits the shortest form of each header
(as MessagePack's own packers do); the reader accepts exactly this subset: a map header
(fixmap, map 16, map 32) of at least one entry, str keys (fixstr, str 8, 16, 32) and bin
values (bin 8, 16, 32), each length within the member, nothing after the last value.

The shard stays a plain tar of webdataset's layout: the index, the header check, the state
and the order see one more member, never its contents. The source splits a sample's
packed member back into its fields after it is read and before ``decode``: field names are
lower-cased as the scan lower-cases suffixes, and the fields are put in sorted order where
the first of them was (webdataset's ``TarWriter`` writes members sorted), so the sample
equals, order included, the one read from the same samples written unpacked. Plain
webdataset reads every sample, with the packed fields as one ``packed_fields.msgpack``
value of bytes (its decoders know no ``msgpack`` extension and keep them);
``webdataset.WebDataset(urls).map(ShardWriter.unpack_fields)`` splits them.

The split runs in the compiled kernel (``_kernel_fields.c``) when it is built, for field
names of ASCII; anything it does not take (another form, a name out of ASCII, any error) it
hands back, and the Python split below, the reference, reads the sample and says why.

A member that is not of this form (a length past its end, a truncated header, another
type, bytes after the last value, a bad or repeated name) is an error naming the shard,
the sample and the byte where it goes wrong; nothing is allocated beyond the member's
own bytes. The suffix ``packed_fields.msgpack`` is reserved: the writer refuses it as a
field name.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping
from typing import Any

from ...._native import kernel

__all__ = ["PACKED_SUFFIX", "pack_fields", "unpack_fields", "unpack_samples"]

#: The suffix of a sample's packed member (NOTE [ packed small fields ]).
PACKED_SUFFIX = "packed_fields.msgpack"

_MAP_HEADERS = {0xDE: 2, 0xDF: 4}  # map 16, map 32: the entry count's bytes
_STR_HEADERS = {0xD9: 1, 0xDA: 2, 0xDB: 4}
_BIN_HEADERS = {0xC4: 1, 0xC5: 2, 0xC6: 4}


def _length_header(length: int, small: int, small_limit: int, wide: dict[int, int]) -> bytes:
    """The shortest MessagePack header of a map, str or bin of ``length``."""
    if small and length < small_limit:
        return bytes([small | length])
    for code, width in wide.items():
        if length < 1 << (8 * width):
            return bytes([code]) + length.to_bytes(width, "big")
    raise ValueError(f"a packed field of {length} bytes does not fit MessagePack's 32-bit length")


def pack_fields(fields: Mapping[str, bytes]) -> bytes:
    r"""The packed member holding ``fields``: a MessagePack map of str to bin.

    Examples:
        >>> pack_fields({"cls": b"7", "txt": b"hi"})
        b'\x82\xa3cls\xc4\x017\xa3txt\xc4\x02hi'
    """
    parts = [_length_header(len(fields), 0x80, 16, _MAP_HEADERS)]
    for name, value in fields.items():
        raw = name.encode("utf-8")
        parts += [_length_header(len(raw), 0xA0, 32, _STR_HEADERS), raw]
        parts += [_length_header(len(value), 0, 0, _BIN_HEADERS), bytes(value)]
    return b"".join(parts)


def _bad(sample: Mapping[str, Any], at: int, what: str) -> ValueError:
    where = sample.get("__url__") or sample.get("__local_path__")
    return ValueError(
        f"shard {where!r} has a corrupt packed member {PACKED_SUFFIX!r} in sample "
        f"{sample.get('__key__')!r}: {what} at byte {at} (NOTE [ packed small fields ]); "
        "the shard is damaged or hostile: rewrite it"
    )


def _read_length(data: bytes, at: int, width: int, sample: Mapping[str, Any]) -> int:
    if at + width > len(data):
        raise _bad(sample, at, f"a {width}-byte length runs past the member's {len(data)} bytes")
    return int.from_bytes(data[at : at + width], "big")


def unpack_fields(sample: Mapping[str, Any]) -> dict[str, Any]:
    """``sample`` with its packed member split back into its fields (a copy; as is without one).

    Raises:
        ValueError: the packed member is not of the form of NOTE [ packed small fields ],
            or names a field the sample already has; the message names the shard.

    Examples:
        >>> packed = {"__key__": "k", "png": b"..", PACKED_SUFFIX: pack_fields({"cls": b"7"})}
        >>> unpack_fields(packed)
        {'__key__': 'k', 'cls': b'7', 'png': b'..'}
    """
    if kernel is not None and type(sample) is dict:
        split: dict[str, Any] | None = kernel.unpack_fields(sample, PACKED_SUFFIX)
        if split is not None:  # else the reference below: no member, or it says what is wrong
            return split
    data = sample.get(PACKED_SUFFIX)
    if data is None:
        return dict(sample)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"sample[{PACKED_SUFFIX!r}] should be the member's bytes, but got "
            f"{type(data).__name__}: split the fields before decoding the sample"
        )
    data = bytes(data)
    fields = _split(data, sample)
    for name in fields:
        if name in sample:
            raise _bad(sample, 0, f"field {name!r} is both packed and a member of its own")
    rest = {k: v for k, v in sample.items() if k[:1] != "_" and k != PACKED_SUFFIX}
    rest.update(fields)
    out: dict[str, Any] = {}
    for name, value in sample.items():  # the fields, sorted, where the first of them was
        if name[:1] == "_":
            out[name] = value
        elif rest:
            out.update(sorted(rest.items()))
            rest = {}
    return out


def _split(data: bytes, sample: Mapping[str, Any]) -> dict[str, bytes]:
    """The fields of a packed member (NOTE [ packed small fields ]), checked as they are read."""
    if not data:
        raise _bad(sample, 0, "the member is empty")
    code, at = data[0], 1
    if 0x80 < code <= 0x8F:
        count = code & 0x0F
    elif code in _MAP_HEADERS:
        count = _read_length(data, at, _MAP_HEADERS[code], sample)
        at += _MAP_HEADERS[code]
    else:
        raise _bad(sample, 0, f"byte 0x{code:02x} does not start a MessagePack map of fields")
    if not 0 < count <= (len(data) - at) // 4:  # each entry takes at least 4 bytes
        raise _bad(sample, 0, f"the map claims {count} fields, which its bytes cannot hold")
    fields: dict[str, bytes] = {}
    for _ in range(count):
        if at >= len(data):
            raise _bad(sample, at, "the member ends before its last field")
        code, start = data[at], at
        if 0xA0 <= code <= 0xBF:
            length, at = code & 0x1F, at + 1
        elif code in _STR_HEADERS:
            length = _read_length(data, at + 1, _STR_HEADERS[code], sample)
            at += 1 + _STR_HEADERS[code]
        else:
            raise _bad(sample, at, f"byte 0x{code:02x} does not start a field name (a str)")
        if at + length > len(data):
            raise _bad(sample, start, f"a {length}-byte field name runs past the member's end")
        try:
            name = data[at : at + length].decode("utf-8").lower()
        except UnicodeDecodeError:
            raise _bad(sample, start, "a field name is not UTF-8") from None
        if not name or name[:1] == "_" or "/" in name or "\0" in name or name in fields:
            raise _bad(sample, start, f"field name {name!r} is empty, meta, repeated or holds '/'")
        at += length
        if at >= len(data):
            raise _bad(sample, at, f"the member ends before the bytes of field {name!r}")
        code, start = data[at], at
        if code not in _BIN_HEADERS:
            raise _bad(sample, at, f"byte 0x{code:02x} does not start field {name!r}'s bytes")
        length = _read_length(data, at + 1, _BIN_HEADERS[code], sample)
        at += 1 + _BIN_HEADERS[code]
        if at + length > len(data):
            raise _bad(
                sample, start, f"field {name!r} claims {length} bytes, past the member's end"
            )
        fields[name] = data[at : at + length]
        at += length
    if at != len(data):
        raise _bad(sample, at, f"{len(data) - at} bytes follow the last field")
    return fields


def unpack_samples(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`unpack_fields` of the samples that have a packed member; the others as they are."""
    if not any(map(operator.contains, samples, itertools.repeat(PACKED_SUFFIX))):
        return samples  # the common case, one C loop
    start = 0
    if kernel is not None and type(samples) is list:
        start = kernel.unpack_samples(samples, PACKED_SUFFIX)  # in place, up to one it hands back
        if start < 0:
            return samples
    for i in range(start, len(samples)):
        if PACKED_SUFFIX in samples[i]:
            samples[i] = unpack_fields(samples[i])
    return samples
