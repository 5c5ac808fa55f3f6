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

import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any

from ..._native import kernel
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
        # With the kernel, a list's runs of samples whose plans are all _PURE are decoded in
        # one C call each (``_kernel.decode_run``): the same results, nothing drawn.
        runs = samples if kernel is not None and type(samples) is list else None
        pure: tuple[tuple[str, Any], ...] | None = None
        source = iter(samples)
        index = -1  # the sample's position in ``runs``
        for sample in source:
            index += 1
            fields = tuple(sample)
            if fields != names:
                try:
                    steps = self.steps(fields)
                except Exception:  # as a failure below: webdataset decides
                    yield self.decoder(sample)
                    continue
                names = fields
                pure = tuple(steps) if runs is not None and _all_pure(steps) else None
            if pure is not None:
                assert kernel is not None and runs is not None
                done: list[dict[str, Any]] = []
                stop = kernel.decode_run(runs, index, fields, pure, _META, done)
                if stop > index:  # samples index, ..., stop - 1 decoded
                    yield from done
                    if stop - index > 1:
                        next(itertools.islice(source, stop - index - 2, None), None)
                    index = stop - 1
                    continue
            yield self._decoded(sample, steps)

    def _decoded(self, sample: dict[str, Any], steps: list[tuple[str, Any]]) -> dict[str, Any]:
        """``sample`` decoded by its fields' ``steps`` (:meth:`steps`), or by webdataset."""
        out = sample.copy()
        key = ""
        try:
            for key, how in steps:
                value = out[key]
                if how is _META:
                    if value.__class__ is not str:  # bytes metadata: webdataset decides
                        return self.decoder(sample)  # type: ignore[no-any-return]
                elif value.__class__ is bytes:
                    out[key] = how(value)
                else:  # a value that is not bytes: webdataset decides
                    return self.decoder(sample)  # type: ignore[no-any-return]
        except MemberError as exn:  # never retried by webdataset, which would allocate it
            where = sample.get("__local_path__") or sample.get("__url__")
            raise MemberError(
                f"member {key!r} of sample {sample.get('__key__')!r} in shard {where!r} "
                f"cannot be decoded: {exn}; the shard is damaged or hostile: rewrite it"
            ) from None
        except Exception:
            # The same failure through webdataset itself: its DecodingError, or its result.
            return self.decoder(sample)  # type: ignore[no-any-return]
        return out

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
#: The plans the kernel may run for a whole run of samples before ``map`` sees the first:
#: functions of the bytes alone, which draw nothing and change nothing.
_PURE = frozenset(id(how) for how in _BASIC.values())


def _all_pure(steps: list[tuple[str, Any]]) -> bool:
    """Whether every step is a metadata check or one of the :data:`_PURE` plans."""
    return all(how is _META or id(how) in _PURE for _, how in steps)


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
