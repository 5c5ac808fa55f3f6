"""A server that ignores Range requests is reported when a remote source is built.

NOTE [ range support ]
The source reads byte ranges of shards (NOTE [ remote reads ]). A server that ignores the
``Range`` header (``python -m http.server`` is one) answers each read with HTTP 200 and
the whole shard, which the reads refuse; found only at the first read, that is in a
DataLoader worker after the index was built. So building a source asks each HTTP(S) host
once, with the first of its shards: a ``HEAD`` whose ``Accept-Ranges: bytes`` settles it
(nginx, Apache, S3, GCS and aiohttp's static files send it), else a ``GET`` of
``Range: bytes=0-0``, whose 206 settles it and whose 200 is the error, the connection
closed before the body is read. A host that answers neither (an error status) is left to
the reads, whose errors name the shard. Other fsspec filesystems read ranges themselves.
The set index of a folder (NOTE [ set index ]) is fetched first, with ``Range: bytes=0-``:
a 206 with it settles its host, which is then not asked again (one round trip, the set
index's, for both); a 200, or no set index, leaves the host to the check above. Shards'
own index files, fetched without a set index, are asked for the same way, so a 206 for
any of them settles their host too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from ._remote_reads import RemoteOptions, remote_fs, retrying

__all__ = ["check_range_support", "get_whole", "host_of", "read_ranged_if_present"]

_OK = 206


def host_of(url: str) -> tuple[str, str]:
    """``(scheme, host)`` of ``url``: what Range support is settled for."""
    scheme, _, rest = url.partition("://")
    return scheme, rest.split("/", 1)[0]


def check_range_support(
    urls: Sequence[str], options: RemoteOptions, settled: Collection[tuple[str, str]] = ()
) -> None:
    """Raise ``ValueError`` if an HTTP(S) host of ``urls`` ignores Range requests.

    Hosts in ``settled`` (:func:`host_of`) answered a Range request with 206 already.

    Raises:
        ValueError: the server answered a one-byte Range request with the whole file; the
            message names the shard and the fix.
        OSError: the host could not be reached within ``options.retries`` (names the URL).
    """
    hosts = set(settled)
    for url in urls:
        host = host_of(url)
        if host[0] not in ("http", "https") or host in hosts:
            continue
        hosts.add(host)
        status = retrying(url, "checking Range support of", options, _prober(url, options))
        if status is not None and status != _OK:
            raise ValueError(
                f"shard {url!r}: the server ignores Range requests (it answered "
                f"'Range: bytes=0-0' with HTTP {status} and the whole file), but the source "
                "reads byte ranges of shards; serve them from a server that honours Range "
                "requests (nginx, Apache, S3, GCS; python -m http.server does not), or "
                "download the shards and pass their local paths"
            )


def _prober(url: str, options: RemoteOptions) -> Callable[[], int | None]:
    """One attempt at :func:`_probe` for ``url``, for :func:`retrying`."""
    from fsspec.asyn import sync

    fs, path = remote_fs(url, options)
    return lambda: sync(fs.loop, _probe, fs, path)


async def _probe(fs: Any, path: str) -> int | None:
    """206 if the server reads ranges, else the status it answered; None if unknown."""
    session = await fs.set_session()
    kwargs = dict(fs.kwargs)
    headers = dict(kwargs.pop("headers", None) or {})
    url = fs.encode_url(path)
    async with session.head(url, headers=headers, allow_redirects=True, **kwargs) as response:
        if "bytes" in response.headers.get("Accept-Ranges", "").lower():
            return _OK
    headers["Range"] = "bytes=0-0"
    async with session.get(url, headers=headers, **kwargs) as response:
        # The body is never read: leaving the block closes a 200's connection.
        return response.status if response.status in (200, _OK) else None


def read_ranged_if_present(
    file_url: str, url: str, what: str, options: RemoteOptions
) -> tuple[bytes | None, bool]:
    """The small HTTP(S) file ``file_url`` (``None`` if absent), and whether it came as a 206.

    Asked with ``Range: bytes=0-``, so that its answer also settles its host's Range
    support; ``url`` and ``what`` name it in errors (``retrying``).
    """
    from fsspec.asyn import sync

    fs, path = remote_fs(file_url, options)
    try:
        status, data = retrying(url, what, options, lambda: sync(fs.loop, get_whole, fs, path))
    except FileNotFoundError:
        return None, False
    return data, status == _OK


async def get_whole(fs: Any, path: str) -> tuple[int, bytes]:
    """The status and the whole body of a ``GET`` of ``path`` with ``Range: bytes=0-``."""
    session = await fs.set_session()
    kwargs = dict(fs.kwargs)
    headers = {**(kwargs.pop("headers", None) or {}), "Range": "bytes=0-"}
    async with session.get(fs.encode_url(path), headers=headers, **kwargs) as response:
        if response.status == 404:
            raise FileNotFoundError(path)
        response.raise_for_status()
        data: bytes = await response.read()
        return response.status, data
