"""detsamplers.testing.check_resume: planted faults are caught and named, fixed twins pass."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import testing_pipelines as pipelines
import torch
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st
from torchdata.stateful_dataloader import StatefulDataLoader

from detsamplers.loader import DataLoader
from detsamplers.testing import (
    Config,
    StateRoute,
    check_resume,
    configs,
    first_difference,
    pause_points,
)

WORKERS = [Config(num_workers=0), Config(num_workers=2)]

FAULTS = [
    (
        pipelines.global_rng_in_getitem,
        Config(),
        r"Augmented.__getitem__ draws from the global RNG \(torch, numpy\), which a resumed "
        "process does not restore",
    ),
    (
        pipelines.reseeding_worker_init,
        Config(num_workers=2),
        r"Likely cause: worker_init_fn reseeds the global RNG \(torch, numpy, random\)",
    ),
    (
        pipelines.shuffle_outside_chain,
        Config(),
        "Likely cause: two builds of the dataset hold different records at index 0: the "
        "factory draws its contents",
    ),
    (
        pipelines.torch_random_sampler,
        Config(),
        "Likely cause: the order depends on the global RNG: a shuffle outside the detsamplers "
        r"chain \(two loaders built and iterated under different global seeds start with "
        "indices",
    ),
    (
        pipelines.collate_own_rng,
        Config(),
        r"at \['lam'\]: tensor value: .* Likely cause: collate_fn \(OwnRngCollate\) keeps "
        "state between calls or draws from a generator of its own",
    ),
    (
        pipelines.collate_global_rng,
        Config(),
        r"Likely cause: collate_fn draws from the global RNG \(numpy\)",
    ),
    (
        pipelines.stateful_dataset,
        Config(),
        r"batch 2 on rank 0 \(the 1st after the resume\) differs from the uninterrupted run "
        r"at \['x'\]: tensor element \[0, 0\]: .* Likely cause: the dataset keeps state "
        r"between calls: Counting\[",
    ),
]


@pytest.mark.parametrize(
    ("factory", "run", "message"), FAULTS, ids=lambda v: getattr(v, "__name__", "")
)
def test_every_planted_fault_is_caught_with_its_cause(
    factory: Any, run: Config, message: str
) -> None:
    with pytest.raises(AssertionError, match=message):
        check_resume(factory, pauses=[2, 4], batches=6, run=run, resume=WORKERS)


ELASTIC = [*WORKERS, Config(world_size=2, num_workers=2)]


@pytest.mark.workers
@pytest.mark.parametrize(
    ("factory", "resume"),
    [
        # Draws seeded per batch resume on the same grid (another grid: the test below).
        (pipelines.global_rng_in_getitem_fixed, WORKERS),
        (pipelines.reseeding_worker_init_fixed, WORKERS),
        (pipelines.shuffle_outside_chain_fixed, ELASTIC),
        (pipelines.collate_fixed, WORKERS),
        (pipelines.stateful_dataset_fixed, ELASTIC),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_the_fixed_twins_pass_with_workers_and_other_world_sizes(
    factory: Any, resume: list[Config]
) -> None:
    report = check_resume(
        factory, pauses=[2, 4], batches=6, run=Config(num_workers=2), resume=resume
    )
    assert report.pauses == [2, 4]
    assert report.route == "loader.state_dict()"


@pytest.mark.workers
def test_per_batch_draws_under_another_world_size_point_to_per_record_seeding() -> None:
    with pytest.raises(
        AssertionError,
        match="the 1st batch after the resume on rank 0 differs from the uninterrupted run "
        r"\(sample 10: record 2 of batch 2 on rank 0 in the uninterrupted run\) at \[1\]\['x'\]: "
        r"tensor element \[1\].* pass DataLoader\(seeding='record'\)",
    ):
        check_resume(pipelines.per_batch_draws, pauses=[2], batches=6, resume=Config(world_size=2))
    check_resume(
        pipelines.per_record_draws,
        pauses=[1, 3],
        batches=6,
        resume=[Config(world_size=2), Config(world_size=3, batch_size=2, num_workers=2)],
    )


@pytest.mark.workers
def test_a_torch_loader_over_the_chain_goes_through_its_batch_sampler_paused_without_workers() -> (
    None
):
    def factory(rank: int, world_size: int, num_workers: int) -> Any:
        return pipelines._torch_loader(pipelines.Plain(), rank, world_size, num_workers)

    two = Config(num_workers=2)
    report = check_resume(
        factory, pauses=[2, 3], batches=5, run=two, resume=[two, Config(world_size=2)]
    )
    assert report.route == "loader.batch_sampler.state_dict()"


@pytest.mark.workers
def test_a_stateful_dataloader_pauses_with_workers_through_its_own_state() -> None:
    def factory(rank: int, world_size: int, num_workers: int) -> Any:
        loader = DataLoader(
            pipelines.Augmented(), batch_size=4, shuffle=True, seed=1, num_workers=num_workers
        )
        return loader.get_data_loader(
            repeat=True, num_replicas=world_size, rank=rank, loader_class=StatefulDataLoader
        )

    two = Config(num_workers=2)
    report = check_resume(factory, pauses=[1, 3], batches=5, run=two, resume=two)
    assert report.route == "loader.state_dict()"
    # torchdata's own limit: a state saved with workers needs as many workers to load.
    with pytest.raises(
        AssertionError,
        match=r"the state saved by rank 0 after 1 batches \(world size 1, num_workers=2\) "
        r"does not load into rank 0 \(world size 1, num_workers=0\) through "
        r"loader.state_dict\(\): AssertionError: State doesn't contain key",
    ):
        check_resume(factory, pauses=[1], batches=3, run=two, resume=Config(num_workers=0))


def test_a_loader_without_state_is_refused_with_the_fix() -> None:
    def factory(rank: int, world_size: int, num_workers: int) -> Any:
        return tud.DataLoader(pipelines.Plain(), batch_size=4)

    with pytest.raises(
        AssertionError,
        match=r"this DataLoader cannot be resumed: neither it nor its batch sampler "
        r"\(BatchSampler\)",
    ):
        check_resume(factory, pauses=[1], batches=3)


def test_a_state_that_json_cannot_carry_is_named_and_the_torch_route_carries_it() -> None:
    def factory(rank: int, world_size: int, num_workers: int) -> Any:
        return DataLoader(pipelines.Plain(), batch_size=4, seed=2).get_data_loader(repeat=True)

    def save(loader: Any) -> Any:
        return {"sampler": loader.batch_sampler.state_dict(), "t": torch.zeros(1)}

    def load(loader: Any, state: Any) -> None:
        loader.batch_sampler.load_state_dict(state["sampler"])

    with pytest.raises(AssertionError, match="does not survive a JSON round trip"):
        check_resume(factory, route=StateRoute(save, load, name="my checkpoint"))
    check_resume(factory, route=StateRoute(save, load, encoding="torch", exact_with_workers=False))


def test_a_state_that_does_not_load_names_both_configurations() -> None:
    def factory(rank: int, world_size: int, num_workers: int) -> Any:
        batches = tud.BatchSampler(tud.SequentialSampler(range(40)), 4, drop_last=False)
        return DataLoader(pipelines.Plain(), batch_sampler=batches, num_workers=num_workers)

    # Batches fixed by the user's batch sampler cannot move to another world size.
    with pytest.raises(
        AssertionError,
        match=r"the state saved by rank 0 after 2 batches \(world size 1, num_workers=0\) does "
        r"not load into rank 0 \(world size 2, num_workers=0\) through "
        r"loader.state_dict\(\): ReproducibilityError: cannot load this state",
    ):
        check_resume(factory, resume=Config(world_size=2))


def test_a_loader_that_ends_early_is_reported() -> None:
    def factory(rank: int, world_size: int, num_workers: int) -> Any:
        return DataLoader(pipelines.Plain(8), batch_size=4).get_data_loader()

    with pytest.raises(AssertionError, match="ended after 2 batches, but the check needs 6"):
        check_resume(factory)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"pauses": [6]}, ValueError, "pauses should be below batches=6, but got pause 6"),
        ({"pauses": []}, ValueError, "pauses should name at least one pause point"),
        ({"pauses": [0]}, ValueError, "pauses should be"),
        ({"batches": 1}, ValueError, "batches should be"),
        ({"resume": [1]}, TypeError, "resume should be a Config or a non-empty list of Config"),
        (
            {"route": "disk"},
            ValueError,
            "route should be 'auto' or a StateRoute, but got route='disk'",
        ),
    ],
)
def test_bad_arguments_name_the_parameter(
    kwargs: dict[str, Any], error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        check_resume(pipelines.stateful_dataset_fixed, **kwargs)


def test_bad_configs_and_factories_name_the_parameter() -> None:
    with pytest.raises(ValueError, match="world_size should be"):
        Config(world_size=0)
    with pytest.raises(TypeError, match="num_workers should be"):
        Config(num_workers=True)
    with pytest.raises(TypeError, match="factory should be a callable that builds a loader"):
        check_resume(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"factory should return a loader .* but it returned int"):
        check_resume(lambda rank, world_size, num_workers: 3)


@settings(max_examples=8)
@given(
    pauses=pause_points(batches=6),
    resume=configs(world_sizes=st.integers(1, 3), num_workers=st.just(0)),
)
def test_a_correct_pipeline_passes_for_any_pauses_and_configuration(
    pauses: list[int], resume: Config
) -> None:
    report = check_resume(pipelines.per_record_draws, pauses, batches=6, resume=resume)
    assert report.pauses == pauses


# -- exact comparison ----------------------------------------------------------------------


def test_first_difference_names_the_path_and_element_in_nested_batches() -> None:
    a = {"img": torch.zeros(2, 3), "meta": ({"id": "a"}, [1, 2.5]), "arr": np.arange(4)}
    b = {"img": torch.zeros(2, 3), "meta": ({"id": "a"}, [1, 2.5]), "arr": np.arange(4)}
    assert first_difference(a, b) is None
    b["img"][1, 2] = 1
    assert (
        first_difference(a, b).describe()
        == "at ['img']: tensor element [1, 2]: expected 0.0, got 1.0"
    )  # type: ignore[union-attr]
    b["img"][1, 2] = 0
    b["meta"][0]["id"] = "b"
    assert first_difference(a, b).describe() == "at ['meta'][0]['id']: value: expected 'a', got 'b'"  # type: ignore[union-attr]
    b["meta"] = ({"id": "a"}, [1, 2.5])
    b["arr"] = np.arange(4).astype(np.int32)
    assert "array dtype" in first_difference(a, b).describe()  # type: ignore[union-attr]
    assert "tensor shape" in first_difference(torch.zeros(2), torch.zeros(3)).describe()  # type: ignore[union-attr]
    assert first_difference(torch.tensor([math.nan]), torch.tensor([math.nan])) is None
    assert first_difference(torch.zeros(1), np.zeros(1)).what == "type"  # type: ignore[union-attr]


@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    data=st.data(),
)
def test_first_difference_finds_any_single_changed_element(
    shape: list[int], data: st.DataObject
) -> None:
    a = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    index = tuple(data.draw(st.integers(0, n - 1)) for n in shape)
    b = a.clone()
    b[index] += 0.5
    difference = first_difference({"x": [a]}, {"x": [b]})
    assert difference is not None
    assert difference.path == "['x'][0]"
    assert difference.what == f"tensor element {list(index)}"
