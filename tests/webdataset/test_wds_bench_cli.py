"""``python -m detsamplers bench --shards`` over HTTP: remote shards from a real server."""

from __future__ import annotations

import json

import pytest
from http_server import ShardServer
from wds_helpers import PATTERN, TOTAL

from detsamplers.__main__ import main


def test_bench_measures_remote_shards_beside_plain_webdataset(
    server: ShardServer, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = f"{server.url}/s/{PATTERN}"
    code = main(["bench", "--no-progress", "--shards", urls, "--workers", "0",
                 "--batch-size", "4", "--batches", "5", "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = {row["name"]: row for row in json.loads(out)["rows"]}
    deep = int(TOTAL * 0.9) // 4 * 4
    assert list(rows) == [
        "WebDatasetSource, num_workers=0: samples/s",
        "webdataset.WebDataset, num_workers=0: samples/s",
        f"WebDatasetSource: first batch after a resume at sample {deep}",
        f"webdataset: first batch after a restart at sample {deep}",
    ]
    assert rows["WebDatasetSource, num_workers=0: samples/s"]["samples"] == 20
    assert rows["webdataset.WebDataset, num_workers=0: samples/s"]["samples"] == 20
    # Both pipelines read every shard from the server over HTTP.
    served = server.served.bytes
    assert all(served[f"s/data-{k:06d}.tar"] > 0 for k in range(7))
    # Bytes received over sockets (ours) or read from curl's pipe (webdataset) are counted.
    assert sum(row["bytes_read"] for row in rows.values()) >= sum(served.values())
