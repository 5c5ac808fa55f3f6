"""The run plan without a server: its laws, its inputs refused by name, and its command line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.__main__ import main
from detsamplers.loader import Network, SyntheticShards, plan_run
from detsamplers.loader._wds._plan_sets import Cluster, epoch_sets, located_sets
from detsamplers.loader._wds.index._set_index_file import SET_INDEX_NAME, encode_set
from detsamplers.loader._wds.index._shard_index_file import decode_index
from detsamplers.loader._wds.order._shard_order import ShardOrder
from detsamplers.loader._wds.read import _node_fetches

SMALL = SyntheticShards(32, 1 << 20, 100)


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 12), min_size=1, max_size=24),
    nodes=st.integers(1, 3),
    per_node=st.integers(1, 2),
    parts_per_rank=st.integers(0, 4),
    shuffle=st.booleans(),
    window=st.integers(0, 3),
    seed=st.integers(0, 9),
    batch_size=st.integers(1, 4),
    start_fraction=st.floats(0, 3),
)
def test_the_fast_ways_find_each_nodes_shards_as_locating_every_position_does(
    counts: list[int],
    nodes: int,
    per_node: int,
    parts_per_rank: int,
    shuffle: bool,
    window: int,
    seed: int,
    batch_size: int,
    start_fraction: float,
) -> None:
    counts[0] += 1
    total = sum(counts)
    world = nodes * per_node
    order = ShardOrder(counts, seed, shuffle, window, 0, world * parts_per_rank, "run")
    cluster = Cluster(nodes, per_node, batch_size, int(start_fraction * total))
    for epoch in range(cluster.start // total, cluster.start // total + 2):
        fast, _ = epoch_sets(order, epoch, cluster, total, False, None)
        slow = located_sets(order, epoch, cluster, total, None)
        assert [sorted(a.tolist()) for a in fast] == [sorted(b.tolist()) for b in slow]


@settings(max_examples=30, deadline=None)
@given(nodes=st.sampled_from([1, 2, 4]), parts_per_rank=st.integers(1, 4), epochs=st.integers(1, 3))
def test_with_parts_and_room_in_the_cache_every_shard_is_downloaded_once_a_run(
    nodes: int, parts_per_rank: int, epochs: int
) -> None:
    plan = plan_run(
        synthetic=SMALL, nodes=nodes, batch_size=4, parts=nodes * parts_per_rank, epochs=epochs
    )
    downloaded = sum(sum(n.shards) for n in plan.nodes)
    assert SMALL.shards <= downloaded <= SMALL.shards + nodes * parts_per_rank
    assert all(sum(n.shard_bytes[1:]) == 0 for n in plan.nodes)


def test_a_cache_below_a_nodes_shards_evicts_and_downloads_again_every_epoch() -> None:
    plan = plan_run(synthetic=SMALL, nodes=1, batch_size=4, cache_limit=4 << 20, epochs=2)
    node = plan.nodes[0]
    assert node.shards == [32, 32]  # the shards are used in the order of the last epoch's
    # the reader pins the batch's shard and 8 (``prefetch``) ahead: the folder grows to 9
    assert node.working_set_shards == 9 and node.high_water == 9 << 20
    assert node.evictions == 64 - 9
    assert plan.over_limit() == [
        f"node 0: the working set of 9 shards ({9 << 20} bytes) exceeds cache_limit="
        f"{4 << 20}: the folder grows to about {9 << 20} bytes"
    ]
    roomier = plan_run(
        synthetic=SMALL, nodes=1, batch_size=4, cache_limit=4 << 20, epochs=2, prefetch=2
    ).nodes[0]
    assert roomier.shards == [32, 32] and roomier.working_set_shards == 3
    assert roomier.evictions == 64 - 4 and roomier.high_water == 4 << 20


def test_the_network_model_gives_the_first_batch_time_and_the_cost() -> None:
    network = Network(bandwidth=1e8, rtt=0.01, requests_per_second=100, price_per_gb=0.1)
    plan = plan_run(synthetic=SMALL, nodes=2, batch_size=4, parts=2, network=network)
    node = plan.nodes[0]
    assert node.first_batch_seconds == pytest.approx(
        0.01 + node.first_batch_requests / 100 + node.first_batch_bytes / 1e8
    )
    assert plan.cost() == pytest.approx(plan.total_bytes() / 1e9 * 0.1)
    assert plan.total_bytes() == 32 << 20


@pytest.mark.parametrize(
    "arguments,error,match",
    [
        ({"nodes": 3, "parts": 8}, ValueError, "parts should be a multiple of the run's world"),
        ({"parts": 8, "resume_at": 5, "resume_nodes": 3}, ValueError, "resume's world size 3"),
        ({"cache_limit": 1000}, ValueError, "cache_limit should hold at least the largest"),
        ({"nodes": 0}, ValueError, "nodes"),
        ({"nodes": "2"}, TypeError, "nodes"),
        ({"batch_size": True}, TypeError, "batch_size"),
        ({"shuffle_shards": 1}, TypeError, "shuffle_shards"),
        ({"network": {"bandwidth": 1}}, TypeError, "network should be a Network"),
        ({"synthetic": "32 shards"}, TypeError, "synthetic should be a SyntheticShards"),
    ],
)
def test_bad_arguments_are_refused_naming_the_argument(
    arguments: dict[str, Any], error: type[Exception], match: str
) -> None:
    base: dict[str, Any] = {"synthetic": SMALL, "nodes": 2, "batch_size": 4}
    with pytest.raises(error, match=match):
        plan_run(**{**base, **arguments})


@pytest.mark.parametrize(
    "arguments,error,match",
    [
        ({"bandwidth": 0}, ValueError, "bandwidth should be a finite number above 0"),
        ({"bandwidth": float("nan")}, ValueError, "bandwidth"),
        ({"bandwidth": 1, "rtt": -1}, ValueError, "rtt should be a finite number of at least 0"),
        ({"bandwidth": "fast"}, TypeError, "bandwidth should be a number"),
    ],
)
def test_a_bad_network_is_refused_naming_the_argument(
    arguments: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        Network(**arguments)


@pytest.mark.parametrize(
    "arguments,match",
    [
        ({"shards": 10**9}, "shards should be at most"),
        ({"samples_per_shard": 2000}, "samples_per_shard should leave each sample at least"),
        ({"spread": 1.0}, "spread should be below 1"),
        ({"shard_bytes": -5}, "shard_bytes"),
    ],
)
def test_a_synthetic_description_no_tar_could_have_is_refused(
    arguments: dict[str, Any], match: str
) -> None:
    base: dict[str, Any] = {"shards": 4, "shard_bytes": 1 << 20, "samples_per_shard": 100}
    with pytest.raises(ValueError, match=match):
        SyntheticShards(**{**base, **arguments})


def _set_index(folder: Path, names: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SET_INDEX_NAME
    path.write_bytes(encode_set([(name, 4 << 20, '"e"', 50) for name in names]))
    return path


def test_a_set_index_gives_the_shards_and_its_fetch_per_rank(tmp_path: Path) -> None:
    path = _set_index(tmp_path, [f"d-{i}.tar" for i in range(8)])
    plan = plan_run(set_index=str(path), nodes=2, ranks_per_node=2, batch_size=4, parts=4)
    assert plan.shard_count == 8 and plan.dataset_bytes == 8 * (4 << 20)
    assert plan.nodes[0].index_bytes == 2 * path.stat().st_size
    assert plan.nodes[0].index_requests == 2


def test_a_set_index_from_another_folder_than_the_urls_is_refused(tmp_path: Path) -> None:
    path = _set_index(tmp_path / "other", ["d-0.tar"])
    with pytest.raises(ValueError, match="set_index should lie in the folder of urls"):
        plan_run(str(tmp_path / "d-0.tar"), set_index=str(path), nodes=1, batch_size=4)


@pytest.mark.timeout(20)
def test_a_fifo_or_dev_zero_as_set_index_is_refused_by_name_without_reading(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for hostile in (str(fifo), "/dev/zero"):
        with pytest.raises(ValueError, match=f"set_index should be a regular file.*{hostile}"):
            plan_run(set_index=hostile, nodes=1, batch_size=4)


def test_a_huge_or_garbage_set_index_is_refused_by_name(tmp_path: Path) -> None:
    garbage = tmp_path / SET_INDEX_NAME
    garbage.write_bytes(b"\0" * 4096)
    with pytest.raises(ValueError, match=r"set index|set_index"):
        plan_run(set_index=str(garbage), nodes=1, batch_size=4)
    huge = tmp_path / "huge" / SET_INDEX_NAME
    huge.parent.mkdir()
    with open(huge, "wb") as handle:  # sparse: no disk used
        handle.truncate(1 << 40)
    with pytest.raises(ValueError, match="set_index should be at most"):
        plan_run(set_index=str(huge), nodes=1, batch_size=4)


def test_the_plan_command_prints_the_library_calls_plan_as_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["plan", "--shards", "32", "--shard-bytes", str(1 << 20), "--samples-per-shard"]
    args += ["100", "--nodes", "2", "--batch-size", "4", "--parts", "4", "--epochs", "2"]
    assert main([*args, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    plan = plan_run(synthetic=SMALL, nodes=2, batch_size=4, parts=4, epochs=2)
    assert printed["totals"]["bytes"] == plan.total_bytes()
    assert printed["totals"]["bytes_per_epoch"] == [32 << 20, 0]
    assert main(args) == 0
    assert "egress per epoch over the dataset: 1.000x, 0.000x" in capsys.readouterr().out


def test_the_plan_command_refuses_a_bad_argument_with_its_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["plan", "--shards", "32", "--shard-bytes", str(1 << 20), "--samples-per-shard"]
    args += ["100", "--nodes", "3", "--batch-size", "4", "--parts", "4", "--bandwidth", "0"]
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert "bandwidth should be a finite number above 0" in capsys.readouterr().err


def test_the_order_memory_is_the_arrays_a_rank_holds() -> None:
    plan = plan_run(synthetic=SyntheticShards(1000, 1 << 20, 100), nodes=2, batch_size=4)
    order = ShardOrder([100] * 1000, 0, True, 0)
    order.locate(np.arange(4, dtype=np.int64))
    # the counts, the epoch's order and its starts: 8 bytes a shard each, at least
    assert plan.order_bytes_per_rank >= 3 * 8 * 1000


@settings(max_examples=40, deadline=None)
@given(
    shards=st.integers(1, 12),
    samples=st.integers(1, 9),
    nodes=st.sampled_from([1, 2, 4]),
    parts_per_node=st.integers(1, 6),
    seed=st.integers(0, 9),
)
def test_a_synthetic_epochs_byte_ranges_over_all_nodes_add_up_to_the_dataset(
    shards: int, samples: int, nodes: int, parts_per_node: int, seed: int
) -> None:
    # The assumed layout (NOTE [ plan inputs ]): equal samples back to back, so the nodes'
    # byte ranges of a shard cut between them partition it; nodes must divide the samples
    # (else tail samples move between nodes) and no first batch reads samples by ranges.
    synthetic = SyntheticShards(shards * nodes, 1 << 16, samples, seed=seed)
    parts = nodes * parts_per_node

    def plan(gap: int) -> Any:
        with pytest.MonkeyPatch.context() as patched:  # ranges closer than ``gap`` merged
            patched.setattr(_node_fetches, "RANGE_GAP", gap)
            return plan_run(
                synthetic=synthetic, nodes=nodes, batch_size=2, parts=parts, seed=seed,
                prefetch=10**6,
            )  # fmt: skip

    exact, merged = plan(0), plan(_node_fetches.RANGE_GAP)
    if exact.samples < parts:  # no part of a sample: every shard whole
        return
    assert sum(n.shard_bytes[0] for n in exact.nodes) == exact.dataset_bytes
    assert sum(sum(n.shards) for n in exact.nodes) >= synthetic.shards
    # Merging ranges less than RANGE_GAP apart saves a request a merge, for under
    # RANGE_GAP bytes more each (NOTE [ node fetches ]).
    for alone, joined in zip(exact.nodes, merged.nodes, strict=True):
        saved = alone.shard_requests[0] - joined.shard_requests[0]
        extra = joined.shard_bytes[0] - alone.shard_bytes[0]
        assert saved >= 0 and 0 <= extra <= saved * _node_fetches.RANGE_GAP
        assert extra < saved * _node_fetches.RANGE_GAP or saved == 0


def test_a_synthetic_shard_read_in_part_costs_its_samples_share_of_its_bytes() -> None:
    # 2 shards of 3 samples of 4096 bytes, 3 nodes' parts of 2 samples: the middle part
    # cuts both shards, so its node fetches 2 ranges of one sample each; the others one
    # range of 2 samples each.
    synthetic = SyntheticShards(2, 3 << 12, 3)
    plan = plan_run(synthetic=synthetic, nodes=3, batch_size=1, parts=3, shuffle_shards=False)
    assert [n.shard_bytes[0] for n in plan.nodes] == [2 << 12] * 3
    assert sorted(n.shard_requests[0] for n in plan.nodes) == [1, 1, 2]
    assert sorted(n.shards[0] for n in plan.nodes) == [1, 1, 2]


def test_a_set_index_plans_the_byte_ranges_the_urls_plan(tmp_path: Path) -> None:
    import webdataset as wds

    rng = np.random.default_rng(0)
    with wds.ShardWriter(str(tmp_path / "d-%d.tar"), maxcount=7, verbose=0) as writer:
        for i in range(40):  # samples of different sizes: ranges follow the offsets
            writer.write({"__key__": f"k{i:03d}", "bin": rng.bytes(int(rng.integers(1, 5000)))})
    urls = sorted(str(p) for p in tmp_path.glob("d-*.tar"))
    assert main(["index", *urls]) == 0
    files = [Path(u + ".index.npz").read_bytes() for u in urls]
    entries = [
        (Path(u).name, Path(u).stat().st_size, None, len(decode_index(f, u)[0]))
        for u, f in zip(urls, files, strict=True)
    ]
    options: dict[str, Any] = {"nodes": 2, "ranks_per_node": 2, "batch_size": 3, "parts": 8}
    by_urls = plan_run(urls, **options)
    whole = plan_run(urls, **{**options, "parts": 0})
    assert sum(n.shard_bytes[0] for n in by_urls.nodes) < sum(n.shard_bytes[0] for n in whole.nodes)
    for embedded in (files, None):  # the index files in the set index, or beside the shards
        (tmp_path / SET_INDEX_NAME).write_bytes(encode_set(entries, embedded))
        by_set = plan_run(set_index=str(tmp_path / SET_INDEX_NAME), **options)
        assert [n.shard_bytes for n in by_set.nodes] == [n.shard_bytes for n in by_urls.nodes]
        assert [n.shard_requests for n in by_set.nodes] == [n.shard_requests for n in by_urls.nodes]
