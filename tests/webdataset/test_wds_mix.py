"""WebDatasetMix: the mixture law over shard sets, exact resume, elastic split, parity."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import webdataset as wds
from hypothesis import given, settings
from hypothesis import strategies as st
from wds_helpers import global_stream, label, make, noisy_label, take

from detsamplers import MixSampler, ReproducibilityError
from detsamplers._seeds import derive
from detsamplers.loader import WebDataLoader, WebDatasetMix, WebDatasetSource
from detsamplers.loader._wds._decode import make_decoder
from detsamplers.loader._wds._source_state import summarize_counts

#: Three shard sets: their shards' sample counts. Set c's samples are labelled c * 1000 + i,
#: i counting the set's samples in URL order.
SETS = [[5, 3, 4], [2, 3], [7]]
SIZES = [sum(c) for c in SETS]


def write_set(folder: Path, component: int, counts: list[int]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    urls, value = [], component * 1000
    for shard, count in enumerate(counts):
        path = folder / f"c{component}-{shard:02d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for j in range(count):
                sink.write({"__key__": f"c{component}-{shard}-{j}", "cls": value})
                value += 1
        urls.append(str(path))
    return urls


@pytest.fixture(scope="session")
def sets(tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    """The shard URLs of each of the three sets of ``SETS``."""
    root = tmp_path_factory.mktemp("mix")
    return [write_set(root / f"set{c}", c, counts) for c, counts in enumerate(SETS)]


def mix(urls: list[list[str]], weights: Any = (0.5, 0.3, 0.2), **kwargs: Any) -> WebDatasetMix:
    options: dict[str, Any] = {
        "seed": 0,
        "batch_size": 2,
        "decode": (),
        "map": label,
        "shuffle_window": 3,
    }
    options.update(kwargs)
    return WebDatasetMix(urls, list(weights), **options)


def stream(source: WebDatasetSource, count: int) -> list[int]:
    """The first ``count`` samples from the source's position, on one rank of batch 1."""
    one = source.for_rank(world_size=1, rank=0, skip_samples=source.position)
    one.batch_size = 1
    return [b[0] for b in take(iter(one), count)]


def test_every_window_gives_each_shard_set_its_count(sets: list[list[str]]) -> None:
    source = mix(sets, (0.6, 0.25, 0.15))
    window, counts = source.mixture.window, source.mixture.counts
    assert (window, counts) == (20, [12, 5, 3])
    labels = stream(source, 10 * window)
    for j in range(10):
        got = Counter(x // 1000 for x in labels[j * window : (j + 1) * window])
        assert [got[k] for k in range(3)] == counts


@settings(max_examples=15)
@given(
    weights=st.lists(st.integers(1, 9), min_size=3, max_size=3),
    seed=st.integers(0, 2**32),
)
def test_the_shares_and_the_interleaving_are_mix_samplers_law(
    sets: list[list[str]], weights: list[int], seed: int
) -> None:
    source = mix(sets, weights, seed=seed)
    law = MixSampler([range(n) for n in SIZES], weights, seed)
    positions = np.arange(3 * law.window)
    component, _ = law.locate(positions)
    labels = stream(source, len(positions))
    assert [x // 1000 for x in labels] == component.tolist()
    for j in range(3):
        got = Counter(component[j * law.window : (j + 1) * law.window].tolist())
        assert [got[k] for k in range(3)] == law.counts


def test_each_shard_set_gives_every_sample_once_per_epoch(sets: list[list[str]]) -> None:
    source = mix(sets, (0.2, 0.3, 0.5))
    labels = stream(source, 300)
    for k, size in enumerate(SIZES):
        own = [x for x in labels if x // 1000 == k]
        epochs = len(own) // size
        assert epochs >= 3
        for e in range(epochs):
            assert sorted(own[e * size : (e + 1) * size]) == [k * 1000 + i for i in range(size)]


def test_each_shard_set_streams_what_a_single_source_over_it_yields(
    sets: list[list[str]],
) -> None:
    # Parity with the real thing: a WebDatasetSource over set k with the set's seed.
    options: dict[str, Any] = {"shuffle_window": 3, "collate_fn": list, "batch_size": 1}
    source = mix(sets, decode=None, map=None, **options)
    one = source.for_rank(world_size=1, rank=0)
    one.batch_size = 1
    samples = [batch[0] for _, batch in zip(range(250), one, strict=False)]
    for k, urls in enumerate(sets):
        own = [s for s in samples if s["__key__"].startswith(f"c{k}-")]
        single = WebDatasetSource(urls, seed=source.seeds[k], **options)
        expected = [batch[0] for _, batch in zip(range(len(own)), single, strict=False)]
        assert len(own) > 2 * SIZES[k]  # past the set's second epoch
        assert own == expected  # keys, URLs, bytes and local paths


def test_the_order_for_a_fixed_seed_is_pinned(sets: list[list[str]]) -> None:
    # Window 10 (counts 5, 3, 2); set 0 reads shard 1 then shard 0 then shard 2, each in
    # windows of 3 shuffled; set 1 starts its second epoch at position 18.
    golden = [5, 7, 2001, 1000, 1001, 2002, 6, 1003, 1, 2, 0, 2000, 3, 2003, 4, 1002, 9, 1004]
    assert stream(mix(sets, seed=7), 20) == [*golden, 1004, 8]


def test_resuming_at_every_position_gives_the_uninterrupted_stream(
    sets: list[list[str]],
) -> None:
    reference = stream(mix(sets), 60)  # every set past its first epoch, mid-shard
    for position in range(50):
        saved = json.loads(json.dumps({**mix(sets).state_dict(), "position": position}))
        resumed = mix(sets, batch_size=3)
        resumed.load_state_dict(saved)
        assert [x for b in take(iter(resumed), 3) for x in b] == reference[position:][:9]


@pytest.mark.parametrize(
    ("before", "after"), [((2, 3), (3, 2)), ((1, 6), (4, 1)), ((3, 2), (1, 5)), ((2, 2), (5, 3))]
)
def test_another_world_size_or_global_batch_continues_the_same_global_batches(
    sets: list[list[str]], before: tuple[int, int], after: tuple[int, int]
) -> None:
    def ranks(world_size: int, batch_size: int) -> list[WebDatasetSource]:
        return [
            mix(sets, batch_size=batch_size, world_size=world_size, rank=r)
            for r in range(world_size)
        ]

    straight = stream(mix(sets), 120)
    first = ranks(*before)
    assert global_stream(first, 0, 7) == straight[: 7 * before[0] * before[1]]
    state = first[0].state_dict()
    assert all(source.state_dict() == state for source in first)
    second = ranks(*after)
    for source in second:
        source.load_state_dict(state)
    tail = global_stream(second, 0, 5)
    start = state["position"]
    assert tail == straight[start : start + 5 * after[0] * after[1]]


@pytest.mark.parametrize("world_size", [1, 2])
def test_the_batches_do_not_depend_on_num_workers(sets: list[list[str]], world_size: int) -> None:
    def ranks() -> list[WebDatasetSource]:
        return [mix(sets, world_size=world_size, rank=r, batch_size=3) for r in range(world_size)]

    reference = global_stream(ranks(), 0, 12)
    assert reference == stream(mix(sets), 36 * world_size)
    for workers in (1, 2, 3):
        assert global_stream(ranks(), workers, 12) == reference


@pytest.mark.workers
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_loader_with_workers_resumes_the_mixture_exactly(sets: list[list[str]]) -> None:
    loader = WebDataLoader(mix(sets, batch_size=4), num_workers=2)
    iterator = iter(loader)
    head = [b.tolist() for _, b in zip(range(5), iterator, strict=False)]
    state = loader.state_dict()
    del iterator
    assert state["position"] == 20
    assert state["mixture"] == mix(sets).progress(20)
    resumed = WebDataLoader(mix(sets, batch_size=4), num_workers=0)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    tail = [b.tolist() for _, b in zip(range(3), resumed, strict=False)]
    assert [x for b in head + tail for x in b] == stream(mix(sets), 32)


def test_the_state_shows_each_shard_sets_samples_and_epochs(sets: list[list[str]]) -> None:
    source = mix(sets, (0.6, 0.25, 0.15), batch_size=10)
    iterator = iter(source)
    for _ in range(4):
        next(iterator)
    state = source.state_dict()
    assert state["position"] == 40
    assert state["mixture"] == {"position": 40, "consumed": [24, 10, 6], "epochs": [2, 2, 0]}
    assert state["counts"] == [summarize_counts(c) for c in SETS]


def test_a_curriculum_switches_weights_without_losing_or_repeating_a_sample(
    sets: list[list[str]],
) -> None:
    source = mix(sets, (0.5, 0.5, 0), curriculum=[(17, [0, 0, 1])])
    labels = stream(source, 17 + 7)
    assert {x // 1000 for x in labels[:17]} == {0, 1}
    assert sorted(labels[17:]) == [2000 + i for i in range(7)]
    # A state may take a curriculum segment that starts at or after its position...
    state = {**mix(sets, (0.5, 0.5, 0)).state_dict(), "position": 17}
    later = mix(sets, (0.5, 0.5, 0), curriculum=[(17, [0, 0, 1])])
    later.load_state_dict(state)
    assert stream(later, 7) == labels[17:]
    # ...but not one that changes positions the run had already trained on.
    earlier = mix(sets, (0.5, 0.5, 0), curriculum=[(16, [0, 0, 1])])
    with pytest.raises(ReproducibilityError, match=r"the curriculum changed before position 17"):
        earlier.load_state_dict(state)


def test_a_changed_weight_or_shard_set_is_refused_naming_it(
    sets: list[list[str]], tmp_path: Path
) -> None:
    state = mix(sets).state_dict()
    with pytest.raises(
        ReproducibilityError, match=r"weights\[1\] is 0.3 in the state but 0.2 here"
    ):
        mix(sets, (0.5, 0.2, 0.3)).load_state_dict(state)
    with pytest.raises(ReproducibilityError, match=r"seed is 0 in the state but 1 here"):
        mix(sets, seed=1).load_state_dict(state)
    with pytest.raises(ReproducibilityError, match=r"shuffle_window is 3 in the state but 0 here"):
        mix(sets, shuffle_window=0).load_state_dict(state)
    with pytest.raises(ReproducibilityError, match=r"urls\[2\] names other shard files"):
        mix([sets[0], sets[1], sets[1]]).load_state_dict(state)
    with pytest.raises(ReproducibilityError, match=r"saved with 3 shard sets, but urls name 2"):
        mix(sets[:2], (1, 1)).load_state_dict(state)
    # A shard rewritten with another sample count is named.
    changed = [write_set(tmp_path / f"s{c}", c, counts) for c, counts in enumerate(SETS)]
    before = mix(changed).state_dict()
    write_set(tmp_path / "s1", 1, [2, 4])
    with pytest.raises(ReproducibilityError, match=r"c1-01.tar' had 3 samples .* has 4 now"):
        mix(changed).load_state_dict(before)
    with pytest.raises(ValueError, match=r"state has keys extra that WebDatasetMix"):
        mix(sets).load_state_dict({**state, "extra": 1})
    with pytest.raises(
        TypeError, match=r"state\['counts'\] should be a list with one entry per shard set"
    ):
        mix(sets).load_state_dict({**state, "counts": [1, 2]})


def test_bad_arguments_are_refused_naming_them(sets: list[list[str]], tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"urls should be a list of shard sets, one per compo"):
        WebDatasetMix(sets[0][0], [1], seed=0, batch_size=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"urls should hold at least one shard set, but got"):
        WebDatasetMix([], [], seed=0, batch_size=1)
    with pytest.raises(ValueError, match=r"one weight per shard set in urls \(3\), but got 2"):
        mix(sets, (1, 1))
    with pytest.raises(TypeError, match=r"weights should be a sequence of 3 non-negative"):
        WebDatasetMix(sets, "abc", seed=0, batch_size=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"weights\[1\] should be a finite non-negative number"):
        mix(sets, (1, -1, 1))
    with pytest.raises(TypeError, match=r"urls\[1\]: urls should be a string"):
        mix([sets[0], [1, 2], sets[2]])  # type: ignore[list-item]
    empty = tmp_path / "empty.tar"
    with wds.TarWriter(str(empty)):
        pass
    with pytest.raises(ValueError, match=r"urls\[1\] should name shards with samples, but all 1"):
        mix([sets[0], [str(empty)], sets[2]])
    with pytest.raises(TypeError, match=r"len\(\) of a WebDatasetMix is undefined"):
        len(mix(sets))
    with pytest.raises(ValueError, match=r"batch_size should be a positive integer"):
        mix(sets, batch_size=0)


def test_each_worker_keeps_one_open_shard_per_shard_set(sets: list[list[str]]) -> None:
    # Switching sets does not close the other sets' shards: a set's shard is opened only
    # when that set's own stream moves to another shard.
    source = mix(sets, batch_size=8)
    reader = source._reader()
    opened: list[int] = []
    for k, part in enumerate(reader.parts):  # type: ignore[attr-defined]
        original = part._open

        def spy(shard: int, part: Any = part, original: Any = original, k: int = k) -> Any:
            if part.handle is None:
                opened.append(k)
            return original(shard)

        part._open = spy
    for batch in range(6):
        source.batch_at(batch, reader)
    reader.close()
    shards, _ = source._order.locate(np.arange(48))
    offsets = np.cumsum([0] + [len(c) for c in SETS])
    owner = np.searchsorted(offsets, shards, side="right") - 1
    runs = []
    for k in range(3):
        own = shards[owner == k]
        runs.append(1 + int(np.count_nonzero(own[1:] != own[:-1])))
    assert Counter(opened) == dict(enumerate(runs))
    switches = 1 + int(np.count_nonzero(shards[1:] != shards[:-1]))
    assert sum(runs) < switches  # what one reader for all sets would open


def test_a_mixture_of_many_shard_sets_follows_the_law(tmp_path: Path) -> None:
    counts = [[2, 1], [3], [1, 1, 1], [4], [2], [5], [1, 2], [3], [2, 2]]
    urls = [write_set(tmp_path / f"m{c}", c, n) for c, n in enumerate(counts)]
    weights = list(range(1, 10))
    source = mix(urls, weights, seed=3, shuffle_window=0)
    law = MixSampler([range(sum(n)) for n in counts], weights, 3)
    labels = stream(source, 3 * law.window)
    component, q = law.locate(np.arange(len(labels)))
    assert [x // 1000 for x in labels] == component.tolist()
    for k, n in enumerate(counts):
        own = [x % 1000 for x in labels if x // 1000 == k]
        assert q[component == k].tolist() == list(range(len(own)))  # each set in order
        size = sum(n)
        for e in range(len(own) // size):
            assert sorted(own[e * size : (e + 1) * size]) == list(range(size))
    assert source.progress(len(labels))["consumed"] == [
        int(np.count_nonzero(component == k)) for k in range(9)
    ]


def test_a_state_of_the_other_source_class_is_refused(sets: list[list[str]]) -> None:
    single = WebDatasetSource(sets[0], seed=0, batch_size=2)
    with pytest.raises(
        TypeError, match=r"state\['counts'\] should be a list with one entry per shard set"
    ):
        mix(sets).load_state_dict(single.state_dict())
    with pytest.raises(ValueError, match=r"state was saved by a WebDatasetMix .* not by a Web"):
        single.load_state_dict(mix(sets).state_dict())


def test_a_mixture_of_shard_sets_over_http_reads_what_the_local_run_reads(
    shards: str, server: Any, tmp_path: Path
) -> None:
    # The session's 7 shards (wds_helpers.COUNTS) as two sets: shards 0-3 and 4-6.
    local = [
        [shards.replace("{000000..000006}", f"{s:06d}") for s in range(4)],
        [shards.replace("{000000..000006}", f"{s:06d}") for s in range(4, 7)],
    ]
    remote = [[f"{server.url}/s/{Path(u).name}" for u in part] for part in local]
    options: dict[str, Any] = {"batch_size": 5, "shuffle_window": 4}
    state = mix(local, (0.6, 0.4), **options).state_dict()
    over_http = mix(remote, (0.6, 0.4), index_dir=str(tmp_path / "cache"), **options)
    over_http.load_state_dict({**state, "position": 37})  # a local state resumes over HTTP
    on_disk = mix(local, (0.6, 0.4), skip_samples=37, **options)
    assert take(iter(over_http), 12) == take(iter(on_disk), 12)


def test_the_weights_window_and_curriculum_are_checked_before_any_shard_is_read() -> None:
    missing = [["/nonexistent/a.tar"], ["/nonexistent/b.tar"]]
    with pytest.raises(ValueError, match=r"window should be an integer in \[1, 65536\]"):
        WebDatasetMix(missing, [1, 1], seed=0, batch_size=1, window=2**17)
    with pytest.raises(
        ValueError, match=r"curriculum\[0\] start should be a positive integer value"
    ):
        WebDatasetMix(missing, [1, 1], seed=0, batch_size=1, curriculum=[(0, [1, 0])])
    with pytest.raises(FileNotFoundError, match=r"a.tar"):
        WebDatasetMix(missing, [1, 1], seed=0, batch_size=1)


def test_record_seeding_gives_each_sample_the_same_draws_on_any_batch_size(
    sets: list[list[str]],
) -> None:
    def draws(batch_size: int) -> list[tuple[float, ...]]:
        source = mix(sets, batch_size=batch_size, map=noisy_label, seeding="record")
        batches = [b for _, b in zip(range(12 // batch_size), source, strict=False)]
        return [tuple(float(c[i]) for c in b) for b in batches for i in range(len(b[0]))]

    assert draws(2) == draws(3) == draws(4)
    assert len({row[1] for row in draws(2)}) == 12  # the draws differ between samples


# -- the block shuffle inside each shard set's order ---------------------------------------


def shard_in_set(value: int) -> int:
    """The shard (numbered within its set) of a sample's label ``c * 1000 + i``."""
    component, i = divmod(value, 1000)
    return int(np.searchsorted(np.cumsum(SETS[component]), i, side="right"))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32), blocks=st.integers(2, 3))
def test_with_blocks_each_set_streams_what_a_single_source_with_its_seed_yields(
    sets: list[list[str]], seed: int, blocks: int
) -> None:
    # Parity with the real thing, and the block law inside each set's own epochs.
    source = mix(sets, seed=seed, shuffle_window=0, shuffle_block_shards=blocks)
    labels = stream(source, 200)
    for k, urls in enumerate(sets):
        own = [x for x in labels if x // 1000 == k]
        single = make(urls, seed=source.seeds[k], batch_size=1, shuffle_block_shards=blocks)
        assert own == [b[0] for b in take(iter(single), len(own))]
        order = source._order.orders[k]  # type: ignore[attr-defined]
        size = SIZES[k]
        assert len(own) >= 2 * size
        for epoch in range(len(own) // size):
            part = own[epoch * size : (epoch + 1) * size]
            assert sorted(part) == [k * 1000 + i for i in range(size)]  # once per set epoch
            shards, start = order.shard_order(epoch).tolist(), 0
            for first in range(0, len(shards), blocks):
                members = shards[first : first + blocks]
                count = sum(SETS[k][s] for s in members)
                assert {shard_in_set(x) for x in part[start : start + count]} == set(members)
                start += count


def test_a_one_set_mixture_with_blocks_is_the_single_source_with_the_sets_own_seed(
    sets: list[list[str]],
) -> None:
    # Set k's shuffles are keyed by derive(seed, "mix-component", k), by design (see the
    # WebDatasetMix docstring): equal to the source with that seed, not with the seed.
    one = mix([sets[0]], [1], seed=5, shuffle_window=0, shuffle_block_shards=2)
    assert one.seeds == [derive(5, "mix-component", 0)]
    got = stream(one, 3 * SIZES[0])
    own_seed = make(sets[0], seed=one.seeds[0], batch_size=1, shuffle_block_shards=2)
    assert got == [b[0] for b in take(iter(own_seed), len(got))]
    same_seed = make(sets[0], seed=5, batch_size=1, shuffle_block_shards=2)
    assert got != [b[0] for b in take(iter(same_seed), len(got))]
    plain = mix([sets[0]], [1], seed=5, shuffle_window=0)
    assert got != stream(plain, len(got))  # the blocks do mix


def test_with_blocks_resuming_at_every_position_gives_the_uninterrupted_stream(
    sets: list[list[str]],
) -> None:
    options: dict[str, Any] = {"shuffle_window": 0, "shuffle_block_shards": 2}
    reference = stream(mix(sets, **options), 60)
    for position in range(50):
        saved = json.loads(json.dumps({**mix(sets, **options).state_dict(), "position": position}))
        resumed = mix(sets, batch_size=3, **options)
        resumed.load_state_dict(saved)
        assert [x for b in take(iter(resumed), 3) for x in b] == reference[position:][:9]


@pytest.mark.parametrize(("before", "after"), [((2, 3), (3, 2)), ((1, 6), (4, 1))])
def test_with_blocks_another_world_size_continues_the_same_global_batches(
    sets: list[list[str]], before: tuple[int, int], after: tuple[int, int]
) -> None:
    options: dict[str, Any] = {"shuffle_window": 0, "shuffle_block_shards": 3}

    def ranks(world_size: int, batch_size: int) -> list[WebDatasetSource]:
        return [
            mix(sets, batch_size=batch_size, world_size=world_size, rank=r, **options)
            for r in range(world_size)
        ]

    straight = stream(mix(sets, **options), 100)
    first = ranks(*before)
    assert global_stream(first, 0, 5) == straight[: 5 * before[0] * before[1]]
    state = first[0].state_dict()
    second = ranks(*after)
    for source in second:
        source.load_state_dict(state)
    start = state["position"]
    assert global_stream(second, 0, 4) == straight[start : start + 4 * after[0] * after[1]]


@pytest.mark.parametrize("world_size", [1, 2])
def test_with_blocks_the_batches_do_not_depend_on_num_workers(
    sets: list[list[str]], world_size: int
) -> None:
    def ranks() -> list[WebDatasetSource]:
        return [
            mix(sets, world_size=world_size, rank=r, shuffle_window=0, shuffle_block_shards=2)
            for r in range(world_size)
        ]

    reference = global_stream(ranks(), 0, 12)
    for workers in (1, 2, 3):
        assert global_stream(ranks(), workers, 12) == reference


def test_the_block_shuffle_is_in_the_state_and_each_set_keeps_its_blocks_shards_open(
    sets: list[list[str]],
) -> None:
    state = mix(sets, shuffle_window=0, shuffle_block_shards=2).state_dict()
    assert state["config"]["shuffle_block_shards"] == 2
    plain = mix(sets, shuffle_window=0).state_dict()
    assert "shuffle_block_shards" not in plain["config"]  # states saved before still load
    assert mix(sets, shuffle_window=0, shuffle_block_shards=1).state_dict() == plain
    with pytest.raises(
        ReproducibilityError, match=r"shuffle_block_shards is 2 in the state but 0 here"
    ):
        mix(sets, shuffle_window=0).load_state_dict(state)
    with pytest.raises(
        ReproducibilityError, match=r"shuffle_block_shards is 0 in the state but 3 here"
    ):
        mix(sets, shuffle_window=0, shuffle_block_shards=3).load_state_dict(plain)
    reader = mix(sets, shuffle_window=0, shuffle_block_shards=2)._reader()
    parts = reader.parts  # type: ignore[attr-defined]
    assert [type(p).__name__ for p in parts] == ["ShardReaders"] * 3
    assert [p.capacity for p in parts] == [3, 2, 1]  # 2 * 2, capped at the set's shards
    reader.close()
    with pytest.raises(ValueError, match=r"shuffle_window should be 0 with shuffle_block_shards"):
        mix(sets, shuffle_block_shards=2)


# -- a decode and a map per shard set ----------------------------------------------------


def key_of(sample: dict[str, Any]) -> str:
    return str(sample["__key__"])


def per_set(sets: list[list[str]], **kwargs: Any) -> WebDatasetMix:
    return mix(sets, collate_fn=list, shuffle_window=0, **kwargs)


def test_each_shard_set_has_its_own_decode_and_map(sets: list[list[str]]) -> None:
    source = per_set(sets, decode=[(), None, ()], map=[label, key_of, None])
    raw = per_set(sets, decode=None, map=None)
    got = [s for _, b in zip(range(20), source, strict=False) for s in b]
    samples = [s for _, b in zip(range(20), raw, strict=False) for s in b]
    expected: list[Any] = []
    for sample in samples:
        k = int(sample["__key__"][1])
        decoded = make_decoder(())(sample) if k != 1 else sample
        expected.append([label, key_of, lambda s: s][k](decoded))
    assert got == expected
    assert {type(x).__name__ for x in got} == {"int", "str", "dict"}
    assert all(isinstance(x["cls"], int) for x in got if isinstance(x, dict))  # set 2 decoded


@pytest.mark.parametrize("seeding", ["batch", "record"])
def test_the_same_entry_for_every_set_gives_the_single_values_batches_and_draws(
    sets: list[list[str]], seeding: str
) -> None:
    def batches(decode: Any, map: Any) -> list[Any]:
        return take_all(per_set(sets, decode=decode, map=map, seeding=seeding, batch_size=3), 8)

    single = batches((), noisy_label)
    assert batches([()] * 3, [noisy_label] * 3) == single
    assert batches((), [noisy_label] * 3) == single
    assert batches([()] * 3, noisy_label) == single
    assert len({s[1] for b in single for s in b}) == 24  # the draws differ between samples


def take_all(source: WebDatasetSource, count: int) -> list[Any]:
    return [list(b) for _, b in zip(range(count), source, strict=False)]


def test_record_seeding_with_a_map_per_set_gives_each_sample_its_draws_on_any_batch_size(
    sets: list[list[str]],
) -> None:
    def draws(batch_size: int) -> list[Any]:
        source = per_set(sets, map=[noisy_label, label, noisy_label], seeding="record")
        source.batch_size = batch_size
        return [s for b in take_all(source, 12 // batch_size) for s in b]

    reference = draws(2)
    assert reference == draws(3) == draws(4)
    # A sample of set 0 or 2 draws what it draws when every set has that map.
    everywhere = per_set(sets, map=noisy_label, seeding="record")
    for got, same in zip(reference, [s for b in take_all(everywhere, 6) for s in b], strict=True):
        assert got == (same if isinstance(got, tuple) else same[0])


@pytest.mark.parametrize("world_size", [1, 2])
def test_a_map_per_set_does_not_depend_on_num_workers(
    sets: list[list[str]], world_size: int
) -> None:
    def ranks() -> list[WebDatasetSource]:
        return [
            mix(sets, world_size=world_size, rank=r, decode=[(), (), None], map=[label, label, one])
            for r in range(world_size)
        ]

    reference = global_stream(ranks(), 0, 10)
    assert set(reference) >= {1, 0} and max(reference) < 2000
    for workers in (2, 3):
        assert global_stream(ranks(), workers, 10) == reference


def one(sample: dict[str, Any]) -> int:
    """Set 2's map in a test: its samples become 1, undecoded."""
    assert isinstance(sample["cls"], bytes)
    return 1


def test_bad_per_set_decode_and_map_lists_are_refused_naming_them(
    sets: list[list[str]],
) -> None:
    missing = [["/nonexistent/a.tar"], ["/nonexistent/b.tar"]]  # checked before any read
    with pytest.raises(ValueError, match=r"decode=\['rgb8', 'l8'\] is ambiguous with 2 shard"):
        WebDatasetMix(missing, [1, 1], seed=0, batch_size=1, decode=["rgb8", "l8"])
    with pytest.raises(ValueError, match=r"pass a tuple, decode=\('rgb8', 'l8'\), for one dec"):
        WebDatasetMix(missing, [1, 1], seed=0, batch_size=1, decode=["rgb8", "l8"])
    with pytest.raises(ValueError, match=r"wrap each set's entry, decode=\[\('rgb8',\), \('l8'"):
        WebDatasetMix(missing, [1, 1], seed=0, batch_size=1, decode=["rgb8", "l8"])
    with pytest.raises(ValueError, match=r"decode should be one decode value for every shard set"):
        WebDatasetMix(missing, [1, 1], seed=0, batch_size=1, decode=[None, "rgb8", None])
    with pytest.raises(TypeError, match=r"decode\[1\] should be shard set 1's decode: .* but got"):
        WebDatasetMix(missing, [1, 1], seed=0, batch_size=1, decode=[None, 5])
    with pytest.raises(ValueError, match=r"map should be one callable for every shard set or a l"):
        WebDatasetMix(missing, [1, 1], seed=0, batch_size=1, map=[label])
    with pytest.raises(TypeError, match=r"map\[0\] should be shard set 0's map, a callable or No"):
        WebDatasetMix(missing, [1, 1], seed=0, batch_size=1, map=["cls", None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"map should be a callable or None for every shard set"):
        WebDatasetMix(missing, [1, 1], seed=0, batch_size=1, map=(label, label))  # type: ignore[arg-type]
    # A list of handlers of another length is one decoder, as WebDatasetSource reads it.
    source = per_set(sets, decode=["rgb8"], map=label)
    assert source._stages is None and source.decoder is not None
    # A per-set list of no decoding anywhere is no decoding.
    undecoded = [s for b in take_all(per_set(sets, decode=[None] * 3), 3) for s in b]
    assert undecoded == [s for b in take_all(per_set(sets), 3) for s in b]


# -- pickling (spawned workers) ----------------------------------------------------------


@settings(max_examples=10, deadline=None)
@given(batches=st.lists(st.integers(0, 10**8), min_size=1, max_size=4))
def test_an_unpickled_mixture_gives_the_same_batches_at_any_position(
    sets: list[list[str]], batches: list[int]
) -> None:
    source = mix(sets, window=1024, shuffle_window=0, shuffle_block_shards=2, batch_size=5)
    for batch in batches:
        source.batch_at(batch)  # builds some of the arrangement tables
    data = pickle.dumps(source)
    assert len(data) < 100_000  # the tables (about 3 MB here) stay behind
    copy = pickle.loads(data)
    for batch in [*batches, 0, 10**6 + 7]:
        assert copy.batch_at(batch).tolist() == source.batch_at(batch).tolist()


@pytest.mark.workers
@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_spawned_worker_reads_what_the_main_process_reads(sets: list[list[str]]) -> None:
    def source() -> WebDatasetMix:
        return mix(
            sets,
            window=1024,
            batch_size=4,
            shuffle_window=0,
            shuffle_block_shards=2,
            decode=[(), (), None],
            map=[label, label, one],
        )

    loader = WebDataLoader(source(), num_workers=1, multiprocessing_context="spawn")
    got = [b.tolist() for _, b in zip(range(6), loader, strict=False)]
    assert got == take(iter(source()), 6)


# -- a shard set added at a resume (NOTE [ adding a component ]) ----------------------------


def added(
    sets: list[list[str]], at: int, two: Any = (0.6, 0.4), three: Any = (0.3, 0.2, 0.5), **kw: Any
) -> WebDatasetMix:
    """``sets[:2]`` mixed with ``two``, then ``sets[2]`` entering at ``at`` with ``three``."""
    return mix(sets, two, curriculum=[(at, list(three))], **kw)


@settings(max_examples=4, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    two=st.lists(st.integers(1, 9), min_size=2, max_size=2),
    three=st.lists(st.integers(1, 9), min_size=3, max_size=3),
    later=st.integers(0, 3),
)
def test_resuming_anywhere_with_a_shard_set_added_gives_the_run_that_had_it_from_there(
    sets: list[list[str]], seed: int, two: list[int], three: list[int], later: int
) -> None:
    before = stream(mix(sets[:2], two, seed=seed), 40)
    for position in range(1, 31):
        entry = position + later
        straight = stream(added(sets, entry, two, three, seed=seed), entry + 12)
        assert straight[:entry] == before[:entry]  # the past is the saved run's
        saved = mix(sets[:2], two, seed=seed).state_dict()
        resumed = added(sets, entry, two, three, seed=seed, batch_size=3)
        resumed.load_state_dict(json.loads(json.dumps({**saved, "position": position})))
        tail = [x for b in take(iter(resumed), 4) for x in b]
        assert tail == straight[position:][:12]


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**32), entry=st.integers(1, 40))
def test_an_added_shard_set_starts_at_its_own_position_0_and_the_others_continue(
    sets: list[list[str]], seed: int, entry: int
) -> None:
    before = stream(mix(sets[:2], (0.6, 0.4), seed=seed), 400)
    after = stream(added(sets, entry, seed=seed), 400)
    for k in range(3):
        options: dict[str, Any] = {"shuffle_window": 3, "decode": (), "map": label}
        single = stream(
            WebDatasetSource(
                sets[k], seed=derive(seed, "mix-component", k), batch_size=1, **options
            ),
            400,
        )
        own = [x for x in after if x // 1000 == k]
        assert own == single[: len(own)]  # each set's own stream, from its position 0
        if k < 2:  # an old set: its samples before the entry, then where it was
            assert own[: sum(x // 1000 == k for x in before[:entry])] == [
                x for x in before[:entry] if x // 1000 == k
            ]
        epochs = len(own) // SIZES[k]
        assert epochs >= (1 if k == 2 else 2)
        for e in range(epochs):  # every sample once per set epoch
            assert sorted(own[e * SIZES[k] : (e + 1) * SIZES[k]]) == [
                k * 1000 + i for i in range(SIZES[k])
            ]


@pytest.mark.parametrize(("before", "after"), [((2, 3), (3, 2)), ((1, 6), (4, 1))])
def test_a_shard_set_added_at_an_elastic_resume_continues_the_same_global_batches(
    sets: list[list[str]], before: tuple[int, int], after: tuple[int, int]
) -> None:
    first = [
        mix(sets[:2], (0.6, 0.4), batch_size=before[1], world_size=before[0], rank=r)
        for r in range(before[0])
    ]
    head = global_stream(first, 0, 3)
    state = json.loads(json.dumps(first[0].state_dict()))
    start = state["position"]
    straight = stream(added(sets, start), start + 60)
    assert head == straight[:start]
    second = [
        added(sets, start, batch_size=after[1], world_size=after[0], rank=r)
        for r in range(after[0])
    ]
    for source in second:
        source.load_state_dict(state)
    assert second[0].state_dict()["mixture"]["consumed"][2] == 0  # it enters here
    for workers in (2, 0):  # the workers' iterators leave the position where it was
        assert (
            global_stream(second, workers, 5) == straight[start : start + 5 * after[0] * after[1]]
        )
    assert second[0].state_dict()["mixture"]["consumed"][2] > 0


def test_a_second_shard_set_can_join_at_a_later_resume(sets: list[list[str]]) -> None:
    one = mix(sets[:1], (1,))
    saved = {**one.state_dict(), "position": 7}
    grown = mix(sets[:2], (1,), curriculum=[(7, [1, 1])])
    grown.load_state_dict(saved)
    saved = {**grown.state_dict(), "position": 15}
    final = mix(sets, (1,), curriculum=[(7, [1, 1]), (15, [1, 1, 2])])
    final.load_state_dict(json.loads(json.dumps(saved)))
    straight = stream(mix(sets, (1,), curriculum=[(7, [1, 1]), (15, [1, 1, 2])]), 27)
    assert straight[:7] == stream(one, 7)
    assert [x for b in take(iter(final), 6) for x in b] == straight[15:]


def test_removing_reordering_inserting_or_adding_a_set_too_early_is_refused_naming_it(
    sets: list[list[str]],
) -> None:
    state = {**mix(sets[:2], (0.6, 0.4)).state_dict(), "position": 10}
    with pytest.raises(ReproducibilityError, match=r"urls\[2:\] enter this mixture at position 0"):
        mix(sets, (0.3, 0.2, 0.5)).load_state_dict(state)
    with pytest.raises(
        ReproducibilityError,
        match=r"urls\[2:\] enter the mixture at position 9 .* start that segment at position 10",
    ):
        added(sets, 9).load_state_dict(state)
    with pytest.raises(ReproducibilityError, match=r"urls\[1\] is not the saved run's urls\[1\]"):
        added([sets[0], sets[2], sets[1]], 10).load_state_dict(state)  # inserted
    with pytest.raises(ReproducibilityError, match=r"urls\[0\] is not the saved run's urls\[0\]"):
        added([sets[1], sets[0], sets[2]], 10).load_state_dict(state)  # reordered, then added
    three = {**mix(sets).state_dict(), "position": 10}
    with pytest.raises(
        ReproducibilityError,
        match=r"saved with 3 shard sets, but urls name 2; a shard set cannot be removed .* "
        r"weight 0 in a curriculum segment from position 10 on",
    ):
        mix(sets[:2], (1, 1)).load_state_dict(three)
    with pytest.raises(ReproducibilityError, match=r"the shard sets are in another order than"):
        mix([sets[1], sets[0], sets[2]]).load_state_dict(three)
    with pytest.raises(ReproducibilityError, match=r"fingerprint does not match"):
        added(sets, 10).load_state_dict({**state, "fingerprint": "0" * 16})
    added(sets, 10).load_state_dict(state)  # appended last, from the reached position: taken


def test_a_set_named_by_no_segment_or_leaving_one_is_refused_at_construction(
    sets: list[list[str]],
) -> None:
    with pytest.raises(
        ValueError,
        match=r"weights should have one weight per shard set in urls \(3\), but got 2: "
        r"weights=\[0.6, 0.4\]; to add a shard set at a resume, append its urls last",
    ):
        mix(sets, (0.6, 0.4))
    with pytest.raises(
        ValueError, match=r"curriculum\[0\] weights should have one weight per shard set in urls"
    ):
        mix(sets, (0.6, 0.4), curriculum=[(5, [1, 1])])
    with pytest.raises(ValueError, match=r"names 2, and a shard set cannot leave a mixture"):
        mix(sets, (0.6, 0.4), curriculum=[(5, [1]), (9, [1, 1, 1])])


def test_a_long_stream_builds_the_tables_at_once_and_reads_the_same_samples(
    sets: list[list[str]],
) -> None:
    # Once a stream has asked for as many windows as a segment has arrangements, the segment
    # builds them all at once (then the kernel may take over); the law it reads is the one a
    # reference that builds only the arrangements each step touches gives.
    source = mix(sets, (0.6, 0.25, 0.15), batch_size=64, curriculum=[(1500, [1, 1, 1])])
    labels = [x for b in take(iter(source), 80) for x in b]
    law = MixSampler(
        [range(n) for n in SIZES], [0.6, 0.25, 0.15], 0, curriculum=[(1500, [1, 1, 1])]
    )
    for segment in law._segments:
        segment._requested = -(2**62)  # the reference never builds them all at once
    component = np.concatenate([law.locate(np.arange(p, p + 8))[0] for p in range(0, 5120, 8)])
    assert [x // 1000 for x in labels] == component.tolist()
    assert [s._all_built for s in source.mixture._segments] == [False, True]
    # Each set's position too: the shard and sample of every position, as the law gives them.
    steps = [law.locate(np.arange(p, p + 8)) for p in range(0, 5120, 8)]
    expected = []
    for k, q in steps:
        for c, n in zip(k.tolist(), q.tolist(), strict=True):
            shard, sample = source._order.orders[c].locate(np.array([n]))
            expected.append((int(shard[0]) + int(source._order.offsets[c]), int(sample[0])))
    assert source.locate(range(5120)) == expected
    assert not any(s._all_built for s in law._segments)  # the reference built a few at a time


def test_shard_sets_given_as_pathlib_paths_mix_as_their_strings(sets: list[list[str]]) -> None:
    as_paths: list[Any] = [[Path(u) for u in sets[0]], Path(sets[1][0]), sets[2]]
    as_text = [sets[0], sets[1][0], sets[2]]
    assert take(iter(mix(as_paths)), 12) == take(iter(mix(as_text)), 12)
    assert mix(as_paths).state_dict() == mix(as_text).state_dict()
