"""A real HTTP server for shards on 127.0.0.1: aiohttp's file responses, plus injected faults.

Every GET is served by ``aiohttp.web.FileResponse`` (which honours ``Range`` and
``If-Match`` and sends an ``ETag``) and logged with the byte range it was asked for,
except the faults a test switches on by file name:

- ``drop``: the first GET sends half of its range, then closes the connection;
- ``stall``: every GET sends its headers, then nothing for a minute;
- ``fail_503``: the first GET answers HTTP 503;
- ``no_range``: every request is answered HTTP 200 with the whole file and no
  ``Accept-Ranges``, as from a server that ignores Range (``python -m http.server``);
- ``together``: a GET waits (up to 5 s) until a GET of another of these files is in
  flight too; ``served.most_at_once`` is the most such GETs that were in flight at once.
- ``slow``: a GET waits ``SLOW`` seconds before it is answered (a distant server's round
  trip); ``served.most_at_once`` is the most such GETs that were in flight at once.

Every request is also logged as ``(method, file name)`` in ``served.requests``.

Missing files are 404, as from any static server.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

#: Seconds a ``slow`` GET waits before it is answered.
SLOW = 0.2


@dataclass
class Served:
    """What the server sent: per file name, the ranges asked for and the bytes written."""

    ranges: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    bytes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    statuses: list[tuple[str, int]] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    most_at_once: int = 0


class ShardServer:
    """Serve the files of ``root`` at ``http://127.0.0.1:<free port>/`` from a thread."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.served = Served()
        self.drop: set[str] = set()
        self.stall: set[str] = set()
        self.fail_503: set[str] = set()
        self.no_range: set[str] = set()
        self.together: set[str] = set()
        self.slow: set[str] = set()
        self._in_flight = 0
        self.loop = asyncio.new_event_loop()
        self.runner: web.AppRunner | None = None
        self.port = 0
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        started.wait(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        """Forget what was served and switch every fault off."""
        self.served = Served()
        self.drop, self.stall, self.fail_503, self.no_range = set(), set(), set(), set()
        self.together, self.slow = set(), set()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_route("*", "/{name:.*}", self._handle)
        self.runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        started.set()
        self.loop.run_forever()

    def close(self) -> None:
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():  # else a ResourceWarning when the loop is collected
            self.loop.close()

    def _range(self, request: web.Request, size: int) -> tuple[int, int]:
        wanted = request.http_range
        start = wanted.start or 0
        stop = size if wanted.stop is None else min(wanted.stop, size)
        return start, stop

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        path = self.root / name
        self.served.requests.append((request.method, name))
        if name in self.together and request.method == "GET":
            await self._meet()
        if name in self.slow and request.method == "GET":
            self._in_flight += 1
            self.served.most_at_once = max(self.served.most_at_once, self._in_flight)
            await asyncio.sleep(SLOW)
            self._in_flight -= 1
        if not path.is_file():
            self.served.statuses.append((name, 404))
            raise web.HTTPNotFound()
        if name in self.no_range:
            self.served.statuses.append((name, 200))
            return web.Response(body=path.read_bytes())
        if request.method != "GET":
            return web.FileResponse(path)
        size = os.path.getsize(path)
        start, stop = self._range(request, size)
        self.served.ranges[name].append((start, stop))
        if name in self.fail_503:
            self.fail_503.discard(name)
            self.served.statuses.append((name, 503))
            raise web.HTTPServiceUnavailable()
        if name in self.drop or name in self.stall:
            return await self._fault(request, name, path, start, stop, size)
        self.served.bytes[name] += stop - start
        self.served.statuses.append((name, 206 if request.http_range.start is not None else 200))
        return web.FileResponse(path)

    async def _meet(self) -> None:
        """Wait until another ``together`` GET is in flight (or 5 s), counting them."""
        self._in_flight += 1
        self.served.most_at_once = max(self.served.most_at_once, self._in_flight)
        for _ in range(500):
            if self._in_flight > 1 or self.served.most_at_once > 1:
                break
            await asyncio.sleep(0.01)
        self._in_flight -= 1

    async def _fault(
        self, request: web.Request, name: str, path: Path, start: int, stop: int, size: int
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=206)
        response.headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
        response.content_length = stop - start
        await response.prepare(request)
        if name in self.stall:
            await asyncio.sleep(60)
        self.drop.discard(name)
        with open(path, "rb") as handle:
            handle.seek(start)
            half = handle.read((stop - start) // 2)
        await response.write(half)
        self.served.bytes[name] += len(half)
        self.served.statuses.append((name, -1))  # dropped
        assert request.transport is not None
        request.transport.close()
        return response
