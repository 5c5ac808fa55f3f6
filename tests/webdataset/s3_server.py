"""A real S3 server on 127.0.0.1 (moto's), behind a loopback proxy that counts and injects faults.

``S3Server`` starts ``moto.server.ThreadedMotoServer`` on a free port, and in front of it
a small aiohttp proxy on another free port; clients (s3fs, boto3) talk to the proxy, at
:attr:`S3Server.endpoint`. The proxy forwards every request unchanged (moto does not check
signatures, so the ``Host`` the client signed is kept), and logs, per object key, each
``GetObject``'s byte range and the body bytes it sent (:class:`Served`). Faults a test
switches on by key, each for a bounded number of ``GetObject`` requests:

- ``drop[key] = n``: the next ``n`` GETs send half of their body, then close the connection;
- ``stall[key] = n``: the next ``n`` GETs send their headers, then nothing for a minute;
- ``fail_503[key] = n``: the next ``n`` GETs answer HTTP 503 ``SlowDown``, as S3 does
  under load;
- ``slow``: keys whose GETs wait ``SLOW`` seconds before they are passed on (a distant
  server's round trip); ``most_at_once`` is the most such GETs that were in flight at once;
- ``forbidden``: keys whose GETs and HEADs answer HTTP 403 ``AccessDenied``, as S3 does
  for a missing key to a caller who may not list the bucket.

Usage (a session fixture in conftest.py)::

    server = S3Server()
    server.create_bucket("b", versioned=False)
    server.put("b", "s/data-000.tar", data)
    source = WebDatasetSource("s3://b/s/data-000.tar", ..., storage_options=server.options)
    server.close()
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import aiohttp
from aiohttp import web
from loopback_proxy import HOP as _HOP
from loopback_proxy import LoopbackProxy, Served

__all__ = ["SLOW", "S3Server", "Served"]

#: Seconds a ``slow`` GET waits before it is passed on.
SLOW = 0.2


class S3Server(LoopbackProxy):
    """moto's S3 on 127.0.0.1 behind a counting, fault-injecting proxy (see the module doc)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.moto.start()
        host, port = self.moto.get_host_and_port()
        self.upstream = f"http://{host}:{port}"
        self.served = Served()
        self.drop: Counter[str] = Counter()
        self.stall: Counter[str] = Counter()
        self.fail_503: Counter[str] = Counter()
        self.forbidden: set[str] = set()
        self.slow: set[str] = set()
        self.most_at_once = 0
        self._in_flight = 0
        self.endpoint = self._start_proxy("S3")
        #: ``storage_options`` for s3fs: the proxy's endpoint and moto's test credentials.
        self.options: dict[str, Any] = {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
        }

    def client(self) -> Any:
        """A boto3 S3 client of moto itself (not through the proxy: nothing is counted)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.upstream,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def create_bucket(self, bucket: str, *, versioned: bool = False) -> None:
        """Create ``bucket`` (with object versioning on if ``versioned``)."""
        client = self.client()
        client.create_bucket(Bucket=bucket)
        if versioned:
            client.put_bucket_versioning(
                Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}
            )

    def put(self, bucket: str, key: str, data: bytes) -> None:
        """Write (or overwrite) an object."""
        self.client().put_object(Bucket=bucket, Key=key, Body=data)

    def reset(self) -> None:
        """Forget what was served and switch every fault off."""
        self.served = Served()
        self.drop, self.stall, self.fail_503 = Counter(), Counter(), Counter()
        self.forbidden, self.slow = set(), set()
        self.most_at_once = self._in_flight = 0

    def close(self) -> None:
        """Stop the proxy and moto."""
        self._stop_proxy()
        self.moto.stop()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        key = path.partition("/")[2]  # path-style: /<bucket>/<key>
        self.served.requests[key] += 1
        get = request.method == "GET" and bool(key)
        if key in self.forbidden:
            self.served.statuses.append((request.method, key, 403))
            body = (
                "<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code>"
                "<Message>Access Denied</Message></Error>"
            )
            return web.Response(status=403, text=body, content_type="application/xml")
        if get:
            self.served.ranges[key].append(request.headers.get("Range", ""))
            if key in self.slow:
                self._in_flight += 1
                self.most_at_once = max(self.most_at_once, self._in_flight)
                await asyncio.sleep(SLOW)
                self._in_flight -= 1
            if self._take(self.fail_503, key):
                self.served.statuses.append((request.method, key, 503))
                body = (
                    "<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
                    "<Message>Please reduce your request rate.</Message></Error>"
                )
                return web.Response(status=503, text=body, content_type="application/xml")
        if self.session is None:
            self.session = aiohttp.ClientSession(auto_decompress=False)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        headers["Host"] = request.headers.get("Host", "")
        body = await request.read()
        async with self.session.request(
            request.method,
            self.upstream + request.rel_url.raw_path_qs,
            headers=headers,
            data=body,
            allow_redirects=False,
        ) as upstream:
            payload = await upstream.read()
            response = web.StreamResponse(status=upstream.status)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP:
                    response.headers[name] = value
            length = upstream.headers.get("Content-Length")
            head = request.method == "HEAD" and length is not None
            response.content_length = int(length) if head else len(payload)  # type: ignore[arg-type]
            self.served.statuses.append((request.method, key, upstream.status))
            if get and upstream.status in (200, 206):
                if await self._cut_short(request, response, key, payload):
                    return response
                self.served.bytes[key] += len(payload)
            await response.prepare(request)
            if request.method != "HEAD":
                await response.write(payload)
            await response.write_eof()
            return response
