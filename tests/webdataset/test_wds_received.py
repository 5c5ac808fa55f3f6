"""``RemoteShard.received``: the body bytes that came over the wire, failed attempts included.

Each server here (aiohttp's file server, moto's S3 and the GCS emulator behind their
proxies) cuts one answer short: it sends half of the range asked for, then closes the
connection. The source asks again from its first missing byte; what the server sent in
all, the half of the failed attempt included, is what the shard counts.
"""

from __future__ import annotations

from pathlib import Path

from gcs_server import GCSServer
from http_server import ShardServer
from s3_server import S3Server

from detsamplers.loader._wds.remote._remote_reads import RemoteOptions, RemoteShard, stat_remote

NAME = "s/data-000001.tar"  # 20 samples


def read_whole(url: str, options: RemoteOptions) -> tuple[RemoteShard, bytes]:
    size, version = stat_remote(url, options)
    shard = RemoteShard(url, size, version, options)
    try:
        return shard, shard.fetch(0, size)
    finally:
        shard.close()


def local(shards: str) -> bytes:
    return (Path(shards).parent / NAME.removeprefix("s/")).read_bytes()


def test_a_dropped_http_answer_counts_the_bytes_it_sent_before_the_drop(
    server: ShardServer, shards: str
) -> None:
    server.drop = {NAME}
    shard, data = read_whole(f"{server.url}/{NAME}", RemoteOptions(retries=2, timeout=10.0))
    assert data == local(shards)
    assert (NAME, -1) in server.served.statuses  # it was cut short once
    assert shard.received == server.served.bytes[NAME] >= len(data)


def test_a_dropped_s3_answer_counts_the_bytes_it_sent_before_the_drop(
    s3: S3Server, shards: str
) -> None:
    s3.create_bucket("received")
    s3.put("received", NAME, local(shards))
    s3.reset()
    s3.drop[NAME] = 1
    options = RemoteOptions(retries=2, timeout=10.0, storage_options=s3.options)
    shard, data = read_whole(f"s3://received/{NAME}", options)
    assert data == local(shards)
    assert len(s3.served.ranges[NAME]) == 2  # cut short once, then asked again
    assert shard.received == s3.served.bytes[NAME] >= len(data)


def test_a_dropped_gcs_answer_counts_the_bytes_it_sent_before_the_drop(
    gcs: GCSServer, shards: str
) -> None:
    gcs.create_bucket("received")
    gcs.put("received", NAME, local(shards))
    gcs.reset()
    gcs.drop[NAME] = 1
    options = RemoteOptions(retries=2, timeout=10.0, storage_options=gcs.options)
    shard, data = read_whole(f"gs://received/{NAME}", options)
    assert data == local(shards)
    assert len(gcs.served.ranges[NAME]) == 2  # cut short once, then asked again
    assert shard.received == gcs.served.bytes[NAME] >= len(data)
