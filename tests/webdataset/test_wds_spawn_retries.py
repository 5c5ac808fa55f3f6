"""A spawned DataLoader worker builds its own s3fs/gcsfs, one attempt per call as in the parent.

The worker unpickles the source (which holds no filesystem) and builds each filesystem
again, through the same function as the parent (``remote_fs``), which leaves gcsfs
without its own retry wrapper (6 attempts, 1 to 32 s apart) and s3fs with one attempt:
so the source's ``retries`` is the count in a worker too. Here a set index that embeds
no index files makes the worker fetch a shard's own index file through the filesystem's
request method (gcsfs's ``_request``, s3fs's ``_call_s3``), which the server answers 503
twice: with ``retries=1`` that is exactly two requests, then the error naming the shard;
gcsfs's or s3fs's own retries would have read it on a third.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from gcs_server import GCSServer
from s3_server import S3Server
from wds_helpers import COUNTS, PATTERN, make

from detsamplers.__main__ import main
from detsamplers.loader import WebDataLoader
from detsamplers.loader._wds.index import _set_index_file

INDEX_FILES = [f"s/data-{i:06d}.tar.index.npz" for i in range(len(COUNTS))]


def index_without_embedding(url: str, argv: list[str]) -> None:
    """``python -m detsamplers index`` of ``url`` writing a set index that embeds nothing."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_set_index_file, "EMBED_LIMIT", 0)
        assert main(["index", url, *argv]) == 0


def first_batch_in_a_spawned_worker(url: str, options: dict[str, Any], tmp_path: Path) -> None:
    source = make(
        url, index_dir=str(tmp_path / "cache"), storage_options=options, retries=1, timeout=5.0
    )
    loader = WebDataLoader(source, 1, multiprocessing_context="spawn", timeout=120)
    folder = re.escape(url.rsplit("/", 1)[0])
    with pytest.raises(OSError, match=rf"shard '{folder}/data-0000\d\d\.tar' failed 2 times"):
        next(iter(loader))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_spawned_worker_makes_retries_plus_one_requests_to_gcs(
    gcs: GCSServer, shards: str, tmp_path: Path
) -> None:
    gcs.create_bucket("spawned")
    for i in range(len(COUNTS)):
        name = f"data-{i:06d}.tar"
        gcs.put("spawned", f"s/{name}", (Path(shards).parent / name).read_bytes())
    url = f"gs://spawned/s/{PATTERN}"
    index_without_embedding(url, ["--endpoint-url", gcs.endpoint, "--storage-option", "token=anon"])
    gcs.reset()
    for name in INDEX_FILES:
        gcs.fail_503[name] = 2
    first_batch_in_a_spawned_worker(url, gcs.options, tmp_path)
    asked = [gcs.served.requests[name] for name in INDEX_FILES if gcs.served.requests[name]]
    assert asked == [2]  # the first index file the worker read: retries + 1, then the error


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_spawned_worker_makes_retries_plus_one_requests_to_s3(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    s3.create_bucket("spawned")
    for i in range(len(COUNTS)):
        name = f"data-{i:06d}.tar"
        s3.put("spawned", f"s/{name}", (Path(shards).parent / name).read_bytes())
    url = f"s3://spawned/s/{PATTERN}"
    credentials = ["--storage-option", "key=testing", "--storage-option", "secret=testing"]
    index_without_embedding(url, ["--endpoint-url", s3.endpoint, *credentials])
    s3.reset()
    for name in INDEX_FILES:
        s3.fail_503[name] = 2
    first_batch_in_a_spawned_worker(url, s3.options, tmp_path)
    asked = [s3.served.requests[name] for name in INDEX_FILES if s3.served.requests[name]]
    assert asked == [2]
