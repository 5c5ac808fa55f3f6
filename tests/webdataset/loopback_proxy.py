"""The counting, fault-injecting aiohttp proxy the object-store test servers put in front.

``S3Server`` (moto) and ``GCSServer`` (gcp-storage-emulator) each start their server on
127.0.0.1 and, in front of it, a :class:`LoopbackProxy` on another free port, run by its
own event loop in a daemon thread; the subclass's ``_handle`` forwards each request and
records what it served in :class:`Served`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

#: Headers a proxy must not pass on as they are.
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "server"}


@dataclass
class Served:
    """What the proxy passed on: per key, the ranges asked for, bytes sent, and statuses."""

    ranges: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    bytes: Counter[str] = field(default_factory=Counter)
    requests: Counter[str] = field(default_factory=Counter)  # every method, per key
    statuses: list[tuple[str, str, int]] = field(default_factory=list)  # method, key, status


class LoopbackProxy:
    """An aiohttp server on a free port of 127.0.0.1 whose ``_handle`` a subclass writes."""

    served: Served
    stall: Counter[str]
    drop: Counter[str]
    loop: asyncio.AbstractEventLoop
    runner: web.AppRunner | None
    session: aiohttp.ClientSession | None
    port: int
    thread: threading.Thread

    def _start_proxy(self, name: str) -> str:
        """Start the proxy's loop and server; its endpoint, ``http://127.0.0.1:<port>``."""
        self.loop = asyncio.new_event_loop()
        self.runner = None
        self.session = None
        self.port = 0
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        if not started.wait(10):
            raise RuntimeError(f"the {name} proxy did not start within 10 s")
        return f"http://127.0.0.1:{self.port}"

    def _stop_proxy(self) -> None:
        """Close the proxy's client session and server, then stop and join its loop."""

        async def stop() -> None:
            if self.session is not None:
                await self.session.close()
            if self.runner is not None:
                await self.runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{path:.*}", self._handle)
        self.runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        started.set()
        self.loop.run_forever()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    async def _cut_short(
        self, request: web.Request, response: web.StreamResponse, key: str, payload: bytes
    ) -> bool:
        """Whether a stall or drop counted down for ``key`` cut this answer short.

        If so, half of ``payload`` was sent (after a minute of silence, for a stall) and
        the connection closed.
        """
        stalled = self._take(self.stall, key)
        dropped = self._take(self.drop, key)
        if not (stalled or dropped):
            return False
        await response.prepare(request)
        if stalled:
            await asyncio.sleep(60)
        half = payload[: len(payload) // 2]
        await response.write(half)
        self.served.bytes[key] += len(half)
        assert request.transport is not None
        request.transport.close()
        return True

    @staticmethod
    def _take(faults: Counter[str], key: str) -> bool:
        """Whether a fault counted down for ``key`` applies to this request (and count it)."""
        if faults[key] > 0:
            faults[key] -= 1
            return True
        return False
