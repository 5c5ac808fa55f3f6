"""The template's hooks and refusals: every stage defines the abstract hooks, and a chain a
stage could not read is refused when the stage is built (NOTE [ readable chains ])."""

from __future__ import annotations

import inspect
import json
import re
import warnings
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data as tud
from hypothesis import example, given
from hypothesis import strategies as st

import detsamplers as ds
import detsamplers.loader as dl
from detsamplers._stage import Stage
from tests.helpers import ForeignSampler, take

#: Every concrete stage the library ships, by its public (or loader) name.
SHIPPED = {
    "DistributedBatchSampler",
    "DistributedSampler",
    "GrowingShuffleSampler",
    "LoaderBatchSampler",
    "MixSampler",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "SkipBatchSampler",
    "SkipSampler",
}


def subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= subclasses(sub)
    return found


def mixture() -> ds.MixSampler:
    return ds.MixSampler([range(4), range(2)], weights=[1, 1], seed=0)


def batches_of_batches(inner: Any) -> tud.BatchSampler:
    return tud.BatchSampler(tud.BatchSampler(inner, 2, False), 2, False)


def test_the_abstract_hooks_are_config_and_len() -> None:
    assert Stage.__abstractmethods__ == frozenset({"config", "__len__"})


def test_every_concrete_stage_defines_the_abstract_hooks_and_a_verb() -> None:
    assert dl is not None  # the loader's stage is a subclass once the loader is imported
    concrete = {cls for cls in subclasses(Stage) if not inspect.isabstract(cls)}
    names = {cls.__name__ for cls in concrete if not cls.__name__.startswith("_")}
    assert names >= SHIPPED, f"missing: {SHIPPED - names}"
    for cls in concrete:
        for hook in Stage.__abstractmethods__:
            assert getattr(getattr(cls, hook), "__isabstractmethod__", False) is False, (
                cls,
                hook,
            )
        assert cls.verb != "source", cls


def overridden_hooks() -> set[str]:
    """Every attribute of the template that a shipped stage (or its base) defines again."""
    assert dl is not None
    names = set()
    for cls in subclasses(Stage):
        for name in vars(cls):
            special = name.startswith("__") and name not in ("__len__", "__iter__")
            special |= name == "_abc_impl"  # abc's bookkeeping
            if hasattr(Stage, name) and not special:
                names.add(name)
    return names


def test_the_stage_docstring_and_the_architecture_table_name_every_hook_a_stage_overrides() -> None:
    hooks = overridden_hooks()
    assert {"config", "_map", "fallback_pass", "_claim", "adopt_state"} <= hooks
    page = (Path(__file__).parent.parent / "docs" / "architecture.md").read_text()
    section = page[page.index("## The template and its hooks") : page.index("## Adding a stage")]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    in_table = set(re.findall(r"`(\w+)", " ".join(row.split("|")[1] for row in rows)))
    in_docstring = set(re.findall(r"``(\w+)", inspect.getdoc(Stage) or ""))
    assert hooks - in_table == set()
    assert hooks - in_docstring == set()


def test_a_stage_without_its_abstract_hooks_cannot_be_built() -> None:
    class Bare(Stage[int]):
        verb = "bare"

        def __init__(self, sampler: Any) -> None:
            super().__init__(sampler, "sampler")

    with pytest.raises(
        TypeError,
        match=r"Can't instantiate abstract class Bare with abstract methods __len__, config",
    ):
        Bare(range(3))  # type: ignore[abstract]


def test_a_stage_that_defines_its_hooks_reads_by_the_template() -> None:
    class Doubled(Stage[int]):
        verb = "double"

        def __init__(self, sampler: Any) -> None:
            super().__init__(sampler, "sampler")

        @property
        def pass_length(self) -> int:
            return self._inner.pass_length

        def config(self) -> dict[str, Any]:
            return {"stage": "double"}

        def __len__(self) -> int:
            return self.pass_length

    stage = Doubled(range(4))
    assert list(stage) == [0, 1, 2, 3]
    assert stage.state_dict()["chain"][-1] == {"stage": "double"}


WRAPPERS: list[tuple[str, str, Callable[[Any], Any]]] = [
    ("DistributedSampler", "sampler", lambda s: ds.DistributedSampler(s, 2, 0)),
    ("DistributedBatchSampler", "batch_sampler", lambda s: ds.DistributedBatchSampler(s, 2, 1)),
    ("SkipSampler", "sampler", lambda s: ds.SkipSampler(s, 1)),
    ("SkipBatchSampler", "batch_sampler", lambda s: ds.SkipBatchSampler(s, 1)),
]


@pytest.mark.parametrize(("owner", "param", "wrap"), WRAPPERS, ids=[w[0] for w in WRAPPERS])
@pytest.mark.parametrize(
    "inner",
    [
        lambda: batches_of_batches(mixture()),
        lambda: tud.BatchSampler(batches_of_batches(mixture()), 3, True),
    ],
    ids=["batches of batches", "three batch levels"],
)
def test_a_stage_refuses_a_mixture_it_could_only_iterate(
    owner: str, param: str, wrap: Callable[[Any], Any], inner: Callable[[], Any]
) -> None:
    with pytest.raises(
        ValueError,
        match=rf"^{owner} cannot wrap this {param} \(BatchSampler\): it holds a MixSampler, "
        r"which is read only by position, under a link that cannot be addressed \(a "
        rf"BatchSampler over batches\), so {owner} could only iterate it; batch the "
        r"MixSampler's records once, e\.g\. SkipBatchSampler\(BatchSampler\(DistributedSampler",
    ):
        wrap(inner())


def test_the_mixture_batched_once_as_the_message_says_is_read_by_position() -> None:
    chain = ds.SkipBatchSampler(
        tud.BatchSampler(ds.DistributedSampler(mixture(), 2, 0), 2, False), 1
    )
    whole = tud.BatchSampler(ds.DistributedSampler(mixture(), 2, 0), 2, False)
    assert chain.indexable
    assert take(chain, 3) == list(islice(iter(whole), 1, 4))


def test_a_mixture_behind_a_sampler_of_the_users_own_is_iterated() -> None:
    user = ForeignSampler(list(islice(iter(mixture()), 6)))
    assert take(ds.SkipSampler(user, 2), 4) == user.values[2:6]


@pytest.mark.parametrize(("owner", "param", "wrap"), WRAPPERS, ids=[w[0] for w in WRAPPERS])
def test_a_stage_refuses_an_object_that_is_not_a_sampler(
    owner: str, param: str, wrap: Callable[[Any], Any]
) -> None:
    with pytest.raises(
        TypeError,
        match=rf"^{param} should be a sampler \(an iterable of indices\), but got "
        rf"{param}=5 of type int",
    ):
        wrap(5)


@pytest.mark.parametrize(("owner", "param", "wrap"), WRAPPERS, ids=[w[0] for w in WRAPPERS])
def test_a_stage_refuses_a_one_pass_iterator(
    owner: str, param: str, wrap: Callable[[Any], Any]
) -> None:
    with pytest.raises(
        TypeError,
        match=rf"^{param} should be a sampler that can be iterated again, but got an iterator "
        r"\(range_iterator\), which is used up after one pass; pass the sequence",
    ):
        wrap(iter(range(4)))


SOURCES: dict[str, Callable[[], Any]] = {
    "range": lambda: range(6),
    "foreign": lambda: ForeignSampler([5, 3, 1, 0, 2, 4]),
    "mix": mixture,
}
LINKS: dict[str, Callable[[Any], Any]] = {
    "shuffle": lambda s: ds.ReproducibleShuffleSampler(s, 3),
    "shuffle batches": lambda s: ds.ReproducibleShuffleBatchSampler(s, 3),
    "repeat": ds.RepeatSampler,
    "repeat batches": ds.RepeatBatchSampler,
    "shard": lambda s: ds.DistributedSampler(s, 2, 1),
    "shard batches": lambda s: ds.DistributedBatchSampler(s, 2, 1),
    "skip": lambda s: ds.SkipSampler(s, 1),
    "skip batches": lambda s: ds.SkipBatchSampler(s, 1),
    "batch": lambda s: tud.BatchSampler(s, 2, False),
}


@given(
    source=st.sampled_from(sorted(SOURCES)),
    links=st.lists(st.sampled_from(sorted(LINKS)), min_size=1, max_size=4),
)
@example(source="mix", links=["batch", "batch", "skip batches"])
@example(source="mix", links=["shard", "batch", "batch", "shard batches"])
def test_every_chain_a_stage_accepts_can_be_read_and_saved(source: str, links: list[str]) -> None:
    chain = SOURCES[source]()
    try:
        for link in links:
            chain = LINKS[link](chain)
    except (TypeError, ValueError):
        return  # refused when built, with a message (the tests above pin them)
    if not isinstance(chain, Stage):
        return  # torch's own BatchSampler on top: torch reads it
    items = take(chain, 5)
    assert len(items) <= 5
    json.dumps(chain.state_dict())


#: Every shipped stage built over ``inner`` (the loader's with the fields a loader passes).
BUILD: dict[str, Callable[[Any], Any]] = {
    "DistributedBatchSampler": lambda s: ds.DistributedBatchSampler(s, 2, 1),
    "DistributedSampler": lambda s: ds.DistributedSampler(s, 2, 1),
    "GrowingShuffleSampler": lambda s: ds.GrowingShuffleSampler(
        s, 0, initial_length=2, growth=[(3, 4)]
    ),
    "LoaderBatchSampler": lambda s: dl._batches.LoaderBatchSampler(
        s, 0, seed=0, dataset_length=6, num_replicas=1, rank=0
    ),
    "RepeatBatchSampler": ds.RepeatBatchSampler,
    "RepeatSampler": ds.RepeatSampler,
    "ReproducibleShuffleBatchSampler": lambda s: ds.ReproducibleShuffleBatchSampler(s, 0),
    "ReproducibleShuffleSampler": lambda s: ds.ReproducibleShuffleSampler(s, 0),
    "SkipBatchSampler": lambda s: ds.SkipBatchSampler(s, 1),
    "SkipSampler": lambda s: ds.SkipSampler(s, 1),
}


def test_every_stage_over_a_mixture_it_cannot_address_is_refused_when_built_naming_both() -> None:
    assert set(BUILD) == SHIPPED - {"MixSampler"}  # a mixture wraps no sampler
    for name, build in BUILD.items():
        param = "batch_sampler" if "Batch" in name else "sampler"
        with pytest.raises(ValueError, match=rf"^{name} cannot wrap this {param}\b.* MixSampler"):
            build(batches_of_batches(mixture()))


ENDLESS: dict[str, Callable[[], Any]] = {
    "RepeatSampler": lambda: ds.RepeatSampler(range(5)),
    "RepeatBatchSampler": lambda: ds.RepeatBatchSampler(tud.BatchSampler(range(5), 2, False)),
    "DistributedSampler": lambda: ds.DistributedSampler(ds.RepeatSampler(range(5)), 2, 1),
    "SkipSampler": lambda: ds.SkipSampler(ds.RepeatSampler(range(5)), 3),
    "SkipBatchSampler": lambda: ds.SkipBatchSampler(
        ds.RepeatBatchSampler(tud.BatchSampler(range(5), 2, False)), 1
    ),
    "DistributedBatchSampler": lambda: ds.DistributedBatchSampler(
        ds.RepeatBatchSampler(tud.BatchSampler(range(5), 2, False)), 2, 0
    ),
}


@pytest.mark.parametrize("name", list(ENDLESS), ids=list(ENDLESS))
def test_the_pass_length_of_a_stage_a_repeat_makes_endless_is_a_type_error_naming_it(
    name: str,
) -> None:
    repeat = "RepeatBatchSampler" if "Batch" in name else "RepeatSampler"
    why = "it repeats its sampler" if name == repeat else f"the {repeat} in its chain repeats"
    with pytest.raises(
        TypeError,
        match=rf"^{name} has no pass_length: it is endless \({why} pass after pass, forever\), "
        rf"so a pass of it never ends; ask the finite sampler the {repeat} wraps for its "
        r"pass_length, or use len\(\) for Determined's length$",
    ):
        ENDLESS[name]().pass_length  # noqa: B018


@given(length=st.integers(0, 20), world=st.integers(1, 4), skip=st.integers(0, 6))
def test_a_finite_stage_has_the_pass_length_of_what_one_pass_yields(
    length: int, world: int, skip: int
) -> None:
    for chain in (
        ds.SkipSampler(ds.DistributedSampler(range(length), world, 0), skip),
        ds.DistributedSampler(ds.ReproducibleShuffleSampler(range(length), 1), world, world - 1),
        ds.SkipBatchSampler(tud.BatchSampler(range(length), 3, False), skip),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a skip past the end warns (it is pinned elsewhere)
            assert chain.pass_length == len(list(chain))


def test_an_endless_mixture_keeps_the_pass_length_of_its_components_under_a_shard() -> None:
    assert mixture().pass_length == 6  # NOTE [ mixture law ]: one pass of its components
    assert ds.DistributedSampler(mixture(), 2, 1).pass_length == 3
    assert ds.SkipSampler(ds.DistributedSampler(mixture(), 2, 1), 1).pass_length == 2
