"""``python benchmarks/_http_server.py FOLDER``: serve FOLDER on 127.0.0.1 for the benchmarks.

aiohttp's static file route (``Range`` requests answered with 206) on a free port, printed
as the first line of output. Every GET is logged with its path and byte range;
``GET /__log__`` returns the log as JSON and clears it. Other requests (``HEAD``) are
logged as ``[method, path]``, which ``GET /__other__`` returns and clears. It runs in its
own process so that the server does not share the reader's interpreter lock.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Awaitable, Callable

from aiohttp import web

LOG: list[tuple[str, int, int]] = []
OTHER: list[tuple[str, str]] = []
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def main(folder: str) -> None:
    @web.middleware
    async def log(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/__log__":
            out = list(LOG)
            LOG.clear()
            return web.Response(text=json.dumps(out))
        if request.path == "/__other__":
            other = list(OTHER)
            OTHER.clear()
            return web.Response(text=json.dumps(other))
        if request.method != "GET":
            OTHER.append((request.method, request.path))
        response = await handler(request)
        path = os.path.join(folder, request.path.lstrip("/"))
        # A FileResponse says 200 before it is sent; a file that is not there becomes a 404
        # only then (a set index the benchmark never wrote, say), so it is not logged.
        if request.method == "GET" and response.status in (200, 206) and os.path.isfile(path):
            size = os.path.getsize(path)
            start = request.http_range.start or 0
            stop = request.http_range.stop
            LOG.append((request.path, start, size if stop is None else min(stop, size)))
        return response

    app = web.Application(middlewares=[log])
    app.router.add_static("/", folder)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    web.run_app(app, sock=sock, print=None, access_log=None)


if __name__ == "__main__":
    main(sys.argv[1])
