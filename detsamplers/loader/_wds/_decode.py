"""The decode stage of a shard source: webdataset's ``.decode(*args)``, built once."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["make_decoder"]


def make_decoder(decode: Any) -> Callable[[dict[str, Any]], Any] | None:
    """Build webdataset's ``.decode(*args)``: strings are image specs, callables are handlers.

    Examples:
        >>> make_decoder(None) is None
        True
        >>> make_decoder(())({"__key__": "k", "cls": b"3"})["cls"]
        3
    """
    if decode is None:
        return None
    from webdataset import autodecode

    if isinstance(decode, autodecode.Decoder):
        return decode  # type: ignore[no-any-return]
    args = [decode] if isinstance(decode, str) or callable(decode) else decode
    if not isinstance(args, Sequence) or not all(isinstance(a, str) or callable(a) for a in args):
        raise TypeError(
            "decode should be a webdataset image spec such as 'rgb8', a decoding handler, a "
            f"sequence of these, or a webdataset.autodecode.Decoder, but got {decode!r}"
        )
    handlers = [autodecode.ImageHandler(a) if isinstance(a, str) else a for a in args]
    decoder: Callable[[dict[str, Any]], Any] = autodecode.Decoder(handlers)
    return decoder
