"""A real nginx on 127.0.0.1, its own process with a temporary config, counting bytes served.

The access log records each request's method, URI, status and ``$body_bytes_sent``, so a
test counts what left the server. ``nginx`` comes from Debian's ``nginx-light`` (``make
nginx`` installs it; CI runs that). Without it a test skips, unless ``CI`` is set: then
it fails, since CI must have it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pytest

CONFIG = """
daemon off;
master_process off;
worker_processes 1;
pid {run}/nginx.pid;
error_log {run}/error.log warn;
events {{ worker_connections 512; }}
http {{
    log_format bytes '$request_method $uri $status $body_bytes_sent';
    access_log {run}/access.log bytes;
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"""


#: The path of the marker requests :meth:`Nginx.lines` waits for (never a file).
_SETTLED = "__settled__"


def nginx_binary() -> str:
    """The nginx executable, or a skip (a failure under CI) naming how to install it."""
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.path.exists(p)), None
    )
    if found is None:
        reason = "nginx is not installed: apt-get install -y nginx-light (or make nginx)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run the nginx tests")
        pytest.skip(reason)
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Nginx:
    """nginx serving ``root`` at ``http://127.0.0.1:<port>/``; :meth:`served` reads its log."""

    def __init__(self, root: Path, run: Path) -> None:
        binary = nginx_binary()
        run.mkdir(parents=True, exist_ok=True)
        self.run, self.root = run, root
        self.port = _free_port()
        config = run / "nginx.conf"
        config.write_text(CONFIG.format(run=run, port=self.port, root=root))
        self.log = run / "access.log"
        self.process = subprocess.Popen(
            [binary, "-p", str(run), "-c", str(config), "-e", str(run / "stderr.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    stderr = run / "stderr.log"
                    errors = stderr.read_text() if stderr.exists() else ""
                    self.close()
                    raise RuntimeError(f"nginx did not start: {errors}") from None
                time.sleep(0.05)

    def mark(self) -> int:
        """Where the log ends once every request answered before is in it: :meth:`served`
        counts from here.

        nginx may write the line of a request the client already has after a loaded moment,
        so the log is first settled as :meth:`lines` does (a marker request waited for); a
        line written late would otherwise count in the next :meth:`served`.
        """
        self.lines(self.log.stat().st_size if self.log.exists() else 0)
        return self.log.stat().st_size

    def lines(self, since: int) -> list[str]:
        """The log's lines since ``since``, once every request answered before is in it.

        nginx writes a request's line when it ends, which a loaded machine can delay past
        the moment the client has the last byte: a request for a marker path (answered 404,
        by the same single worker, after the requests before it) is waited for in the log,
        and its lines are left out.
        """
        token = f"/{_SETTLED}/{uuid.uuid4().hex}"
        with contextlib.suppress(urllib.error.HTTPError):  # the 404 expected
            urllib.request.urlopen(self.url + token, timeout=30).close()
        deadline = time.monotonic() + 30
        while True:
            with open(self.log, "rb") as handle:
                handle.seek(since)
                lines = handle.read().decode().splitlines()
            if any(token in line for line in lines) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        return [line for line in lines if f"/{_SETTLED}/" not in line]

    def served(self, since: int = 0, suffix: str = ".tar") -> tuple[int, int]:
        """Bytes sent and ``GET`` requests answered for files ending in ``suffix`` since ``since``.

        (Building a source sends a ``HEAD`` per shard, no body, to check its index.)
        """
        lines = self.lines(since)
        sent, requests = 0, 0
        for line in lines:
            method, uri, _status, size = line.split(" ")
            if uri.endswith(suffix) and method == "GET":
                sent += int(size)
                requests += 1
        return sent, requests

    def per_file(self, since: int = 0) -> Counter[str]:
        """Bytes sent per file name since ``since``."""
        lines = self.lines(since)
        out: Counter[str] = Counter()
        for line in lines:
            _method, uri, _status, size = line.split(" ")
            out[uri.rsplit("/", 1)[-1]] += int(size)
        return out

    def close(self) -> None:
        """Stop nginx (its process only)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
