"""A GCS JSON API on 127.0.0.1 (gcp-storage-emulator) behind a counting, fault-injecting proxy.

``GCSServer`` starts ``gcp_storage_emulator`` in memory on a free port (its own thread),
and in front of it a small aiohttp proxy on another free port; gcsfs talks to the proxy,
at :attr:`GCSServer.endpoint` (``storage_options={"endpoint_url": ..., "token": "anon"}``).
The proxy logs, per object name, each media download's ``Range`` and ``generation`` and
the body bytes it sent (:class:`loopback_proxy.Served`), and injects faults by object name,
each for a bounded number of media downloads:

- ``drop[name] = n``: the next ``n`` downloads send half of their body, then close the
  connection;
- ``stall[name] = n``: the next ``n`` downloads send their headers, then nothing for a
  minute;
- ``trickle[name] = n``: the next ``n`` downloads send their body in 4 pieces 0.4 s
  apart (a slow but steady answer: 1.2 s in all);
- ``slow``: names whose media downloads wait ``SLOW`` seconds before they are passed on;
  ``most_at_once`` is the most such downloads that were in flight at once;
- ``forbidden``: names whose requests answer HTTP 403, as GCS does for a missing object
  to a caller who may not list the bucket (a public bucket's anonymous reader);
- ``fail_503[name] = n``: the next ``n`` requests for the object (its metadata, its
  bytes, an upload of it) answer HTTP 503, as GCS does under load.

What the emulator gets wrong, the proxy puts right (NOTE [ object storage ] relies on it):
gcp-storage-emulator 2026.7.19 ignores the ``generation`` parameter of a download, and
sends the current bytes whatever generation is asked for; GCS answers 404 for a
generation that no longer exists (in a bucket without object versioning), and names the
generation it serves in ``x-goog-generation``. The proxy does both, from the emulator's
own record of the object (``honour_generation`` and ``report_generation``, on by
default; a test switches them off to see a server that ignores the parameter).

gcsfs 2025.x and later probe each bucket's layout over gRPC (its
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` classes), which an emulator of the JSON API cannot
answer: each call would wait for that probe's own retries (60 s). Importing this module
switches the probe off for the test session, as docs/webdataset-remote.md tells a user to.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import Counter
from typing import Any
from urllib.parse import parse_qs, unquote

import aiohttp
from aiohttp import web
from loopback_proxy import HOP as _HOP
from loopback_proxy import LoopbackProxy, Served
from s3_server import SLOW

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


def object_of(path: str) -> tuple[str, str, bool]:
    """``(bucket, object name, media download)`` of a JSON API path (name ``""``: none)."""
    parts = path.split("/")
    media = path.startswith("download/")
    if media:
        parts = parts[1:]
    if parts[:2] == ["storage", "v1"]:
        parts = parts[2:]
    if len(parts) >= 4 and parts[0] == "b" and parts[2] == "o":
        return parts[1], unquote("/".join(parts[3:])), media
    return (parts[1] if len(parts) > 1 and parts[0] == "b" else ""), "", False


def _uploaded_name(body: bytes) -> str:
    """The object name in the JSON metadata part of a multipart upload (``""``: none)."""
    start = body.find(b"{")
    if start < 0:
        return ""
    try:
        meta, _ = json.JSONDecoder().raw_decode(body[start:].decode("utf-8", "replace"))
    except ValueError:
        return ""
    return str(meta.get("name", "")) if isinstance(meta, dict) else ""


class GCSServer(LoopbackProxy):
    """gcp-storage-emulator on 127.0.0.1 behind a counting, fault-injecting proxy."""

    def __init__(self) -> None:
        import gcsfs
        from gcp_storage_emulator.server import create_server

        if gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:
            raise RuntimeError(
                "gcsfs was imported before GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false was set "
                "(gcs_server.py sets it on import): its gRPC probe would stall every call"
            )

        for noisy in ("gcp_storage_emulator", "api.object", "aiohttp.server"):
            logging.getLogger(noisy).setLevel(logging.CRITICAL)  # a 404 or a client gone
        self.emulator = create_server("127.0.0.1", 0, in_memory=True)
        self.emulator.start()
        host, port = self.emulator._api._httpd.server_address
        self.emulator._api._httpd.handle_error = lambda *_: None  # a client gone mid-answer
        self.upstream = f"http://{host}:{port}"
        self.served = Served()
        self.generations: list[str] = []  # the ``generation`` of each media download
        self.drop: Counter[str] = Counter()
        self.stall: Counter[str] = Counter()
        self.trickle: Counter[str] = Counter()
        self.fail_503: Counter[str] = Counter()
        self.forbidden: set[str] = set()
        self.slow: set[str] = set()
        self.most_at_once = self._in_flight = 0
        self.honour_generation = True
        self.report_generation = True
        self.endpoint = self._start_proxy("GCS")
        #: ``storage_options`` for gcsfs: the proxy's endpoint, no credentials.
        self.options: dict[str, Any] = {"endpoint_url": self.endpoint, "token": "anon"}

    def _storage(self) -> Any:
        return self.emulator._storage

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket`` (through the emulator's own JSON API, not the proxy)."""
        from gcp_storage_emulator.handlers.buckets import create_bucket

        create_bucket(bucket, self._storage())

    def put(self, bucket: str, name: str, data: bytes) -> str:
        """Write (or overwrite) an object through the emulator; its new generation."""
        import urllib.parse
        import urllib.request

        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        request = urllib.request.Request(
            f"{self.upstream}/upload/storage/v1/b/{bucket}/o?{query}",
            data=data,
            method="POST",
            headers={"Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return str(json.loads(answer.read())["generation"])

    def get(self, bucket: str, name: str) -> bytes:
        """An object's bytes, from the emulator (nothing counted)."""
        return bytes(self._storage().get_file(bucket, name))

    def reset(self) -> None:
        """Forget what was served, switch every fault off, honour generations again."""
        self.served = Served()
        self.generations = []
        self.drop, self.stall, self.fail_503 = Counter(), Counter(), Counter()
        self.trickle, self.forbidden, self.slow = Counter(), set(), set()
        self.most_at_once = self._in_flight = 0
        self.honour_generation = self.report_generation = True

    def close(self) -> None:
        """Stop the proxy and the emulator."""
        self._stop_proxy()
        self.emulator.stop()

    def _current(self, bucket: str, name: str) -> str | None:
        """The generation the emulator holds of an object (``None``: there is none)."""
        try:
            return str(self._storage().get_file_obj(bucket, name)["generation"])
        except Exception:
            return None

    @staticmethod
    def _error(status: int, message: str) -> web.Response:
        body = {"error": {"code": status, "message": message, "errors": [{"message": message}]}}
        return web.json_response(body, status=status)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        bucket, name, media = object_of(request.match_info["path"])
        query = parse_qs(request.rel_url.query_string)
        body = await request.read()
        if request.match_info["path"].startswith("upload/"):  # the name: in the query or
            name = (query.get("name") or [""])[0] or _uploaded_name(body)  # the metadata
        media = media or query.get("alt") == ["media"]
        self.served.requests[name] += 1
        if name in self.forbidden:
            self.served.statuses.append((request.method, name, 403))
            return self._error(403, "Anonymous caller does not have storage.objects.get access")
        if name and self._take(self.fail_503, name):
            self.served.statuses.append((request.method, name, 503))
            return self._error(503, "We encountered an internal error. Please try again.")
        wanted = (query.get("generation") or [None])[0]
        if media:
            self.served.ranges[name].append(request.headers.get("Range", ""))
            self.generations.append(wanted or "")
            if name in self.slow:
                self._in_flight += 1
                self.most_at_once = max(self.most_at_once, self._in_flight)
                await asyncio.sleep(SLOW)
                self._in_flight -= 1
        if self.session is None:
            self.session = aiohttp.ClientSession(auto_decompress=False)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self.session.request(
            request.method,
            self.upstream + request.rel_url.raw_path_qs,
            headers=headers,
            data=body,
            allow_redirects=False,
        ) as upstream:
            payload = await upstream.read()
            # The generation now, after the emulator answered (it serves one request at a
            # time): an overwrite that raced this download makes it a 404, as it may on GCS.
            current = self._current(bucket, name) if media else None
            if media and self.honour_generation and wanted not in (None, current):
                self.served.statuses.append((request.method, name, 404))
                return self._error(404, f"No such object: {bucket}/{name}#{wanted}")
            response = web.StreamResponse(status=upstream.status)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP:
                    response.headers[key] = value
            if media and current is not None and self.report_generation:
                response.headers["x-goog-generation"] = current
            response.content_length = len(payload)
            self.served.statuses.append((request.method, name, upstream.status))
            if media and upstream.status in (200, 206):
                if await self._cut_short(request, response, name, payload):
                    return response
                self.served.bytes[name] += len(payload)
                if self._take(self.trickle, name):
                    await response.prepare(request)
                    quarter = -(-len(payload) // 4)
                    for at in range(0, len(payload), quarter):
                        if at:
                            await asyncio.sleep(0.4)
                        await response.write(payload[at : at + quarter])
                    await response.write_eof()
                    return response
            await response.prepare(request)
            await response.write(payload)
            await response.write_eof()
            return response
