"""The parts law: the same parts and shards every epoch, and a default chosen at load.

NOTE [ fixed part cover ] and NOTE [ parts chosen at load ]. The laws of parts (every
sample once per epoch on any world size and workers, resumes, elastic) are in
test_wds_parts.py, which runs them under this law; here: the cover's own bijection, the
same shards per part and rank across epochs, states saved by the earlier law (a fixture
saved by the code before it) into sources with the default and with the same ``parts``,
two nodes over nginx whose second epoch downloads nothing, and the default's choice.
"""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nginx_server import Nginx
from wds_helpers import label, make, simulate, write_shards, write_small_samples

from detsamplers import ReproducibilityError
from detsamplers.loader import WebDataLoader, WebDatasetMix, WebDatasetSource
from detsamplers.loader._wds._source_parts import ADOPT_LIMIT, DEFAULT_CACHE_LIMIT, set_parts
from detsamplers.loader._wds.order._fixed_part_cover import PartCover
from detsamplers.loader._wds.order._rank_batches import rank_positions
from detsamplers.loader._wds.order._shard_order import ShardOrder

FIXTURE = Path(__file__).parent / "fixtures" / "main_parts_states.json"


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(0, 30), min_size=1, max_size=40),
    parts=st.sampled_from([2, 3, 4, 6, 12, 720]),
    epoch=st.integers(0, 5),
    seed=st.integers(0, 2**32),
)
def test_each_epochs_layout_is_a_bijection_that_keeps_every_part_in_place(
    counts: list[int], parts: int, epoch: int, seed: int
) -> None:
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    cover = PartCover(starts, parts, seed)
    total = int(starts[-1])
    out = cover.arrange(np.arange(total, dtype=np.int64), epoch)
    assert sorted(out.tolist()) == list(range(total))
    size = total // parts
    inside = np.arange(total) < size * parts
    if size:
        assert (out[inside] // size == np.arange(total)[inside] // size).all()
    assert (out[~inside] == np.arange(total)[~inside]).all()


def _rank_shards(order: ShardOrder, world: int, rank: int, epoch: int, batch: int) -> set[int]:
    """The shards rank ``rank`` of ``world`` reads in epoch ``epoch``, but for the tail.

    The ``N mod C`` samples past the parts are read by every rank in turn (NOTE [ fixed
    part cover ]): left out here.
    """
    grid = batch * world
    steps = range(epoch * order.total // grid, (epoch + 1) * order.total // grid + 1)
    positions = np.concatenate([rank_positions(t, batch, world, rank, None) for t in steps])
    assert order.parts is not None
    offsets = positions - epoch * order.total
    inside = (offsets >= 0) & (offsets < order.parts.size * order.parts.parts)
    return set(order.locate(positions[inside])[0].tolist())


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    world=st.sampled_from([2, 3, 4]),
    block=st.sampled_from([0, 2]),
    window=st.sampled_from([0, 5]),
    batch=st.integers(1, 6),
    extra=st.integers(0, 7),
)
def test_a_rank_reads_the_same_shards_in_epochs_0_1_and_2(
    seed: int, world: int, block: int, window: int, batch: int, extra: int
) -> None:
    rng = np.random.default_rng(seed)
    counts = [int(c) for c in rng.integers(20, 40, size=48)]
    counts[0] += extra  # N mod W and N mod C vary
    block = 0 if window else block
    order = ShardOrder(counts, seed, True, window, block, parts=24)
    earlier = ShardOrder(counts, seed, True, window, block, parts=24, part_shards="epoch")
    moved = 0
    for rank in range(world):
        seen = [_rank_shards(order, world, rank, e, batch) for e in range(3)]
        assert seen[0] == seen[1] == seen[2]
        runs = 1 if world in (2, 4) else 24 // world  # one run of parts for W = 2^i
        # Its share is counted in samples (N / W, give or take a sample a part): the shards
        # wholly inside it are at most as many as the smallest shards fitting in it, and
        # each run of parts cuts at most two more at its ends.
        share = sum(counts) // world + 24
        whole = int(np.searchsorted(np.cumsum(sorted(counts)), share, side="right"))
        assert len(seen[0]) <= whole + 2 * runs
        before = [_rank_shards(earlier, world, rank, e, batch) for e in range(2)]
        moved += len(before[1] - before[0])
    assert moved  # the earlier law re-dealt shards each epoch: the check can fail


def test_each_epoch_orders_a_parts_samples_anew() -> None:
    counts = [30] * 64
    order = ShardOrder(counts, 3, True, 0, 2, parts=8)
    total = sum(counts)
    epochs = [order.locate(np.arange(e * total, (e + 1) * total)) for e in range(3)]
    pairs = [set(zip(s.tolist(), k.tolist(), strict=True)) for s, k in epochs]
    assert pairs[0] == pairs[1] == pairs[2] and len(pairs[0]) == total  # each epoch a bijection
    firsts = [tuple(s[: 8 * 30].tolist()) for s, _ in epochs]
    assert len(set(firsts)) == 3  # another order of the same shards each epoch


def _fixture_shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("main-states") / "shards"
    write_small_samples(folder, 40)
    return str(folder / "d-{00..39}.tar")


@pytest.fixture(scope="module")
def forty(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _fixture_shards(tmp_path_factory)


def _saved() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["cases"]
    return cases


@pytest.mark.parametrize("case", range(3), ids=["no parts", "parts=720, block 4", "parts=720"])
@pytest.mark.parametrize("explicit", [False, True], ids=["default parts", "same parts"])
def test_a_state_saved_by_the_earlier_law_resumes_the_same_records(
    forty: str, case: int, explicit: bool
) -> None:
    saved = _saved()[case]
    options = dict(saved["options"])
    if not explicit:
        options.pop("parts", None)
    source = WebDatasetSource(forty, seed=7, batch_size=8, decode=(), map=label, **options)
    source.load_state_dict(saved["state"])
    got = [[int(x) for x in b] for b in islice(iter(source), len(saved["next_batches"]))]
    assert got == saved["next_batches"]
    again = source.state_dict()
    assert again["config"] == saved["state"]["config"]  # the run keeps its law
    assert again["fingerprint"] == saved["state"]["fingerprint"]


def test_a_state_of_the_earlier_law_with_other_parts_is_refused_naming_them(forty: str) -> None:
    saved = _saved()[2]
    source = WebDatasetSource(forty, seed=7, batch_size=8, parts=360)
    with pytest.raises(ReproducibilityError, match="parts is 720 in the state but 360 here"):
        source.load_state_dict(saved["state"])
    plain = WebDatasetSource(forty, seed=7, batch_size=8, parts=0)
    with pytest.raises(ReproducibilityError, match="parts is 720 in the state but None here"):
        plain.load_state_dict(saved["state"])


def test_the_law_is_in_the_config_and_fingerprint(shards: str) -> None:
    state = make(shards, parts=4).state_dict()
    assert state["config"]["part_shards"] == "run"
    earlier = make(shards, parts=4)
    set_parts(earlier, 4, "epoch")
    assert "part_shards" not in earlier.state_dict()["config"]
    assert earlier.state_dict()["fingerprint"] != state["fingerprint"]
    assert "part_shards" not in make(shards, parts=0).state_dict()["config"]  # no parts, no law


def test_a_mixture_resumes_a_state_of_the_earlier_law_in_its_order(shards: str) -> None:
    earlier = WebDatasetMix([shards, shards], [1, 1], seed=0, batch_size=2, parts=4)
    earlier._set_part_law("epoch")  # as main saved it, before NOTE [ fixed part cover ]
    earlier.load_state_dict({**earlier.state_dict(), "position": 37})
    state = earlier.state_dict()
    assert "part_shards" not in state["config"]
    expected = [list(b["__key__"]) for b in islice(iter(earlier), 20)]
    mix = WebDatasetMix([shards, shards], [1, 1], seed=0, batch_size=2, parts=4)
    assert mix.state_dict()["config"]["part_shards"] == "run"
    mix.load_state_dict(state)
    assert [list(b["__key__"]) for b in islice(iter(mix), 20)] == expected
    assert mix.state_dict() == earlier.state_dict()  # and keeps that law


def test_a_mixture_refuses_a_state_whose_law_does_not_match_its_fingerprint(shards: str) -> None:
    mix = WebDatasetMix([shards, shards], [1, 1], seed=0, batch_size=2, parts=4)
    state = mix.state_dict()
    config = {k: v for k, v in state["config"].items() if k != "part_shards"}
    with pytest.raises(ReproducibilityError, match="fingerprint does not match"):
        mix.load_state_dict({**state, "config": config})
    assert mix.state_dict() == state  # the refused state left the mixture's law


class Served:
    def __init__(self, nginx: Nginx, root: Path, total: int, index_dir: str) -> None:
        self.nginx, self.total, self.index_dir = nginx, total, index_dir
        self.urls = f"{nginx.url}/s/d-{{00..15}}.tar"
        self.bytes = sum(p.stat().st_size for p in (root / "s").glob("*.tar"))

    def make(self, **options: Any) -> WebDatasetSource:
        defaults: dict[str, Any] = {"seed": 5, "batch_size": 8, "decode": (), "map": label}
        return WebDatasetSource(self.urls, index_dir=self.index_dir, **{**defaults, **options})


@pytest.fixture(scope="module")
def served(nginx_small: tuple[Nginx, int], tmp_path_factory: pytest.TempPathFactory) -> Served:
    nginx, total = nginx_small  # the session's nginx of 16 shards (conftest.py)
    out = Served(nginx, nginx.root, total, str(tmp_path_factory.mktemp("index")))
    out.make(parts=0)  # index the shards once (cached in index_dir)
    return out


@pytest.mark.parametrize("shuffle", [{}, {"shuffle_block_shards": 2}], ids=["tar", "shuffled"])
def test_two_nodes_download_nothing_in_epochs_2_and_3(
    served: Served, tmp_path: Path, shuffle: dict[str, Any]
) -> None:
    """Two nodes of one rank each, a cache folder each: epoch 2 serves 0 shard bytes per node.

    ``parts=22`` divides the 682 samples, so no tail is shared by the nodes.
    """
    world = 2
    assert served.total % 22 == 0
    labels: list[int] = []
    for epoch in range(3):
        mark = served.nginx.mark()
        for rank in range(world):
            source = served.make(
                world_size=world,
                rank=rank,
                parts=22,
                cache_dir=str(tmp_path / f"node-{rank}"),
                skip_samples=epoch * served.total,
                prefetch=2,
                **shuffle,
            )
            steps = served.total // (8 * world)
            labels += [int(x) for b in islice(iter(source), steps) for x in b]
        sent, _ = served.nginx.served(mark)
        if epoch == 0:
            # A shard at the runs' ends is fetched by ranges, its tar end blocks by neither.
            assert 0.99 * served.bytes <= sent <= 1.05 * served.bytes
        else:
            assert sent == 0, (epoch, sent / served.bytes)
    per_epoch = steps * 8 * world
    for epoch in range(3):
        got = labels[epoch * per_epoch : (epoch + 1) * per_epoch]
        assert len(set(got)) == len(got) == per_epoch  # no sample twice within an epoch


def test_the_default_is_the_plain_order_without_a_cache_for_local_and_remote_shards(
    shards: str, served: Served
) -> None:
    local = WebDatasetSource(shards, seed=0, batch_size=2)
    assert (local.parts, local.parts_auto, local.cache) == (0, True, None)
    assert "parts" not in local.state_dict()["config"]  # every local order as before
    remote = served.make()  # 682 samples of 16 shards: the earlier rule gave them C = 24
    assert (remote.parts, remote.parts_auto, remote.cache) == (0, True, None)
    assert "parts" not in remote.state_dict()["config"]


def test_a_default_source_refuses_a_hostile_part_count_without_building_it(
    shards: str,
) -> None:
    source = WebDatasetSource(shards, seed=0, batch_size=2)
    state = source.state_dict()
    for bad in (ADOPT_LIMIT + 1, 10**18 + 9, -3, "720", True):
        hostile = {**state, "config": {**state["config"], "parts": bad}}
        with pytest.raises(ReproducibilityError, match=f"parts is {bad!r} in the state"):
            source.load_state_dict(hostile)
    assert source.parts == 0
    other = make(shards, parts=4, seed=1).state_dict()  # parts the source may take, a seed not
    with pytest.raises(ReproducibilityError, match="seed is 1 in the state but 0 here"):
        source.load_state_dict(other)
    assert (source.parts, source.state_dict()) == (0, state)  # left as it was


def test_over_nginx_rank_local_parts_read_each_ranks_share_and_the_plain_order_all(
    served: Served, tmp_path: Path
) -> None:
    """Two ranks, a cache folder each: parts read each rank's share, the plain order all."""
    sent = {}
    for parts in (24, 0):
        mark = served.nginx.mark()
        labels: list[int] = []
        for rank in range(2):
            folder = tmp_path / f"{parts}-{rank}"
            source = served.make(
                world_size=2, rank=rank, repeat=False, cache_dir=str(folder), parts=parts
            )
            labels += [int(x) for b in source for x in b]
        assert sorted(labels) == list(range(served.total))
        sent[parts] = served.nginx.served(mark)[0] / served.bytes
    assert sent[24] <= 1.3 < 1.8 <= sent[0], sent


def test_a_default_source_over_nginx_takes_the_law_and_cache_of_the_state_it_loads(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    # A state saved under the earlier default for remote shards (C = 24, the default folder).
    old = served.make(parts=24, shuffle_block_shards=2)
    assert old.cache is not None and str(tmp_path / "xdg") in str(old.cache.folder)
    assert old.cache.limit == DEFAULT_CACHE_LIMIT  # the default folder is bounded
    old.load_state_dict({**old.state_dict(), "position": 3 * served.total // 2})
    state = old.state_dict()
    expected = [[int(x) for x in b] for b in islice(iter(old), 12)]
    source = served.make(shuffle_block_shards=2)
    assert (source.parts, source.cache) == (0, None)
    own = served.make(parts=24, shuffle_block_shards=2, cache_dir=str(tmp_path / "own"))
    assert own.cache is not None and own.cache.limit is None  # a folder of one's own is not
    capped = served.make(parts=24, shuffle_block_shards=2, cache_limit=1 << 30)
    assert capped.cache is not None and capped.cache.limit == 1 << 30
    source.load_state_dict(state)
    assert source.parts == 24 and source.cache is not None  # as that run read
    assert source.cache.limit == DEFAULT_CACHE_LIMIT
    assert [[int(x) for x in b] for b in islice(iter(source), 12)] == expected
    assert source.state_dict() == {**state, "position": state["position"] + 12 * 8}
    fresh = served.make(shuffle_block_shards=2)
    fresh.load_state_dict(fresh.state_dict())  # its own state keeps the plain order
    assert (fresh.parts, fresh.cache) == (0, None)


def test_a_mixture_rank_reads_the_same_shards_of_each_set_in_every_epoch(
    tmp_path: Path,
) -> None:
    # Sets of 32 and 48 samples (4 divides both: no tail), parts=4, two ranks: over about
    # three epochs of each set, a rank's shards of the first third are those of the last.
    first = write_shards(tmp_path / "a", [8, 12, 4, 8])
    second = write_shards(tmp_path / "b", [6, 10, 16, 8, 8])
    mix = WebDatasetMix([first, second], [2, 3], seed=4, batch_size=2, parts=4)
    span = 3 * 80
    for rank in range(2):
        positions = np.arange(rank, 3 * span, 2, dtype=np.int64)
        shards = mix._order.locate(positions)[0]
        thirds = [
            set(shards[i * len(shards) // 3 : (i + 1) * len(shards) // 3].tolist())
            for i in range(3)
        ]
        assert thirds[0] == thirds[1] == thirds[2]
        assert len(thirds[0]) < 9  # fewer than all 9 shards: its parts only


@pytest.mark.workers
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_dataloader_workers_read_in_the_law_a_default_source_took_from_a_state(
    shards: str,
) -> None:
    saved = make(shards, parts=4, shuffle_block_shards=2)
    saved.load_state_dict({**saved.state_dict(), "position": 50})
    state = saved.state_dict()
    expected = simulate(saved, 2, 20)
    source = make(shards, parts=None, shuffle_block_shards=2)
    assert source.parts == 0
    source.load_state_dict(state)
    loader = WebDataLoader(source, num_workers=2)
    assert [[int(x) for x in b] for b in islice(iter(loader), 20)] == expected
