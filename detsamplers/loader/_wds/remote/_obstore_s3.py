"""S3 reads without botocore: through obstore, when it is installed and the options allow.

NOTE [ S3 reads through obstore ]
s3fs talks to S3 through aiobotocore, whose client is built once per process by the first
request, and building it costs about 250 ms of CPU (botocore decodes S3's service model
and endpoint rules from JSON): on a resume, more than the set index and the first batch's
requests together on a fast server, and paid by every rank and DataLoader worker process.
obstore (Rust, the ``object_store`` crate; litdata depends on it) builds a client in a
few milliseconds. So a read of an ``s3://`` object, a ranged ``GetObject`` of a shard at
its pinned version (NOTE [ object storage ]) or a small file read whole (an index file,
the set index), goes through obstore when all of these hold, and through s3fs otherwise:

- obstore is importable;
- ``storage_options`` holds only what translates one to one: ``key``, ``secret``,
  ``token``, ``anon``, ``endpoint_url``, ``client_kwargs`` with only ``endpoint_url`` and
  ``region_name``, and ``config_kwargs`` with only the timeouts and the one attempt that
  the source sets (NOTE [ object storage ]); anything else (a profile, requester pays,
  SSE-C keys, a botocore ``Config``) keeps s3fs, which knows it;
- the credentials are given there (``key`` and ``secret``, or ``anon=True``), and so is
  the region (``client_kwargs={"region_name": ...}``, else ``AWS_REGION`` or
  ``AWS_DEFAULT_REGION``) or an ``endpoint_url`` (signed for ``us-east-1`` when no region
  is set anywhere, and kept on s3fs if ``~/.aws/config`` may name one): botocore also
  finds credentials in ``~/.aws`` files and profiles, and a bucket's region by asking,
  which obstore does not do the same way;
- no endpoint, FIPS, dual-stack or CA bundle setting in the environment
  (``AWS_ENDPOINT_URL``, ``AWS_CA_BUNDLE``...) that botocore would follow, unless the
  options name an ``http://`` endpoint (no TLS, and the options' endpoint wins).

The reads keep what the s3fs path guarantees: ``IfMatch`` with the indexed ETag and
``VersionId`` when recorded (obstore's ``if_match`` and ``version``), the object's total
size compared with the indexed size, one attempt per call (obstore's own retries off)
so that the source's loop (NOTE [ remote reads ]) retries connection errors, timeouts,
429, 5xx and S3's ``SlowDown`` alike, and a body cut short continued from its first
missing byte. The failures map to the errors the s3fs path raises: 412 and a missing
version or range to :class:`ShardChangedError` naming the shard, 404 to
``FileNotFoundError``, 403 to ``PermissionError``. The source's ``timeout`` bounds the
connection and, unlike over s3fs, the whole request (obstore has no timeout between two
reads): a block of ``read_ahead`` bytes must arrive within ``timeout`` seconds (4 MiB in
60 s is 70 KB/s). A process keeps one client per bucket and options. A process forked from one
that read through obstore (a DataLoader worker) reads through s3fs: obstore's runtime
threads do not survive a fork, and a client used there hangs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any, NoReturn

from ._object_store import changed_error, protocol, split_version

__all__ = ["FileSink", "S3StoreError", "cat_file", "read_range", "store_for"]

#: ``(bucket, options) -> store``: one client per bucket and options.
_STORES: dict[tuple[str, str], Any] = {}
#: The process that first read through obstore: its forked children read through s3fs.
_owner: list[int] = []
_TOP = frozenset(
    {"key", "secret", "token", "anon", "endpoint_url", "client_kwargs", "config_kwargs"}
)
_CLIENT = frozenset({"endpoint_url", "region_name"})
_CONFIG = frozenset({"connect_timeout", "read_timeout", "retries"})
#: Settings botocore reads from the environment that change where or how it connects.
_ENDPOINT_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_USE_FIPS_ENDPOINT",
    "AWS_USE_DUALSTACK_ENDPOINT",
    "AWS_CA_BUNDLE",
)
_STATUS = re.compile(r"status code: (\d{3})")
_TRANSIENT_CODES = ("SlowDown", "RequestTimeout", "Throttling", "InternalError")


class S3StoreError(OSError):
    """A failed S3 request through obstore, with its HTTP status (``None``: no answer)."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


class FileSink:
    """A file that :func:`read_range` writes a body to instead of a ``bytearray``.

    :meth:`write` writes a chunk at the file's position and ``len`` counts the bytes written, so
    a retry continues from the first byte missing (NOTE [ remote reads ]); a download into
    the cache (NOTE [ shard cache ]) writes each chunk as it arrives, with no copy of the
    whole body in memory.

    Examples:
        >>> import io
        >>> file = io.BytesIO()
        >>> sink = FileSink(file)
        >>> sink.write(b"ab")
        >>> sink.write(memoryview(b"cde")[:2])
        >>> len(sink), file.getvalue()
        (4, b'abcd')
    """

    def __init__(self, file: Any) -> None:
        self.file = file
        self.length = 0

    def __len__(self) -> int:
        return self.length

    def write(self, chunk: bytes | memoryview) -> None:
        """Write ``chunk`` after the bytes written so far."""
        self.file.write(chunk)
        self.length += len(chunk)


def _settings(options: dict[str, Any]) -> dict[str, Any] | None:
    """The ``S3Store`` arguments for s3fs's ``options``, or ``None`` (see the NOTE)."""
    if not set(options) <= _TOP:
        return None
    client = dict(options.get("client_kwargs") or {})
    config = dict(options.get("config_kwargs") or {})
    if not set(client) <= _CLIENT or not set(config) <= _CONFIG:
        return None
    retries = config.get("retries", {"total_max_attempts": 1})
    # botocore writes its retry "mode" into this dict when s3fs builds its client, and
    # fsspec hands the same filesystem (and dict) to every later call with these options.
    if not isinstance(retries, dict) or retries.get("total_max_attempts") != 1:
        return None
    if not set(retries) <= {"total_max_attempts", "mode"}:
        return None
    endpoint = client.get("endpoint_url") or options.get("endpoint_url")
    region = client.get("region_name") or _env_region()
    anon = options.get("anon") is True
    keys = isinstance(options.get("key"), str) and isinstance(options.get("secret"), str)
    if not (anon or keys) or (region is None and endpoint is None):
        return None
    if region is None and os.path.exists(_config_file()):
        return None  # botocore would sign with the region of the profile there
    if any(os.environ.get(name) for name in _ENDPOINT_ENV) and not (
        endpoint and endpoint.startswith("http://")
    ):
        return None  # botocore would pick another endpoint, or trust another CA bundle
    if not all(isinstance(v, str) for v in (endpoint or "", region or "")):
        return None
    timeouts = [config.get(k) for k in ("connect_timeout", "read_timeout")]
    if not all(isinstance(t, int | float) and not isinstance(t, bool) and t > 0 for t in timeouts):
        return None
    out: dict[str, Any] = {
        "region": region or "us-east-1",
        "client_options": {
            "connect_timeout": f"{timeouts[0]}s",
            "timeout": f"{timeouts[1]}s",
            "allow_http": bool(endpoint and endpoint.startswith("http://")),
        },
    }
    if endpoint:
        out["endpoint"] = endpoint
    if anon:
        out["skip_signature"] = True
    else:
        out["access_key_id"], out["secret_access_key"] = options["key"], options["secret"]
        if isinstance(options.get("token"), str):
            out["session_token"] = options["token"]
    return out


def _env_region() -> str | None:
    """The region botocore takes from the environment, if set there."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None


def _config_file() -> str:
    return os.environ.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config")


def store_for(fs: Any, url: str) -> tuple[Any, str] | None:
    """An obstore client of ``url``'s bucket and the object's key, or ``None`` (s3fs reads).

    ``fs`` is the s3fs filesystem the source built, whose ``storage_options`` carry the
    user's options and the source's timeouts.
    """
    if protocol(url) not in ("s3", "s3a"):
        return None
    settings = _settings(dict(getattr(fs, "storage_options", None) or {}))
    if settings is None:
        return None
    try:
        from datetime import timedelta

        from obstore.store import S3Store
    except ImportError:
        return None
    if _owner and _owner[0] != os.getpid():
        return None  # a fork of a process that used obstore: its runtime's threads are gone
    _owner[:] = [os.getpid()]
    bucket, _, key = url.split("://", 1)[1].partition("/")
    cached = (bucket, repr(sorted(settings.items())))
    store = _STORES.get(cached)
    if store is None:
        client = settings.pop("client_options")
        retry: Any = {
            "max_retries": 0,
            "retry_timeout": timedelta(seconds=1),
            "backoff": {
                "init_backoff": timedelta(seconds=0.1),
                "max_backoff": timedelta(seconds=1),
                "base": 2.0,
            },
        }
        store = S3Store(bucket, client_options=client, retry_config=retry, **settings)
        _STORES[cached] = store
    return store, key


def _raise(exn: BaseException, url: str, etag: str | None, version: str | None) -> NoReturn:
    """Raise the error the s3fs path raises for the failed request ``exn``."""
    import obstore.exceptions as errors

    text = str(exn)
    found = _STATUS.search(text)
    status = int(found.group(1)) if found else None
    if isinstance(exn, errors.PreconditionError) or status == 412:
        raise changed_error(url, f"S3 no longer matches its ETag {etag}") from None
    if "NoSuchVersion" in text or "InvalidRange" in text or status == 416:
        raise changed_error(url, f"S3 has no version {version} or range of it now") from None
    if isinstance(exn, FileNotFoundError) or status == 404:
        raise FileNotFoundError(url) from None
    if isinstance(exn, errors.PermissionDeniedError | errors.UnauthenticatedError):
        raise PermissionError(f"{url}: {text.splitlines()[0]}") from exn
    if any(code in text for code in _TRANSIENT_CODES) and status is None:
        status = 503
    if status is None and "timed out" in text.lower():
        raise TimeoutError(f"{url}: {text.splitlines()[0]}") from exn
    if status is None:
        raise ConnectionError(f"{url}: {text.splitlines()[0]}") from exn
    raise S3StoreError(f"{url}: HTTP {status}: {text.splitlines()[0]}", status) from exn


def read_range(
    found: tuple[Any, str],
    url: str,
    start: int,
    end: int,
    version: str | None,
    size: int,
    received: bytearray | FileSink,
    count: Callable[[int], None],
) -> None:
    """One ranged ``GetObject`` of ``[start + len(received), end)`` at ``version``.

    Appends the body to ``received`` (or writes it to a :class:`FileSink`) and hands
    ``count`` the body bytes that came over the wire, those of an answer cut short included
    (``RemoteShard.received``).
    """
    import obstore

    store, key = found
    etag, pin, value = split_version(version)
    options: Any = {"range": (start + len(received), end)}
    if etag is not None and etag.startswith('"'):
        options["if_match"] = etag
    if pin == "versionId" and value:
        options["version"] = value
    try:
        result = obstore.get(store, key, options=options)
    except Exception as exn:
        _raise(exn, url, etag, value)
    total = result.meta.get("size")
    if isinstance(total, int) and total != size:
        raise changed_error(url, f"it has {total} bytes, {size} when indexed")
    got = 0
    try:
        for chunk in result.stream(min_chunk_size=0):
            got += len(chunk)
            piece = memoryview(chunk)[: end - start - len(received)]
            if isinstance(received, FileSink):
                received.write(piece)
            else:
                received += piece
    except Exception as exn:
        _raise(exn, url, etag, value)
    finally:
        count(got)
    if len(received) < end - start:
        raise ConnectionResetError(
            f"the response ended after {len(received)} of {end - start} bytes"
        )


def cat_file(found: tuple[Any, str], url: str) -> bytes:
    """The whole object (a small file: an index file, the set index), in one request."""
    import obstore

    store, key = found
    try:
        return bytes(obstore.get(store, key).bytes())
    except Exception as exn:
        _raise(exn, url, None, None)
