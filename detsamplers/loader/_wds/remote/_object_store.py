"""Object storage (S3, GCS): the version a shard was indexed at, pinned on every read.

NOTE [ object storage ]
A shard on S3 (``s3://``, read with s3fs; MinIO and other S3-compatible servers through
``storage_options={"client_kwargs": {"endpoint_url": ...}}``) or on GCS (``gs://``, gcsfs)
is looked up once when indexed, and its *version* recorded with its index: the S3 ETag,
plus ``?versionId=<id>`` when the bucket keeps versions; for GCS the object's ETag plus
``?generation=<n>``. Every read then pins that version:

- S3: each block is one ``GetObject`` with ``Range``, ``IfMatch=<ETag>`` and, if
  recorded, ``VersionId``. With a version id the indexed bytes are read even after the key
  is overwritten (a versioned bucket keeps them); without one, an overwrite (same size or
  not) makes S3 answer 412, which is a :class:`ShardChangedError` naming the shard, never a
  block of the new bytes beside blocks of the old. The ``Content-Range`` total is also
  compared with the indexed size.
- GCS: each block is one media download (``alt=media``) with ``Range`` and
  ``generation=<n>``, sent on gcsfs's session with its credentials. GCS answers 404 for
  a generation that no longer exists (an overwrite, same size or not, in a bucket
  without object versioning), which is a :class:`ShardChangedError` naming the shard; in
  a bucket with versioning the generation indexed is read. A server that ignores the
  parameter but names the generation it sends (``x-goog-generation``) is caught too, and
  the ``Content-Range`` total is compared with the indexed size.

A body cut short is asked for again from its first missing byte, as over HTTP(S). An S3
read goes through obstore instead of s3fs when the options allow (NOTE [ S3 reads through
obstore ]), with the same pins and checks.

The source's ``timeout`` and ``retries`` reach these filesystems: s3fs gets botocore's
``connect_timeout`` and ``read_timeout`` set to ``timeout`` and is left one attempt per
call (its ``retries`` attribute 1, botocore's ``total_max_attempts=1``), so that the
source's own retry loop (NOTE [ remote reads ]) is the only one: ``retries`` retries
with the documented backoff, for connection errors (botocore's
``EndpointConnectionError``, ``ConnectionClosedError``, read and connect timeouts,
aiohttp's), throttling (503 ``SlowDown``, 429) and 5xx answers alike. gcsfs gets
``requests_timeout``: an aiohttp timeout of ``timeout`` seconds to connect and between
two reads, as over HTTP(S) (a bare number would bound the whole request, however long
the block). gcsfs retries each request itself, 6 times with its own backoff of 1 to 32
s, whatever it is told; so a GCS filesystem built here is left one attempt per call
(its request method without gcsfs's retry wrapper), and the source's loop is again the
only one. Anything in ``storage_options`` wins over these defaults. A DataLoader worker
(forked or spawned) gets the same: the source it unpickles holds no filesystem, and each
filesystem is built where it is used, through the function that applies all of this.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = [
    "ShardChangedError",
    "changed_error",
    "checked_on_read",
    "filesystem_defaults",
    "one_attempt",
    "pinned_range",
    "pinned_version",
    "read_pinned",
    "same_version",
    "split_version",
    "whole_file_kwargs",
    "wire_bytes",
]

_PINS = ("?versionId=", "?generation=")
_CHUNK = 1 << 16


class ShardChangedError(ValueError):
    """A shard's bytes changed since its index was built."""


def changed_error(url: str, what: str) -> ShardChangedError:
    """The error for a shard rewritten since it was indexed (the message names it)."""
    return ShardChangedError(
        f"shard {url!r} changed since its index was built ({what}); its sample offsets no "
        "longer hold: restore the shard, or delete its index file (or the cached index) "
        "and rebuild it with `python -m detsamplers index`"
    )


def wire_bytes(answer: Any, read: int) -> int:
    """The body bytes of an aiohttp answer that came over the wire (``read``, if unknown).

    aiohttp's ``total_bytes`` counts every byte that arrived, those still buffered when a
    dropped connection's error is raised included (a read never returns them).
    """
    total = getattr(getattr(answer, "content", None), "total_bytes", None)
    return total if isinstance(total, int) and total >= read else read


def protocol(url: str) -> str:
    """The URL's scheme, lower case (``"s3"``, ``"gs"``, ``"https"``...)."""
    return url.split("://", 1)[0].lower()


def filesystem_defaults(url: str, timeout: float, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for the filesystem of ``url`` with the timeouts and one attempt per call.

    Keys the user set in ``storage_options`` are kept.

    Examples:
        >>> options = filesystem_defaults("s3://b/a.tar", 9.0, {"config_kwargs": {"read_timeout": 2}})
        >>> options["config_kwargs"]
        {'connect_timeout': 9.0, 'read_timeout': 2, 'retries': {'total_max_attempts': 1}}
        >>> timeout = filesystem_defaults("gs://b/a.tar", 9.0, {})["requests_timeout"]
        >>> timeout.total, timeout.sock_connect, timeout.sock_read
        (None, 9.0, 9.0)
    """  # noqa: E501
    scheme = protocol(url)
    out = dict(kwargs)
    if scheme in ("s3", "s3a"):
        config = {
            "connect_timeout": timeout,
            "read_timeout": timeout,
            "retries": {"total_max_attempts": 1},
        }
        out["config_kwargs"] = {**config, **dict(out.get("config_kwargs") or {})}
    elif scheme in ("gs", "gcs") and "requests_timeout" not in out:
        import aiohttp

        out["requests_timeout"] = aiohttp.ClientTimeout(
            total=None, sock_connect=timeout, sock_read=timeout
        )
    return out


def one_attempt(fs: Any, url: str) -> Any:
    """Leave an s3fs or gcsfs filesystem one attempt per call: the source's loop retries.

    gcsfs wraps its request method in a retry loop of a fixed length (``retry_request``,
    6 attempts); the instance gets the method without it, where gcsfs exposes it.
    """
    scheme = protocol(url)
    if scheme in ("s3", "s3a") and isinstance(getattr(fs, "retries", None), int):
        fs.retries = 1
    elif scheme in ("gs", "gcs"):
        bare = getattr(getattr(type(fs), "_request", None), "__wrapped__", None)
        if bare is not None and "_request" not in vars(fs):
            fs._request = types.MethodType(bare, fs)
    return fs


def whole_file_kwargs(url: str) -> dict[str, Any]:
    """Arguments of ``cat_file`` that read a small file in one request (s3fs: no ``HEAD``).

    Examples:
        >>> whole_file_kwargs("s3://b/a.tar.index.npz"), whole_file_kwargs("https://h/a")
        ({'max_concurrency': 1}, {})
    """
    return {"max_concurrency": 1} if protocol(url) in ("s3", "s3a") else {}


def pinned_version(url: str, info: dict[str, Any]) -> str | None:
    """The version of a shard to record, from its filesystem's ``info``.

    Examples:
        >>> pinned_version("s3://b/a.tar", {"ETag": '"9f"', "VersionId": "v1"})
        '"9f"?versionId=v1'
        >>> pinned_version("gs://b/a.tar", {"etag": "CJ8=", "generation": "17"})
        'CJ8=?generation=17'
        >>> pinned_version("https://h/a.tar", {"ETag": '"9f"'})
        '"9f"'
    """
    scheme = protocol(url)
    etag = next((str(info[k]) for k in ("ETag", "etag") if info.get(k)), None)
    if scheme in ("s3", "s3a") and etag is not None:
        version_id = info.get("VersionId")
        return f"{etag}?versionId={version_id}" if version_id else etag
    if scheme in ("gs", "gcs") and info.get("generation") not in (None, ""):
        return f"{etag or ''}?generation={info['generation']}"
    for name in ("ETag", "etag", "generation", "Last-Modified", "LastModified", "mtime"):
        if info.get(name) is not None:
            return str(info[name])
    return None


def checked_on_read(url: str, version: str | None) -> bool:
    """Whether every read of ``url`` checks that it is still at ``version``.

    True for a strong ETag over HTTP(S) (``If-Match``) and on S3 (``IfMatch``), and a
    generation on GCS; such a shard needs no lookup when its index file is read.

    Examples:
        >>> checked_on_read("s3://b/a.tar", '"9f"'), checked_on_read("s3://b/a.tar", None)
        (True, False)
        >>> checked_on_read("gs://b/a.tar", "CJ8=?generation=17")
        True
    """
    etag, pin, _ = split_version(version)
    scheme = protocol(url)
    strong = etag is not None and etag.startswith('"')
    if scheme in ("http", "https", "s3", "s3a"):
        return strong
    return scheme in ("gs", "gcs") and pin == "generation"


def split_version(version: str | None) -> tuple[str | None, str | None, str | None]:
    """``(etag, pin name, pin value)`` of a recorded version.

    Examples:
        >>> split_version('"9f"?versionId=v1'), split_version('"9f"')
        (('"9f"', 'versionId', 'v1'), ('"9f"', None, None))
    """
    if version is None:
        return None, None, None
    for pin in _PINS:
        etag, found, value = version.partition(pin)
        if found:
            return etag or None, pin[1:-1], value
    return version, None, None


def same_version(recorded: str | None, now: str | None) -> bool:
    """Whether two versions are of the same bytes (a side without a pin compares ETags).

    Two GCS generations decide alone: an object's JSON API ETag changes with its metadata
    (a new metageneration), its generation only with its bytes.

    Examples:
        >>> same_version('"9f"?versionId=v1', '"9f"'), same_version('"9f"', '"a0"')
        (True, False)
        >>> same_version("CJ8=?generation=17", "CJ9=?generation=17")
        True
    """
    if recorded is None or now is None:
        return True
    if recorded == now:
        return True
    etag, pin, value = split_version(recorded)
    etag_now, pin_now, value_now = split_version(now)
    if pin == pin_now == "generation":
        return value == value_now
    if etag != etag_now and etag is not None and etag_now is not None:
        return False
    return pin is None or pin_now is None or (pin, value) == (pin_now, value_now)


def _client_error(exn: BaseException) -> tuple[int | None, str]:
    """The HTTP status and error code of a botocore ``ClientError`` (else ``(None, "")``)."""
    response = getattr(exn, "response", None)
    if not isinstance(response, dict):
        return None, ""
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = str(response.get("Error", {}).get("Code", ""))
    return (status if isinstance(status, int) else None), code


async def _s3_range(
    fs: Any,
    url: str,
    path: str,
    start: int,
    end: int,
    version: str | None,
    size: int,
    received: bytearray,
    count: Callable[[int], None],
) -> None:
    """One ranged ``GetObject`` of ``[start + len(received), end)``, pinned."""
    etag, pin, value = split_version(version)
    bucket, key, _ = fs.split_path(path)
    await fs.set_session()
    client = await fs.get_s3(bucket)
    wanted: dict[str, Any] = {
        "Bucket": bucket,
        "Key": key,
        "Range": f"bytes={start + len(received)}-{end - 1}",
    }
    if etag is not None and etag.startswith('"'):
        wanted["IfMatch"] = etag
    if pin == "versionId" and value:
        wanted["VersionId"] = value
    # s3fs adds its request-wide arguments (requester pays, SSE-C keys) here; its
    # ``_cat_file`` takes no ``IfMatch``, so the call is made on its botocore client.
    extend = getattr(fs, "_get_s3_method_kwargs", None)
    kwargs = extend(client.get_object, **wanted) if extend is not None else wanted
    try:
        response = await client.get_object(**kwargs)
    except Exception as exn:
        status, code = _client_error(exn)
        if status == 412 or code == "PreconditionFailed":
            raise changed_error(url, f"S3 no longer matches its ETag {etag}") from None
        if code in ("NoSuchVersion", "InvalidRange") or status == 416:
            raise changed_error(url, f"S3 has no version {value} or range of it now") from None
        if code in ("NoSuchKey", "NoSuchBucket") or status == 404:
            raise FileNotFoundError(url) from None
        raise
    total = str(response.get("ContentRange") or "").rpartition("/")[2]
    if total.isdigit() and int(total) != size:
        response["Body"].close()
        raise changed_error(url, f"it has {total} bytes, {size} when indexed")
    body = response["Body"]
    got = 0
    try:
        while len(received) < end - start:
            chunk = await body.read(_CHUNK)
            if not chunk:
                break
            got += len(chunk)
            received += chunk[: end - start - len(received)]
    finally:
        count(wire_bytes(getattr(body, "_raw_stream", None), got))  # aiobotocore's aiohttp
        body.close()
    if len(received) < end - start:
        raise ConnectionResetError(
            f"the response ended after {len(received)} of {end - start} bytes"
        )


def read_pinned(
    fs: Any,
    url: str,
    path: str,
    start: int,
    end: int,
    version: str | None,
    size: int,
    received: bytearray,
    count: Callable[[int], None],
) -> bool:
    """Read ``[start, end)`` of an S3 or GCS shard at its recorded version into ``received``.

    One attempt, continuing after the bytes already in ``received``; ``count`` is given
    the body bytes that came over the wire, even when the attempt fails mid-body. False
    if ``url`` is neither on S3 nor on GCS (the caller then reads it its own way).

    Raises:
        ShardChangedError: the shard is no longer at that version.
        FileNotFoundError: it does not exist.
    """
    attempt = pinned_range(fs, url, path, start, end, version, size, received, count)
    if attempt is not None:
        from fsspec.asyn import sync

        sync(fs.loop, lambda: attempt)
        return True
    _, pin, value = split_version(version)
    if protocol(url) in ("gs", "gcs") and pin == "generation":  # gcsfs without the internals
        begin = start + len(received)
        try:
            data = fs.cat_file(path, start=begin, end=end, generation=value)
        except FileNotFoundError:
            raise changed_error(url, f"GCS has no generation {value} of it now") from None
        count(len(data))  # a failed attempt's bytes are unknown here
        received += data[: end - start - len(received)]
        return True
    return False


def pinned_range(
    fs: Any,
    url: str,
    path: str,
    start: int,
    end: int,
    version: str | None,
    size: int,
    received: bytearray,
    count: Callable[[int], None],
) -> Coroutine[Any, Any, None] | None:
    """The one attempt :func:`read_pinned` makes, as a coroutine for ``fs.loop``, or None.

    None where :func:`read_pinned` makes no such attempt (another filesystem, a gcsfs
    without the internals): NOTE [ first blocks of a batch ] runs several of them at once.
    """
    scheme = protocol(url)
    if scheme in ("s3", "s3a") and hasattr(fs, "get_s3"):
        return _s3_range(fs, url, path, start, end, version, size, received, count)
    _, pin, value = split_version(version)
    if scheme in ("gs", "gcs") and pin == "generation" and _gcs_internals(fs):
        return _gcs_range(fs, url, path, start, end, str(value), size, received, count)
    return None


def _gcs_internals(fs: Any) -> bool:
    """Whether gcsfs has the internals :func:`_gcs_range` sends its request with.

    Without them (another gcsfs), a block is read by gcsfs's public ``cat_file`` at the
    generation indexed: still pinned, but whole or not at all, without the checks of
    what the server says it sent.
    """
    return all(hasattr(fs, name) for name in ("_get_headers", "_get_params", "url", "_set_session"))


async def _gcs_range(
    fs: Any,
    url: str,
    path: str,
    start: int,
    end: int,
    generation: str,
    size: int,
    received: bytearray,
    count: Callable[[int], None],
) -> None:
    """One ranged media download of ``[start + len(received), end)`` at ``generation``.

    Sent on gcsfs's session with its credentials, parameters (requester pays) and
    ``requests_timeout``, once: gcsfs's ``_cat_file`` reads a body whole or not at all,
    and reports neither the generation served nor the ``Content-Range``.
    """
    session = await fs._set_session() or fs.session
    headers = fs._get_headers({"Range": f"bytes={start + len(received)}-{end - 1}"})
    async with session.get(
        fs.url(path, generation=generation),
        params=fs._get_params({}),
        headers=headers,
        timeout=fs.requests_timeout,
    ) as response:
        if response.status == 404:
            raise changed_error(url, f"GCS has no generation {generation} of it now")
        response.raise_for_status()  # 5xx, 429 and 408 are retried (NOTE [ remote reads ])
        served = response.headers.get("x-goog-generation")
        if served is not None and served != generation:
            raise changed_error(url, f"GCS sent generation {served}, not {generation}")
        total = response.headers.get("Content-Range", "").rpartition("/")[2]
        if total.isdigit() and int(total) != size:
            raise changed_error(url, f"it has {total} bytes, {size} when indexed")
        if response.status != 206:
            raise ValueError(
                f"shard {url!r}: GCS answered a Range request with HTTP {response.status}, "
                "not 206 Partial Content; the source reads byte ranges, so it needs a "
                "server that honours Range requests"
            )
        got = 0
        try:
            async for chunk in response.content.iter_chunked(_CHUNK):
                got += len(chunk)
                received += chunk[: end - start - len(received)]
        finally:
            count(wire_bytes(response, got))
    if len(received) < end - start:
        raise ConnectionResetError(
            f"the response ended after {len(received)} of {end - start} bytes"
        )
