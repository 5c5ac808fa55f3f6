"""Fixtures for the webdataset source tests: real shards, and a real HTTP server of them."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from gcs_server import GCSServer
from http_server import ShardServer
from nginx_server import Nginx
from s3_server import S3Server
from wds_helpers import write_shards, write_small_samples


@pytest.fixture(scope="session")
def shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The brace pattern of 7 shards of 3 to 20 samples (see wds_helpers.COUNTS)."""
    return write_shards(tmp_path_factory.mktemp("shards"))


@pytest.fixture(scope="session")
def http_root(shards: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder served over HTTP, holding a copy of the shards under ``s/``."""
    root = tmp_path_factory.mktemp("served")
    shutil.copytree(Path(shards).parent, root / "s", ignore=shutil.ignore_patterns("*.json"))
    return root


@pytest.fixture(scope="session")
def http_server(http_root: Path) -> Iterator[ShardServer]:
    """An aiohttp server of ``http_root`` on 127.0.0.1, a free port, for the session."""
    server = ShardServer(http_root)
    yield server
    server.close()


@pytest.fixture(scope="session")
def nginx_small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nginx, int]]:
    """One nginx for the session serving ``s/d-00.tar`` to ``s/d-15.tar`` (``write_small_samples``),
    with their sample count. The modules that count its bytes share it (each with its own
    ``index_dir``) and read from a :meth:`Nginx.mark` of their own; none changes its files.
    """
    root = tmp_path_factory.mktemp("nginx-small")
    total = write_small_samples(root / "s", 16)
    nginx = Nginx(root, tmp_path_factory.mktemp("nginx-small-run"))
    try:
        yield nginx, total
    finally:
        nginx.close()


@pytest.fixture
def server(http_server: ShardServer) -> ShardServer:
    """The session's server with its log cleared and no fault switched on."""
    http_server.reset()
    return http_server


@pytest.fixture(scope="session")
def s3_session() -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1 behind a counting proxy (s3_server.py), for the session.

    Skipped when moto or s3fs is not installed (the ``s3`` extra installs them).
    """
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    server = S3Server()
    yield server
    server.close()


@pytest.fixture
def s3(s3_session: S3Server) -> S3Server:
    """The session's S3 server with its log cleared and no fault switched on."""
    s3_session.reset()
    return s3_session


@pytest.fixture(scope="session")
def gcs_session() -> Iterator[GCSServer]:
    """gcp-storage-emulator on 127.0.0.1 behind a counting proxy (gcs_server.py), for the session.

    Skipped when the emulator or gcsfs is not installed (the ``dev`` extra installs them).
    """
    pytest.importorskip("gcp_storage_emulator")
    pytest.importorskip("gcsfs")
    server = GCSServer()
    yield server
    server.close()


@pytest.fixture
def gcs(gcs_session: GCSServer) -> GCSServer:
    """The session's GCS server with its log cleared and no fault switched on."""
    gcs_session.reset()
    return gcs_session
