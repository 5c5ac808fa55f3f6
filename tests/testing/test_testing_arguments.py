"""Hostile arguments to the kit: wrong types, factories of the wrong shape or that misbehave."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import testing_pipelines as pipelines
from hypothesis import strategies as st

from detsamplers.loader import DataLoader
from detsamplers.testing import Config, StateRoute, check_resume, check_trial_resume, configs
from detsamplers.trial import Trial

GOOD = pipelines.stateful_dataset_fixed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"factory": None}, "factory should be a callable that builds a loader, but got None"),
        ({"pauses": 3}, r"pauses should be a list of ints .* but got int 3; pass pauses=\[3\]"),
        ({"pauses": "13"}, "pauses should be a list of ints .* but got str '13'"),
        ({"pauses": [1.5]}, "pauses should be"),
        ({"batches": "6"}, "batches should be"),
        ({"run": [Config()]}, r"run should be a Config or None, but got list \[Config"),
        ({"resume": 2}, "resume should be a Config or a non-empty list of Config, but got 2"),
        ({"route": 5}, "route should be 'auto' or a StateRoute, but got int 5"),
        ({"equal": 3}, r"equal should be None or a function equal\(a, b\) -> bool, but got int"),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else "",
)
def test_every_argument_of_the_wrong_type_is_a_type_error_naming_it(
    kwargs: dict[str, Any], message: str
) -> None:
    arguments: dict[str, Any] = {"factory": GOOD, **kwargs}
    with pytest.raises(TypeError, match=message):
        check_resume(**arguments)


class Calls:
    def __init__(self) -> None:
        self.count = 0


def test_a_factory_of_the_wrong_shape_is_refused_before_any_call_with_both_shapes() -> None:
    calls = Calls()

    def make_loader(dataset: Any, batch_size: int) -> Any:
        calls.count += 1
        return DataLoader(dataset, batch_size=batch_size)

    with pytest.raises(
        TypeError,
        match=r"factory should take the keyword arguments rank, world_size, num_workers, but "
        r".*make_loader\(dataset: 'Any', batch_size: 'int'\) cannot \(missing a required "
        r"argument: 'dataset'\); define it as def factory\(rank, world_size, num_workers\)",
    ):
        check_resume(make_loader)
    assert calls.count == 0


def test_a_factory_without_batch_size_is_refused_when_a_config_sets_one() -> None:
    with pytest.raises(
        TypeError,
        match=r"keyword arguments rank, world_size, num_workers, batch_size \(a Config sets "
        r"batch_size\), but .*stateful_dataset_fixed\(rank: 'int', world_size: 'int', "
        r"num_workers: 'int'\) cannot \(got an unexpected keyword argument 'batch_size'\)",
    ):
        check_resume(GOOD, resume=Config(world_size=2, batch_size=2))


def test_factories_of_other_fitting_shapes_pass() -> None:
    def keywords(**kwargs: Any) -> Any:
        return pipelines.per_record_draws(**kwargs)

    for factory in (functools.partial(pipelines.per_record_draws), keywords):
        check_resume(factory, pauses=[1], batches=3, resume=Config(world_size=2, batch_size=2))


def test_what_a_factory_raises_goes_up_unchanged_noting_the_rank_and_configuration() -> None:
    def broken(rank: int, world_size: int, num_workers: int) -> Any:
        if rank == 1:
            raise FileNotFoundError("shard-00001.tar")
        return GOOD(rank, world_size, num_workers)

    with pytest.raises(FileNotFoundError, match=r"shard-00001\.tar") as caught:
        check_resume(broken, run=Config(world_size=2))
    assert caught.value.__notes__ == [
        "(raised by the factory test_what_a_factory_raises_goes_up_unchanged_noting_the_rank_"
        "and_configuration.<locals>.broken building rank 1's loader for world size 2, "
        "num_workers=0, in detsamplers.testing's resume check)"
    ]


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (None, r"factory should return a loader .* but .*<lambda> returned None for rank 0 "
         r"\(world size 1, num_workers=0\); return the loader it builds"),
        (3, r"factory should return a loader .* but it returned int for rank 0 \(world size 1, "
         r"num_workers=0\)"),
    ],
)  # fmt: skip
def test_a_factory_returning_none_or_a_non_iterable_is_named(returned: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        check_resume(lambda rank, world_size, num_workers: returned)


def _save(loader: Any) -> Any:
    return loader.state_dict()


def _load(loader: Any, state: Any) -> None:
    loader.load_state_dict(state)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"save": 1}, "save should be a callable, but got 1"),
        ({"encoding": 5}, "encoding should be 'json', 'torch' or None, but got int 5"),
        ({"name": 3}, "name should be a str, but got int 3"),
        ({"exact_with_workers": "yes"}, "exact_with_workers should be a bool, but got str 'yes'"),
    ],
)
def test_a_state_route_of_wrong_types_names_the_field(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"save": _save, "load": _load, **kwargs}
    with pytest.raises(TypeError, match=message):
        StateRoute(**arguments)


def test_configs_takes_strategies_only() -> None:
    with pytest.raises(
        TypeError,
        match=r"world_sizes should be a hypothesis strategy or None, but got int 2; wrap a "
        r"fixed value in st.just",
    ):
        configs(world_sizes=2)  # type: ignore[arg-type]
    assert configs(world_sizes=st.just(2)) is not None


class Tiny(Trial):
    pass


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((3, {}), {}, "trial_class should be a subclass of detsamplers.trial.Trial .* got int 3"),
        ((Tiny, [1]), {}, r"hparams should be a dict of hyperparameters .* got list \[1\]"),
        ((Tiny, {}, 2), {}, r"pauses should be a list of ints .*; pass pauses=\[2\]"),
        ((Tiny, {}), {"seed": "0"}, "seed should be"),
        ((Tiny, {}), {"workdir": 3}, r"workdir should be a folder path \(str\) or None"),
    ],
)
def test_check_trial_resume_names_each_argument_of_the_wrong_type(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        check_trial_resume(*args, **kwargs)
