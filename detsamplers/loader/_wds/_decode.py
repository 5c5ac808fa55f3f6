"""The decode stage of a shard source: webdataset's ``.decode(*args)``, built once.

NOTE [ decode plans ]
webdataset's ``autodecode.Decoder`` tries every handler on every field of every sample:
for a ``.cls`` label that is a ``.gz`` check, one regular expression per image handler and
one in ``basichandlers`` before ``int(data)``. What a field becomes depends only on its
suffix, so :class:`PlannedDecoder` asks that question once per suffix and keeps the
answer (its *plan*): keep the bytes, call one function, or, for anything it does not
know, let webdataset's own ``Decoder.decode1`` decode that field. The plan walks the
decoder's handlers in webdataset's order and knows three of them exactly:

- ``gzfilter`` (the default pre-handler): a ``.gz`` suffix is left to webdataset;
- ``ImageHandler`` (an image spec string such as ``"rgb8"``): a suffix whose last part is
  in its extensions is decoded by that handler itself (PIL);
- ``basichandlers`` (the default post-handler): a suffix whose last part names one of
  webdataset's ``decoders`` (``cls``, ``txt``, ``json``, ``npy``, ...) is decoded by that
  entry (``int``, ``bytes.decode``, ``json.loads`` for the common ones, which are what its
  entries call; ``npy`` by numpy's ``read_array`` as webdataset does, after a check that
  its header claims no more than the member holds), and any other suffix is kept as bytes.

Any other handler ends the walk with webdataset's ``decode1`` for that suffix, so a
custom handler still sees every field it would see. ``__*__`` fields that are strings are kept (the
reader's are; webdataset decodes any other). A field that fails to decode is decoded
again by webdataset's ``Decoder``, which raises its own ``DecodingError``. The test
compares the two decoders on every suffix webdataset knows, on images and on custom
handlers. A batch goes through :meth:`PlannedDecoder.each`: the plans of a sample's fields are
looked up once for a run of samples with the same fields (a batch of one shard's), so a
sample visits only its fields that change, still one sample at a time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any

from .shard._file_checks import MemberError, npy_loads

__all__ = ["PlannedDecoder", "make_decoder"]

#: A field's plan: ``None`` keeps its value, else the function its value goes through.
Plan = Callable[[Any], Any] | None

_LAST_PART = re.compile(r".*[.]")  # webdataset's extension rule: re.sub(r".*[.]", "", key)
_META = object()  # a ``__*__`` field


class PlannedDecoder:
    r"""webdataset's ``Decoder``, deciding each suffix's decoding once (NOTE [ decode plans ]).

    Args:
        decoder: The ``webdataset.autodecode.Decoder`` whose results this reproduces.

    Examples:
        >>> from webdataset import autodecode
        >>> decode = PlannedDecoder(autodecode.Decoder([]))
        >>> sample = decode({"__key__": "k", "cls": b"3", "txt": b"hi", "bin": b"\x00"})
        >>> sample == {"__key__": "k", "cls": 3, "txt": "hi", "bin": b"\x00"}
        True
    """

    __slots__ = ("decoder", "plans")

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self.plans: dict[str, Any] = {}

    def plan(self, key: str) -> Any:
        """What field ``key`` goes through: ``None`` (kept), a function or ``_META``."""
        if key[:2] == "__":
            return _META
        decoder = self.decoder
        if decoder.only is not None and key not in decoder.only:
            return None
        from webdataset import autodecode

        name = "." + key
        extension = _LAST_PART.sub("", name)
        fallback = partial(decoder.decode1, key)
        for handler in decoder.handlers:
            if handler is autodecode.gzfilter:
                if name.endswith(".gz"):
                    return fallback
            elif type(handler) is autodecode.ImageHandler:
                if extension.lower() in handler.extensions:
                    return partial(handler, name)
            elif handler is autodecode.basichandlers:
                if extension in autodecode.decoders:
                    return _BASIC.get(extension) or autodecode.decoders[extension]
            else:
                return fallback  # a handler we cannot foresee: webdataset decodes the field
        return None

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        """The decoded copy of ``sample``, equal to what the webdataset decoder returns."""
        return next(self.each((sample,)))

    def steps(self, names: tuple[str, ...]) -> list[tuple[str, Any]]:
        """The fields of a sample with fields ``names`` that are not kept, with their plans."""
        plans, steps = self.plans, []
        for key in names:
            how = plans.get(key, self)
            if how is self:
                how = plans[key] = self.plan(key)
            if how is not None:
                steps.append((key, how))
        return steps

    def each(self, samples: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Each of ``samples`` decoded as by :meth:`__call__`, one at a time, in order.

        Samples with the fields of the sample before them (a batch of one shard's samples)
        reuse its steps: per sample, only the fields that change are visited.

        Examples:
            >>> from webdataset import autodecode
            >>> decode = PlannedDecoder(autodecode.Decoder([]))
            >>> [s["cls"] for s in decode.each([{"cls": b"1"}, {"cls": b"2", "txt": b"a"}])]
            [1, 2]
        """
        names: tuple[str, ...] | None = None
        steps: list[tuple[str, Any]] = []
        for sample in samples:
            fields = tuple(sample)
            out = sample.copy()
            key = ""
            try:
                if fields != names:
                    steps = self.steps(fields)
                    names = fields
                for key, how in steps:
                    value = out[key]
                    if how is _META:
                        if value.__class__ is not str:  # bytes metadata: webdataset decides
                            out = self.decoder(sample)
                            break
                    elif value.__class__ is bytes:
                        out[key] = how(value)
                    else:  # a value that is not bytes: webdataset decides
                        out = self.decoder(sample)
                        break
            except MemberError as exn:  # never retried by webdataset, which would allocate it
                where = sample.get("__local_path__") or sample.get("__url__")
                raise MemberError(
                    f"member {key!r} of sample {sample.get('__key__')!r} in shard {where!r} "
                    f"cannot be decoded: {exn}; the shard is damaged or hostile: rewrite it"
                ) from None
            except Exception:
                # The same failure through webdataset itself: its DecodingError, or its result.
                out = self.decoder(sample)
            yield out

    def __getstate__(self) -> Any:
        return self.decoder

    def __setstate__(self, decoder: Any) -> None:
        self.decoder, self.plans = decoder, {}


# What webdataset's basic ``decoders`` entries compute for the common suffixes, called
# without their lambda frame: data.decode("utf-8"), int(data), json.loads(data).
_BASIC: dict[str, Callable[[bytes], Any]] = {
    "txt": bytes.decode,
    "text": bytes.decode,
    "transcript": bytes.decode,
    "cls": int,
    "cls2": int,
    "index": int,
    "inx": int,
    "id": int,
    "json": json.loads,
    "jsn": json.loads,
    "npy": npy_loads,  # read_array, once its header fits (NOTE [ index verification ])
}


def make_decoder(decode: Any) -> Callable[[dict[str, Any]], Any] | None:
    """Build webdataset's ``.decode(*args)``: strings are image specs, callables are handlers.

    The result decodes as webdataset's ``autodecode.Decoder`` does, deciding each
    suffix's handler once (NOTE [ decode plans ]).

    Examples:
        >>> make_decoder(None) is None
        True
        >>> make_decoder(())({"__key__": "k", "cls": b"3"})["cls"]
        3
    """
    if decode is None:
        return None
    from webdataset import autodecode

    if type(decode) is autodecode.Decoder:
        return PlannedDecoder(decode)
    if isinstance(decode, autodecode.Decoder):
        return decode  # type: ignore[no-any-return]  # a subclass: its own rules
    args = [decode] if isinstance(decode, str) or callable(decode) else decode
    if not isinstance(args, Sequence) or not all(isinstance(a, str) or callable(a) for a in args):
        raise TypeError(
            "decode should be a webdataset image spec such as 'rgb8', a decoding handler, a "
            f"sequence of these, or a webdataset.autodecode.Decoder, but got {decode!r}"
        )
    handlers = [autodecode.ImageHandler(a) if isinstance(a, str) else a for a in args]
    return PlannedDecoder(autodecode.Decoder(handlers))
