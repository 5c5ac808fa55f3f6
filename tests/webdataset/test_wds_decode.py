"""The planned decoder against webdataset's own ``autodecode.Decoder`` (NOTE [ decode plans ])."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import re
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from wds_helpers import png_bytes
from webdataset import autodecode

from detsamplers._native import kernel
from detsamplers.loader._wds import _decode
from detsamplers.loader._wds._decode import PlannedDecoder, make_decoder


def npy(array: np.ndarray[Any, Any]) -> bytes:
    stream = io.BytesIO()
    np.save(stream, array)
    return stream.getvalue()


def npz() -> bytes:
    stream = io.BytesIO()
    np.savez(stream, a=np.arange(3), b=np.eye(2))
    return stream.getvalue()


def pth() -> bytes:
    stream = io.BytesIO()
    torch.save(torch.arange(4), stream)
    return stream.getvalue()


def tenbin() -> bytes:
    from webdataset import tenbin as tb

    return bytes(tb.encode_buffer([np.arange(5, dtype=np.int32)]))


#: A valid payload for every suffix webdataset's basichandlers know (a missing library,
#: msgpack or cbor, makes both decoders fail the same way).
PAYLOADS: dict[str, bytes] = {
    "txt": "héllo".encode(),
    "text": b"plain",
    "transcript": b"words",
    "cls": b"42",
    "cls2": b" 7\n",
    "index": b"3",
    "inx": b"-1",
    "id": b"12",
    "json": b'{"a": [1, 2.5, null]}',
    "jsn": b"[true]",
    "pkl": pickle.dumps({"x": 1}),
    "pickle": pickle.dumps([1, 2]),
    "pyd": pickle.dumps("s"),
    "pth": pth(),
    "ten": tenbin(),
    "tb": tenbin(),
    "mp": b"\x91\x01",
    "msg": b"\x91\x01",
    "npy": npy(np.arange(6).reshape(2, 3)),
    "npz": npz(),
    "cbor": b"\x81\x01",
    "png": png_bytes(9),
    "seg.png": png_bytes(200),
    "JPG": png_bytes(3),  # an image suffix in capitals; PIL reads the PNG inside
    "bin": b"\x00\x01",
    "unknown.ext": b"raw",
    "json.gz": gzip.compress(b'{"z": 1}'),
    "cls.gz": gzip.compress(b"5"),
}
assert set(autodecode.decoders) <= set(PAYLOADS)  # every suffix webdataset knows


def same(left: Any, right: Any) -> bool:
    """Equality that also compares arrays, tensors and PIL images by content and type."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, (list, tuple)):
        return len(left) == len(right) and all(map(same, left, right))
    if isinstance(left, np.ndarray):
        return left.dtype == right.dtype and np.array_equal(left, right)
    if isinstance(left, torch.Tensor):
        return left.dtype == right.dtype and torch.equal(left, right)
    if hasattr(left, "tobytes") and hasattr(left, "mode"):  # a PIL image
        return bool(left.mode == right.mode and left.tobytes() == right.tobytes())
    return bool(left == right)


def outcome(decoder: Any, sample: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", decoder(sample)
    except Exception as exn:
        cause = exn.__cause__
        where = (getattr(exn, "key", None), getattr(exn, "url", None), getattr(exn, "k", None))
        message = re.sub(r" at 0x[0-9a-f]+", "", str(cause))  # an object's address
        return type(exn).__name__, (exn.args, where, type(cause).__name__, message)


def assert_same_as_webdataset(args: Any, sample: dict[str, Any]) -> None:
    ours = make_decoder(args)
    handlers = [args] if isinstance(args, str) or callable(args) else list(args)
    images = [autodecode.ImageHandler(a) if isinstance(a, str) else a for a in handlers]
    theirs = autodecode.Decoder(images)
    for _ in range(2):  # the second time through the plans made the first time
        got, want = outcome(ours, dict(sample)), outcome(theirs, dict(sample))
        assert got[0] == want[0], (got, want)
        if got[0] == "ok":
            assert same(got[1], want[1])
        else:
            assert got[1][1:] == want[1][1:]


def meta(suffixes: dict[str, bytes]) -> dict[str, Any]:
    return {"__key__": "k", "__url__": "/d/s.tar", **suffixes, "__local_path__": "/d/s.tar"}


@pytest.mark.parametrize(
    "args", [(), "rgb8", "l", "torchrgb", "pil", ["pill", "rgba8"], "torchl8", "rgba"]
)
@pytest.mark.parametrize("suffix", sorted(PAYLOADS))
def test_each_suffix_decodes_as_webdataset_decodes_it(args: Any, suffix: str) -> None:
    assert_same_as_webdataset(args, meta({suffix: PAYLOADS[suffix]}))


def upper_txt(key: str, data: bytes) -> Any:
    return data.decode().upper() if key.endswith(".txt") else None


def gz_too(key: str, data: bytes) -> Any:
    return len(data) if key.endswith(".gz") else None


@pytest.mark.parametrize("args", [upper_txt, [upper_txt, "rgb8"], ["l8", gz_too], gz_too])
def test_a_custom_handler_sees_the_fields_it_would_see_in_webdataset(args: Any) -> None:
    sample = meta({s: PAYLOADS[s] for s in ("txt", "cls", "png", "json.gz", "bin")})
    assert_same_as_webdataset(args, sample)


@pytest.mark.parametrize("bad", [{"cls": b"x"}, {"json": b"{"}, {"png": b"not a png"}])
def test_a_field_that_fails_raises_webdatasets_decoding_error(bad: dict[str, bytes]) -> None:
    assert_same_as_webdataset("rgb8", meta({"txt": b"fine", **bad}))
    with pytest.raises(autodecode.DecodingError):
        make_decoder("rgb8")(meta(bad))  # type: ignore[misc]


def test_a_sample_that_is_not_bytes_is_left_to_webdataset() -> None:
    sample = {"__key__": b"k", "cls": b"1"}
    assert_same_as_webdataset((), sample)
    assert_same_as_webdataset((), {"__key__": "k", "cls": 1})


def test_a_given_decoder_keeps_its_only_and_pre_post_handlers() -> None:
    given_decoder = autodecode.Decoder([], only=["cls"], post=[autodecode.basichandlers])
    planned = make_decoder(given_decoder)
    sample = meta({"cls": b"1", "txt": b"t"})
    assert isinstance(planned, PlannedDecoder)
    assert planned(dict(sample)) == given_decoder(dict(sample))
    assert planned(dict(sample))["txt"] == b"t"


def test_a_decoder_subclass_is_used_as_it_is() -> None:
    class Mine(autodecode.Decoder):  # type: ignore[misc]
        pass

    mine = Mine([])
    assert make_decoder(mine) is mine


def test_the_planned_decoder_pickles_to_workers_and_keeps_decoding() -> None:
    decoder = make_decoder("rgb8")
    sample = meta({"cls": b"4", "png": PAYLOADS["png"]})
    assert decoder is not None
    decoder(dict(sample))
    copy = pickle.loads(pickle.dumps(decoder))
    assert same(copy(dict(sample)), decoder(dict(sample)))


@settings(max_examples=60)
@given(
    fields=st.dictionaries(
        st.sampled_from(sorted(PAYLOADS))
        | st.from_regex(r"[a-z]{1,3}(\.[a-z]{1,3})?", fullmatch=True),
        st.binary(max_size=8),
        max_size=4,
    ),
    args=st.sampled_from([(), "rgb8", "torchl"]),
    valid=st.booleans(),
)
def test_any_sample_decodes_exactly_as_webdataset_decodes_it(
    fields: dict[str, bytes], args: Any, valid: bool
) -> None:
    if valid:
        fields = {k: PAYLOADS.get(k, v) for k, v in fields.items()}
    assert_same_as_webdataset(args, meta(fields))


def test_the_planned_decoder_answers_a_json_field_with_the_parsed_value() -> None:
    assert make_decoder(())(meta({"json": b'{"a": 1}'}))["json"] == json.loads(b'{"a": 1}')  # type: ignore[misc]


@settings(max_examples=60)
@given(
    batch=st.lists(
        st.dictionaries(
            st.sampled_from(["cls", "txt", "json", "bin", "png"]),
            st.sampled_from([b"7", b"12", b"x", b'{"a": 1}', b"\xff"]),
            max_size=3,
        ),
        max_size=8,
    ),
    args=st.sampled_from([(), "rgb8"]),
)
def test_a_batch_decoded_at_once_equals_webdataset_decoding_each_sample(
    batch: list[dict[str, bytes]], args: Any
) -> None:
    """Steps reused across samples with the same fields never leak into a sample with others."""
    ours = make_decoder(args)
    assert isinstance(ours, PlannedDecoder)
    theirs = autodecode.Decoder([autodecode.ImageHandler(args)] if args else [])
    samples = [meta(fields) for fields in batch]
    want = [outcome(theirs, dict(sample)) for sample in samples]
    got: list[tuple[str, Any]] = []
    decoded = ours.each(dict(s) for s in samples)
    while len(got) < len(samples):
        try:
            got.append(("ok", next(decoded)))
        except Exception as exn:  # this sample failed: webdataset's own error, as it raises
            got.append((type(exn).__name__, None))
            break
    assert [g[0] for g in got] == [w[0] for w in want[: len(got)]]
    assert all(same(g[1], w[1]) for g, w in zip(got, want[: len(got)], strict=True) if g[0] == "ok")


def outcomes(decoded: Any, count: int) -> list[tuple[str, Any]]:
    """``("ok", sample)`` for each sample ``decoded`` yields, then its error's name and message."""
    got: list[tuple[str, Any]] = []
    while len(got) < count:
        try:
            got.append(("ok", next(decoded)))
        except Exception as exn:
            got.append((type(exn).__name__, str(exn)))
            break
    return got


#: Values the kernel's runs meet: valid, invalid for json and npy, and not bytes at all.
RUN_VALUES = [b"7", b"x", b'{"a": 1}', npy(np.arange(3)), b"\x93NUMPY\x01\x00\xff\xff", "str", 5]


@settings(max_examples=150)
@given(
    kinds=st.lists(
        st.lists(st.sampled_from(["cls", "txt", "json", "npy", "bin"]), max_size=3, unique=True),
        min_size=1,
        max_size=3,
    ),
    data=st.data(),
)
def test_runs_decoded_by_the_kernel_equal_the_samples_decoded_one_by_one(
    kinds: list[list[str]], data: st.DataObject
) -> None:
    """A list's runs of samples with the same fields go through ``_kernel.decode_run`` (NOTE
    [ decode plans ]): the same samples, and the same error at the same sample, as the loop."""
    count = data.draw(st.integers(0, 12))
    samples: list[dict[str, Any]] = []
    for _ in range(count):
        fields = data.draw(st.sampled_from(kinds))
        sample = meta({k: data.draw(st.sampled_from(RUN_VALUES)) for k in fields})
        if data.draw(st.integers(0, 9)) == 0:
            sample["__url__"] = b"/d/s.tar"  # bytes metadata: webdataset decides
        samples.append(sample)
    decoder = make_decoder(())
    assert isinstance(decoder, PlannedDecoder)
    runs = outcomes(decoder.each([dict(s) for s in samples]), count)  # a list: the kernel's runs
    loop = outcomes(decoder.each(dict(s) for s in samples), count)  # a generator: one by one
    assert [kind for kind, _ in runs] == [kind for kind, _ in loop]
    for (kind, got), (_, want) in zip(runs, loop, strict=True):
        assert same(got, want) if kind == "ok" else got == want


@pytest.mark.skipif(kernel is None, reason="the compiled kernel is not built")
def test_a_batch_of_one_shards_samples_is_decoded_in_one_kernel_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []

    def decode_run(*args: Any) -> int:
        assert kernel is not None
        calls.append(args[1])
        return kernel.decode_run(*args)

    monkeypatch.setattr(_decode, "kernel", SimpleNamespace(decode_run=decode_run))
    decoder = make_decoder(())
    assert isinstance(decoder, PlannedDecoder)
    samples = [meta({"cls": str(i).encode(), "png": b"\x89PNG"}) for i in range(64)]
    samples[40]["cls"] = b"x"  # int() fails: webdataset's error, from the loop
    decoded = decoder.each(samples)
    assert [next(decoded)["cls"] for _ in range(40)] == list(range(40))
    with pytest.raises(autodecode.DecodingError):
        next(decoded)
    assert calls == [0, 40]  # the run up to the bad sample, then that sample tried again
