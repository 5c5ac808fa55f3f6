"""The benchmark harness and the peer adapters: small inputs, behaviour only (no timing)."""

from __future__ import annotations

import doctest
import itertools
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from harness import capability, fmt, table, timing  # noqa: E402
from harness.table import Cell, Table  # noqa: E402
from peers import all_peers, ours, with_question  # noqa: E402

HAVE_GRAIN = all(p.missing() is None for p in all_peers() if p.module == "grain")
HAVE_DATASETS = all(p.missing() is None for p in all_peers() if p.module == "datasets")


@pytest.mark.parametrize("module", [capability, timing])
def test_the_harness_examples_run_as_doctests(module: object) -> None:
    failures, tried = doctest.testmod(module)  # type: ignore[arg-type]
    assert tried > 0
    assert failures == 0


def test_every_question_has_us_first_and_a_peer_beside_us() -> None:
    peers = all_peers()
    assert peers[0].name == "detsamplers"
    assert len({p.name for p in peers}) == len(peers)
    for question in ("index_batches", "resume", "shuffle_first", "shards", "capability"):
        names = [p.name for p in with_question(question)]
        assert names[0] == "detsamplers", question
        assert len(names) >= 2, question


def test_a_table_renders_its_machine_line_rows_and_wrapped_notes() -> None:
    rows = [["1", table.show(Cell("capped", 2e6), fmt.fmt_rate)]]
    text = table.render(Table("x", "A title", ["W", "rate"], rows, ["n " * 80], []), "machine")
    lines = text.splitlines()
    assert lines[:2] == ["Table x. A title", "machine"]
    assert "2 M/s*" in text
    assert max(len(line) for line in lines) <= 100


def test_a_missing_cell_shows_its_note_and_no_ratio() -> None:
    missing = table.not_installed("not installed (pip install grain)")
    assert table.show(missing, fmt.fmt_time) == "not installed (pip install grain)"
    assert table.show_ratio(Cell("ok", 1.0), missing) == "-"
    assert json.dumps(table.jsonable({"a": [missing]}))


def test_alternating_orders_put_each_peer_first_in_turn() -> None:
    orders = timing.alternating(["a", "b"], 3)
    assert orders == [["a", "b"], ["b", "a"], ["a", "b"]]
    calls: list[str] = []
    out = timing.interleaved({"a": lambda: calls.append("a") or 1, "b": lambda: 2}, 2)
    assert out == {"a": [1, 1], "b": [2, 2]}
    assert calls == ["a", "a"]


@pytest.mark.parametrize("world", [1, 3])
def test_our_index_adapter_yields_batches_of_records(world: int) -> None:
    batches = ours.index_batches(100, world, 0, 8)
    first = next(iter(batches))
    assert len(first) == 8
    assert all(0 <= i < 100 for i in first)


def test_our_resume_adapter_returns_the_batch_at_the_position() -> None:
    chain = iter(ours.index_batches(100, 1, 0, 8))
    expected = [next(chain) for _ in range(40)][-1]
    assert list(ours.resume(100, 8, 39 * 8)()) == list(expected)


def test_our_shard_adapter_reads_every_sample_once_and_resumes(tmp_path: Path) -> None:
    urls = ours.write_tar(str(tmp_path), 40, 10)
    seen = [i for batch in ours.shard_epoch(urls, 0, 8) for i in batch]
    assert sorted(seen) == list(range(40))
    # Samples shuffled within shards, as the peers' (question 4): not tar order in a shard.
    assert any(a > b and a // 10 == b // 10 for a, b in itertools.pairwise(seen))
    endless = ours.source(urls, 8, shuffle_window=ours.SAMPLE_WINDOW)
    stream = [b[1].tolist() for _, b in zip(range(12), endless, strict=False)]
    assert ours.shard_resume(urls, 8, 11 * 8)() == stream[11]


def test_the_capability_check_fails_a_resume_that_changes_the_stream() -> None:
    reference = [[0, 1], [2, 3], [4, 5]]
    assert capability.same_stream(reference, [[0, 1], [2, 3], [4, 5]])
    assert not capability.same_stream(reference, [[0, 1], [2, 3]])
    assert not capability.same_stream(reference, [[0, 1], [3, 2], [4, 5]])
    assert not capability.same_stream(reference, [[0, 1], [2, 4], [3, 5]], ordered=False)

    def refuses() -> bool:
        raise ValueError("worker count differs")

    assert capability.outcome(refuses) == "no (raises ValueError)"
    assert capability.show(False) == "no"


def test_a_resume_with_another_seed_is_caught_as_not_exact() -> None:
    other = ours.ds.make_batch_sampler(
        range(160), "training", shuffle_seed=1, num_workers=1, rank=0, batch_size=16, skip=13
    )
    reference = ours._chain_stream(1, 0, 0)[13:]
    assert capability.take(other, 12) != reference
    assert not capability.same_stream(reference, capability.take(other, 12))


@pytest.mark.skipif(not HAVE_GRAIN, reason="grain is not installed")
def test_grain_state_written_for_a_position_equals_the_state_after_iterating() -> None:
    from peers import grain_index

    n, batch, steps = 200, 8, 7
    iterator = iter(grain_index.loader(n, batch))
    for _ in range(steps):
        next(iterator)
    walked = json.loads(iterator.get_state())
    written = json.loads(grain_index.loader_state(n, batch, steps * batch))
    assert written == walked
    expected = next(iterator).tolist()
    assert list(grain_index.loader_resume(n, batch, steps * batch)()) == expected


@pytest.mark.skipif(not HAVE_GRAIN, reason="grain is not installed")
def test_grain_adapters_yield_batches_of_records_of_their_rank() -> None:
    from peers import grain_index

    for make in (grain_index.map_batches, grain_index.sampler_batches):
        first = list(next(iter(make(64, 2, 1, 8))))
        assert len(first) == 8
        assert all(0 <= int(i) < 64 for i in first)
    dataset = grain_index.map_dataset(64, 1, 0, 8)
    epoch = [int(i) for b in (dataset[k] for k in range(8)) for i in b]
    assert sorted(epoch) == list(range(64))


@pytest.mark.skipif(not HAVE_GRAIN, reason="grain is not installed")
def test_grain_resumes_the_same_batch_with_its_in_memory_and_its_default_read_options() -> None:
    from peers import grain_index

    n, batch, position = 200, 8, 7 * 8
    iterator = iter(grain_index.map_dataset(n, 1, 0, batch).to_iter_dataset())
    for _ in range(position // batch):
        next(iterator)
    expected = [int(i) for i in next(iterator)]
    for defaults in (False, True):
        assert [int(i) for i in grain_index.map_resume(n, batch, position, defaults)()] == expected
    sampled = [int(i) for i in grain_index.loader_resume(n, batch, position)()]
    assert sampled == [int(i) for i in grain_index.loader_resume(n, batch, position, True)()]
    options = grain_index.in_memory()
    assert (options.num_threads, options.prefetch_buffer_size) == (0, 0)


@pytest.mark.skipif(not HAVE_DATASETS, reason="datasets is not installed")
@pytest.mark.parametrize("world", [1, 8, 64, 128, 1024])
def test_hf_splits_by_whole_shards_at_every_world_size_of_the_table(world: int) -> None:
    from peers import hf_datasets

    assert hf_datasets.shards(world) % world == 0
    assert hf_datasets.shards(world) in (hf_datasets.SHARDS, world)


@pytest.mark.skipif(not HAVE_DATASETS, reason="datasets is not installed")
def test_hf_ranks_beyond_its_64_shards_read_whole_shards_of_their_own() -> None:
    from peers import hf_datasets

    world, n = 128, 128 * 4
    firsts = [
        {int(i) for i in next(iter(hf_datasets.index_batches(n, world, rank, 4)))}
        for rank in (0, 1, 127)
    ]
    # a whole shard each (4 neighbouring rows), not one row in 128 of the whole stream
    assert all(len(rows) == 4 and max(rows) - min(rows) == 3 for rows in firsts)
    assert not firsts[0] & firsts[1] and not firsts[1] & firsts[2] and not firsts[0] & firsts[2]


@pytest.mark.skipif(not HAVE_DATASETS, reason="datasets is not installed")
def test_our_arrow_rows_column_reads_the_rows_our_chain_names() -> None:
    from peers import hf_datasets

    for world, rank in ((1, 0), (8, 3)):
        rows = hf_datasets.ours_rows(1000, world, rank, 32)
        indices = iter(ours.index_batches(1000, world, rank, 32))
        for _ in range(40):
            assert list(next(rows)) == list(next(indices))


@pytest.mark.skipif(not HAVE_DATASETS, reason="datasets is not installed")
def test_the_hf_adapter_yields_each_record_once_per_epoch() -> None:
    from peers import hf_datasets

    batches = iter(hf_datasets.index_batches(64, 1, 0, 8))
    epoch = [int(i) for _ in range(8) for i in next(batches)]
    assert sorted(epoch) == list(range(64))


def test_cells_survive_the_json_round_trip_of_a_peer_run_in_its_own_venv() -> None:
    figures = {"peer": {"1000": Cell("ok", 1.5, [1.5, 2.0]), "x": [Cell("skipped", note="n")]}}
    back = table.from_jsonable(json.loads(json.dumps(table.jsonable(figures))))
    assert back == figures
    assert table.from_jsonable({"status": "ok"}) == {"status": "ok"}  # not every field: a dict


def test_a_peer_in_a_venv_runs_there_only_when_the_venv_exists(tmp_path: Path) -> None:
    import peers

    absent = peers.Peer("p", "no-such-dist", "no_such_module_16c", venv="no-such-venv")
    assert absent.elsewhere() is None
    assert absent.missing() == "not installed (no no-such-venv: make mosaic)"
    present = peers.Peer("p", "no-such-dist", "no_such_module_16c", venv=".venv")
    python = peers.ROOT / ".venv" / "bin" / "python"
    assert present.elsewhere() == (str(python) if python.exists() else None)
    here = peers.Peer("p", "pytest", "pytest", venv="no-such-venv")
    assert here.elsewhere() is None and here.missing() is None


def test_the_mosaic_adapter_imports_without_mosaic() -> None:
    names = {p.name for p in all_peers()}
    assert {"Mosaic streaming", "Mosaic py1e", "Mosaic naive"} <= names


@pytest.mark.distributed
def test_a_resume_on_another_world_size_runs_on_real_ranks() -> None:
    # Our chain saved on 2 ranks after 13 global steps resumes on 1 with the same rest.
    outcome = capability.world_change("peers.ours", {}, (2, 1), 25, 13, 16)
    assert outcome is True
