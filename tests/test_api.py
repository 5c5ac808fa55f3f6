"""The public surface: sorted __all__, everything documented, drop-in names and types."""

from __future__ import annotations

import inspect

import torch.utils.data as tud

import detsamplers as ds

DETERMINED_NAMES = [
    "DistributedBatchSampler",
    "DistributedSampler",
    "RepeatBatchSampler",
    "RepeatSampler",
    "ReproducibleShuffleBatchSampler",
    "ReproducibleShuffleSampler",
    "SkipBatchSampler",
    "SkipSampler",
]


def test_all_is_sorted_and_lists_exactly_the_public_names() -> None:
    assert ds.__all__ == sorted(ds.__all__)
    public = {
        name
        for name, value in ((name, getattr(ds, name)) for name in dir(ds))  # lazy names too
        if not name.startswith("_") and not inspect.ismodule(value)  # subpackages: loader
    }
    assert public - {"annotations"} == set(ds.__all__) - {"__version__"}


def test_every_public_name_has_a_docstring_with_an_example() -> None:
    for name in ds.__all__:
        obj = getattr(ds, name)
        if name.startswith("__"):
            continue
        doc = inspect.getdoc(obj) or ""
        assert ">>>" in doc, f"{name} has no runnable example"


def test_determineds_sampler_names_exist_with_its_constructor_arguments() -> None:
    for name in DETERMINED_NAMES:
        assert issubclass(getattr(ds, name), tud.Sampler)
    assert list(inspect.signature(ds.DistributedSampler).parameters)[:3] == [
        "sampler",
        "num_workers",
        "rank",
    ]

    def positional(obj: object) -> list[str]:
        parameters = inspect.signature(obj).parameters.values()  # type: ignore[arg-type]
        return [p.name for p in parameters if p.kind != p.KEYWORD_ONLY]

    # Our additions (skip_samples) are keyword-only: Determined's calls keep working.
    assert positional(ds.SkipBatchSampler) == ["batch_sampler", "skip"]
    assert positional(ds.make_batch_sampler) == [
        "sampler_or_dataset",
        "mode",
        "shuffle_seed",
        "num_workers",
        "rank",
        "batch_size",
        "skip",
    ]


def test_batch_variants_are_torch_batch_samplers_and_keep_determineds_attributes() -> None:
    base = tud.BatchSampler(range(8), 2, False)
    for sampler in (
        ds.RepeatBatchSampler(base),
        ds.DistributedBatchSampler(base, 2, 1),
        ds.SkipBatchSampler(base, 1),
        ds.ReproducibleShuffleBatchSampler(base, 0),
    ):
        assert isinstance(sampler, tud.BatchSampler)
        assert sampler.batch_sampler is base
    shard = ds.DistributedBatchSampler(base, world_size=2, rank=1)
    assert (shard.num_workers, shard.world_size, shard.rank) == (2, 2, 1)


def test_a_torch_dataloader_accepts_the_chain_as_batch_sampler() -> None:
    import torch

    dataset = tud.TensorDataset(torch.arange(10) * 10)
    loader = tud.DataLoader(
        dataset, batch_sampler=ds.make_batch_sampler(dataset, "validation", 0, 2, 1, 2)
    )
    assert [batch[0].tolist() for batch in loader] == [[10, 30], [50, 70], [90]]
    assert len(loader) == 3


def test_the_testing_kit_lists_its_public_names_sorted_each_with_an_example() -> None:
    import detsamplers.testing as kit

    assert kit.__all__ == sorted(kit.__all__)
    # (pytest's assertion rewriting adds "@py_builtins" to modules of its plugins)
    public = {name for name in vars(kit) if not name.startswith(("_", "@"))}
    # configs and pause_points load on first use (they need hypothesis).
    assert public - {"Any"} <= set(kit.__all__)
    for name in kit.__all__:
        doc = inspect.getdoc(getattr(kit, name)) or ""
        assert ">>>" in doc, f"detsamplers.testing.{name} has no runnable example"


def test_the_tokens_package_lists_its_public_names_sorted_each_with_an_example() -> None:
    import detsamplers.tokens as tokens

    assert tokens.__all__ == sorted(tokens.__all__)
    public = {name for name in vars(tokens) if not name.startswith(("_", "@"))}
    assert public == set(tokens.__all__)
    for name in tokens.__all__:
        doc = inspect.getdoc(getattr(tokens, name)) or ""
        assert ">>>" in doc, f"detsamplers.tokens.{name} has no runnable example"


def test_the_loaders_public_names_are_sorted_and_each_has_a_runnable_example() -> None:
    import detsamplers.loader as loader

    assert loader.__all__ == sorted(loader.__all__)
    # The run plan (issue 31) added Network, RunPlan, SyntheticShards and plan_run.
    assert {"Network", "RunPlan", "SyntheticShards", "plan_run"} <= set(loader.__all__)
    for name in ("Network", "RunPlan", "SyntheticShards", "plan_run", "plan_mixture"):
        assert ">>>" in (inspect.getdoc(getattr(loader, name)) or ""), name
