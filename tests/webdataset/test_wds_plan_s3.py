"""The run plan against moto's S3 server: its shard and index bytes and GETs are what S3 serves.

16 shards of 2-8 KB samples and their set index (``python -m detsamplers index``, which
embeds the shards' index files) in a bucket of the session's moto server, behind the
counting proxy of s3_server.py. Each node is a cache folder of its own; its ranks are built
in one process and share it, as the ranks of a node do. Each rank's source fetches the set
index once when it is built, and its node's cache fetches the shards (whole, or the byte
ranges of the shards its ranks read in part). The proxy counts, per key, the ``GetObject``
requests and the body bytes it passed on; the plan must give exactly those for the shards
and for the set index. Any other request of a shard (a ``HeadObject``, a listing) would be
billed but not planned: the test checks there is none. Every shard here is under one
request's step (``download_step``: at least 1 MiB), so a whole shard is one GET; the request
count of a larger shard is pinned by ``download_ranges``' own tests and the plan's use of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server
from wds_helpers import write_small_samples

from detsamplers.__main__ import main
from detsamplers.loader import WebDatasetSource, plan_run

SHARDS = 16
BUCKET = "plan"
SET_INDEX = "s/detsamplers-set.index.npz"

ORDERS: list[dict[str, Any]] = [
    {"parts": 0, "shuffle_shards": False},
    {"parts": 0, "shuffle_window": 4},
    {"parts": 8},
    {"parts": 8, "shuffle_block_shards": 2},
]
IDS = ["tar", "window", "parts", "parts-blocks"]


@pytest.fixture(scope="module")
def bucket(s3_session: S3Server, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """The shards' URL pattern in the bucket, and their bytes."""
    folder = tmp_path_factory.mktemp("plan-s3") / "s"
    write_small_samples(folder, SHARDS)
    s3_session.create_bucket(BUCKET)
    for path in sorted(folder.glob("*.tar")):
        s3_session.put(BUCKET, f"s/{path.name}", path.read_bytes())
    urls = f"s3://{BUCKET}/s/d-{{00..{SHARDS - 1:02d}}}.tar"
    argv = ["index", urls, "--endpoint-url", s3_session.endpoint, "--storage-option"]
    assert main([*argv, "key=testing", "--storage-option", "secret=testing"]) == 0
    return urls, sum(p.stat().st_size for p in folder.glob("*.tar"))


def _counted(s3: S3Server) -> dict[str, int]:
    """What the proxy served of the bucket's shards and set index since its reset."""
    served = s3.served
    shards = [k for k in served.requests if k.startswith("s/d-") and k.endswith(".tar")]
    gets = [(m, k) for m, k, status in served.statuses if m == "GET" and status in (200, 206)]
    return {
        "shard_bytes": sum(served.bytes[k] for k in shards),
        "shard_gets": sum(1 for _, k in gets if k in shards),
        "shard_other": sum(served.requests[k] - len(served.ranges[k]) for k in shards),
        "index_bytes": served.bytes[SET_INDEX],
        "index_gets": len(served.ranges[SET_INDEX]),
    }


@pytest.mark.parametrize("nodes,per_node", [(1, 1), (2, 1), (4, 1), (2, 2)])
@pytest.mark.parametrize("order", ORDERS, ids=IDS)
def test_an_epochs_planned_shard_and_index_bytes_and_gets_are_what_s3_serves(
    s3: S3Server,
    bucket: tuple[str, int],
    tmp_path: Path,
    nodes: int,
    per_node: int,
    order: dict[str, Any],
) -> None:
    urls, data = bucket
    world = nodes * per_node
    plan = plan_run(
        urls, storage_options=s3.options, nodes=nodes, ranks_per_node=per_node, batch_size=8,
        seed=5, **order,
    )  # fmt: skip
    s3.reset()  # the plan's own index fetches are not the run's
    read = 0
    for rank in range(world):
        source = WebDatasetSource(
            urls, seed=5, batch_size=8, decode=(), collate_fn=list, world_size=world, rank=rank,
            repeat=False, cache_dir=str(tmp_path / f"node{rank // per_node}"),
            storage_options=s3.options, **order,
        )  # fmt: skip
        read += sum(len(batch) for batch in source)
    got = _counted(s3)
    assert read == plan.samples
    assert got["shard_bytes"] == sum(n.shard_bytes[0] for n in plan.nodes)
    assert got["shard_gets"] == sum(n.shard_requests[0] for n in plan.nodes)
    assert got["index_bytes"] == sum(n.index_bytes for n in plan.nodes) > 0
    assert got["index_gets"] == sum(n.index_requests for n in plan.nodes) == world
    assert got["shard_other"] == 0  # no HEAD or listing of a shard: GETs are the bill
    if order["parts"] == 0:  # every shard whole, once a node that reads it
        assert got["shard_bytes"] >= data
    else:  # byte ranges: under the dataset once a node, never above it
        assert got["shard_bytes"] <= data


def test_storage_options_that_are_no_mapping_are_refused_naming_them() -> None:
    with pytest.raises(TypeError, match="storage_options should be a mapping"):
        plan_run(urls="s3://b/s/d-00.tar", nodes=1, batch_size=1, storage_options=[("k", 1)])  # type: ignore[arg-type]


def test_the_plan_command_with_an_endpoint_and_credentials_in_the_environment_plans_what_s3_serves(
    s3: S3Server,
    bucket: tuple[str, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    urls, _ = bucket
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # as a user's shell holds them
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    argv = ["plan", urls, "--endpoint-url", s3.endpoint, "--nodes", "2", "--ranks-per-node", "2"]
    assert main([*argv, "--batch-size", "8", "--seed", "5", "--parts", "8", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert s3.served.bytes[SET_INDEX] > 0  # the command read the index through the endpoint
    s3.reset()
    for rank in range(4):
        source = WebDatasetSource(
            urls, seed=5, batch_size=8, decode=(), collate_fn=list, world_size=4, rank=rank,
            repeat=False, cache_dir=str(tmp_path / f"node{rank // 2}"), parts=8,
            storage_options=s3.options,
        )  # fmt: skip
        assert sum(len(batch) for batch in source) > 0
    got = _counted(s3)
    nodes = plan["nodes"]
    assert got["shard_bytes"] == sum(n["shard_bytes"][0] for n in nodes) > 0
    assert got["shard_gets"] == sum(n["shard_requests"][0] for n in nodes)
    assert got["index_bytes"] == sum(n["index_bytes"] for n in nodes) > 0
    assert got["index_gets"] == sum(n["index_requests"] for n in nodes) == 4


def test_the_plan_command_refuses_a_storage_option_without_a_value_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "s3://b/s/d-00.tar", "--nodes", "1", "--batch-size", "1"]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--storage-option", "anon"])
    assert exit_.value.code == 2
    assert "--storage-option should be KEY=VALUE, but got 'anon'" in capsys.readouterr().err
