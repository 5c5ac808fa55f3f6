"""A mixture's plan from synthetic shard sets, its first batch and cost, and bad input refused.

The synthetic plan is checked against real tar shards written with the same sizes and counts
(each sample one 1,024- or 2,048-byte member, one 512-byte end block), indexed as the mixture
indexes them (NOTE [ synthetic mixture plan ]).
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.__main__ import main
from detsamplers.loader import Network, SyntheticShards, plan_mixture

#: Per set: shards, samples per shard, bytes of each sample's member.
SETS = ((6, 4, 1024), (4, 3, 2048))
SYNTHETIC = [SyntheticShards(n, m * (512 + d) + 512, m) for n, m, d in SETS]
#: A network with round numbers, for hand computations.
NET = Network(
    bandwidth=4096, rtt=0.5, requests_per_second=2, price_per_gb=2, price_per_1000_gets=500
)


def write_tar(path: Path, samples: int, data: int) -> None:
    """``samples`` samples of one ``data``-byte member each, then one end block."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(samples):
            member = tarfile.TarInfo(f"{path.stem}-{i}.bin")
            member.size = data
            tar.addfile(member, io.BytesIO(bytes(range(256)) * (data // 256)))
    path.write_bytes(buffer.getvalue()[: samples * (512 + data)] + bytes(512))


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], str]:
    root = tmp_path_factory.mktemp("synthetic-mix")
    urls = []
    for k, (shards, samples, data) in enumerate(SETS):
        for shard in range(shards):
            write_tar(root / f"s{k}-{shard}.tar", samples, data)
        urls.append(str(root / f"s{k}-{{0..{shards - 1}}}.tar"))
    return urls, str(tmp_path_factory.mktemp("synthetic-mix-index"))


def figures(plan: Any) -> list[tuple[Any, ...]]:
    return [(n.shards, n.shard_requests, n.first_batch_requests) for n in plan.nodes]


def test_the_real_shards_have_the_synthetic_descriptions_sizes_and_counts(
    real: tuple[list[str], str],
) -> None:
    urls, index = real
    plan = plan_mixture(urls, [1, 1], nodes=1, batch_size=1, index_dir=index)
    synthetic = plan_mixture(None, [1, 1], synthetic=SYNTHETIC, nodes=1, batch_size=1)
    assert plan.dataset_bytes == synthetic.dataset_bytes == 6 * 6656 + 4 * 8192
    assert plan.samples == synthetic.samples == 6 * 4 + 4 * 3
    assert plan.shard_count == synthetic.shard_count == 10


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.integers(1, 2),
    per_node=st.integers(1, 2),
    parts=st.sampled_from([0, 4, [4, 0], 12]),
    blocks=st.sampled_from([0, 2]),
    shuffle=st.booleans(),
    batch_size=st.integers(1, 3),
    num_workers=st.integers(0, 2),
    epochs=st.integers(1, 2),
    seed=st.integers(0, 2**31),
)
def test_a_synthetic_mixtures_plan_equals_the_plan_of_real_shards_of_the_same_sizes(
    real: tuple[list[str], str],
    nodes: int,
    per_node: int,
    parts: Any,
    blocks: int,
    shuffle: bool,
    batch_size: int,
    num_workers: int,
    epochs: int,
    seed: int,
) -> None:
    urls, index = real
    arguments: dict[str, Any] = dict(
        nodes=nodes, ranks_per_node=per_node, batch_size=batch_size, num_workers=num_workers,
        parts=parts, shuffle_block_shards=blocks, shuffle_shards=shuffle, epochs=epochs,
        seed=seed, network=NET,
    )  # fmt: skip
    got = plan_mixture(urls, [2, 1], index_dir=index, **arguments)
    synthetic = plan_mixture(None, [2, 1], synthetic=SYNTHETIC, **arguments)
    # the same shards and GETs per node and pass, and the same first batch's GETs
    assert figures(synthetic) == figures(got)
    for ours, theirs in zip(synthetic.nodes, got.nodes, strict=True):
        # bytes: equal for shards downloaded whole; a shard read by ranges may differ by its
        # 512-byte end block, which the synthetic layout spreads over the samples
        for a, b, shards in zip(ours.shard_bytes, theirs.shard_bytes, ours.shards, strict=True):
            assert abs(a - b) <= 512 * shards
            if parts == 0:  # no shard cut by parts: every shard downloaded whole
                assert a == b
        assert ours.first_batch_seconds == pytest.approx(
            NET.rtt + ours.first_batch_requests / 2 + ours.first_batch_bytes / 4096
        )
    assert synthetic.cost() == pytest.approx(
        synthetic.total_bytes() / 1e9 * 2 + synthetic.total_requests() / 1000 * 500
    )


def test_a_first_batch_of_whole_shards_takes_the_time_and_costs_what_a_hand_computation_gives() -> (
    None
):
    # one set of 2 shards of 8,192 bytes, 4 samples each, in order: positions 0 and 1 are
    # in shard 0, fetched whole (one shard, within prefetch) in one GET
    plan = plan_mixture(
        None, [1], synthetic=[SyntheticShards(2, 8192, 4)], nodes=1, batch_size=2,
        shuffle_shards=False, network=NET,
    )  # fmt: skip
    node = plan.nodes[0]
    assert (node.first_batch_bytes, node.first_batch_requests) == (8192, 1)
    assert node.first_batch_seconds == pytest.approx(0.5 + 1 / 2 + 8192 / 4096)  # 3 s
    assert (node.shard_bytes, node.shard_requests) == ([16384], [2])
    assert plan.cost() == pytest.approx(16384 / 1e9 * 2 + 2 / 1000 * 500)


def test_a_first_batch_read_by_sample_ranges_takes_the_time_and_costs_what_a_hand_computation_gives() -> (  # noqa: E501
    None
):
    # the batch covers both shards; prefetch=1 and read_ahead below a shard's size: each
    # shard's 4 samples read by ranges of their own (2,048 bytes each, plus a 512-byte
    # header), then both shards downloaded whole for the rest of the pass
    plan = plan_mixture(
        None, [1], synthetic=[SyntheticShards(2, 8192, 4)], nodes=1, batch_size=8,
        shuffle_shards=False, prefetch=1, read_ahead=4096, network=NET,
    )  # fmt: skip
    node = plan.nodes[0]
    first = 2 * (4 * 2048 + 512)
    assert (node.first_batch_bytes, node.first_batch_requests) == (first, 8)
    assert node.first_batch_seconds == pytest.approx(0.5 + 8 / 2 + first / 4096)  # 8.75 s
    assert (node.shard_bytes, node.shard_requests) == ([first + 16384], [8 + 2])
    assert plan.cost() == pytest.approx((first + 16384) / 1e9 * 2 + 10 / 1000 * 500)


def test_without_a_network_the_first_batch_has_bytes_and_requests_but_no_time() -> None:
    plan = plan_mixture(None, [1, 1], synthetic=SYNTHETIC, nodes=2, batch_size=2, parts=4)
    assert all(n.first_batch_bytes > 0 and n.first_batch_requests > 0 for n in plan.nodes)
    assert all(n.first_batch_seconds is None for n in plan.nodes)
    assert plan.cost() is None


@pytest.mark.parametrize(
    "arguments,error,match",
    [
        ({"weights": [1, 1, 1]}, ValueError, r"weights should have one weight per synthetic set \(2\), but got 3"),  # noqa: E501
        ({"synthetic": []}, ValueError, r"synthetic should hold at least one shard set, but got synthetic=\[\]"),  # noqa: E501
        ({"synthetic": SYNTHETIC[0]}, TypeError, "synthetic should be a list of SyntheticShards"),
        ({"synthetic": [SYNTHETIC[0], "s1"]}, TypeError, r"synthetic\[1\] should be a SyntheticShards, but got str"),  # noqa: E501
        ({"urls": ["a-{0..1}.tar", "b.tar"]}, ValueError, "synthetic should be given alone, but got urls too"),  # noqa: E501
        ({"synthetic": None}, ValueError, "plan_mixture needs urls or synthetic, but got neither"),
        ({"network": "fast"}, TypeError, "network should be a Network, but got str"),
    ],
)  # fmt: skip
def test_bad_synthetic_mixture_arguments_are_refused_naming_the_argument(
    arguments: dict[str, Any], error: type[Exception], match: str
) -> None:
    base: dict[str, Any] = {"urls": None, "weights": [1, 1], "synthetic": SYNTHETIC}
    with pytest.raises(error, match=match):
        plan_mixture(**{**base, **arguments}, nodes=2, batch_size=2)


@pytest.mark.parametrize(
    "build,error,match",
    [
        (lambda: Network(bandwidth=0), ValueError, "bandwidth should be a finite number above 0, but got bandwidth=0"),  # noqa: E501
        (lambda: Network(bandwidth=1e9, price_per_gb=-0.01), ValueError, r"price_per_gb should be a finite number of at least 0, but got price_per_gb=-0.01"),  # noqa: E501
        (lambda: Network(bandwidth=1e9, price_per_1000_gets=-1), ValueError, "price_per_1000_gets should be a finite number of at least 0"),  # noqa: E501
        (lambda: SyntheticShards(0, 8192, 4), ValueError, "shards should be a positive integer value, but got shards=0"),  # noqa: E501
    ],
)  # fmt: skip
def test_a_bad_network_or_a_set_of_no_shards_is_refused_naming_the_argument(
    build: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        build()


def cli(capsys: pytest.CaptureFixture[str], *arguments: str) -> Any:
    main(["plan", "--nodes", "2", "--batch-size", "2", "--parts", "4", "--json", *arguments])
    return json.loads(capsys.readouterr().out)


def test_the_command_plans_a_synthetic_mixture_per_set_as_the_library_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    network = ["--bandwidth", "4096", "--rtt", "0.5", "--requests-per-second", "2"]
    network += ["--price-per-gb", "2", "--price-per-1000-gets", "500"]
    got = cli(
        capsys, "--weights", "1", "1", "--shards", "6", "4", "--shard-bytes", "6656", "8192",
        "--samples-per-shard", "4", "3", *network,
    )  # fmt: skip
    plan = plan_mixture(None, [1, 1], synthetic=SYNTHETIC, nodes=2, batch_size=2, parts=4)
    assert [n["shard_bytes"] for n in got["nodes"]] == [n.shard_bytes for n in plan.nodes]
    assert [n["first_batch_bytes"] for n in got["nodes"]] == [
        n.first_batch_bytes for n in plan.nodes
    ]
    assert got["totals"]["cost"] == pytest.approx(
        plan.total_bytes() / 1e9 * 2 + plan.total_requests() / 1000 * 500
    )
    # one value for every set: both sets alike
    alike = cli(capsys, "--weights", "1", "1", "--shards", "4", "--shard-bytes", "8192",
                "--samples-per-shard", "4")  # fmt: skip
    assert alike["shard_count"] == 8 and alike["dataset_bytes"] == 8 * 8192


@pytest.mark.parametrize(
    "arguments,match",
    [
        (["--weights", "1", "1", "--shards", "4", "2", "3", "--shard-bytes", "8192", "--samples-per-shard", "4"], r"--shards should hold one value for every set or one a set \(2, as --weights\), but got 3"),  # noqa: E501
        (["--weights", "1", "1", "--shards", "4", "--shard-bytes", "8192"], "--shards, --shard-bytes and --samples-per-shard should be given together"),  # noqa: E501
        (["--weights", "1", "--shards", "0", "--shard-bytes", "8192", "--samples-per-shard", "4"], "shards should be a positive integer value, but got shards=0"),  # noqa: E501
        (["--weights", "1", "1", "--shards", "4", "--shard-bytes", "8192", "--samples-per-shard", "4", "--bandwidth", "0"], "bandwidth should be a finite number above 0"),  # noqa: E501
        (["--shards", "4", "2", "--shard-bytes", "8192", "--samples-per-shard", "4"], "--shards should be one value without --weights, but got --shards 4 2"),  # noqa: E501
    ],
)  # fmt: skip
def test_bad_synthetic_mixture_flags_are_a_usage_error_naming_the_flag(
    capsys: pytest.CaptureFixture[str], arguments: list[str], match: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--nodes", "1", "--batch-size", "2", *arguments])
    assert exit_.value.code == 2
    assert re.search(match, capsys.readouterr().err)
