"""The sample every shard format stores in the shard questions: a tiny PNG and a label."""

from __future__ import annotations

import struct
import zlib


def tiny_png() -> bytes:
    """A valid 2x2 greyscale PNG (71 bytes), built with zlib and struct."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00\x80\x80" * 2)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


PNG = tiny_png()
