"""Hostile input to the public surface gets a clear error, never a raw one, a hang or silence.

One parametrised case per input, each under a 20 s alarm: the fitting exception type, and
a message naming the parameter, field, shard or file, the value, and the fix.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from demo_trial import DemoTrial
from hypothesis import given, settings
from hypothesis import strategies as st

import detsamplers as ds
from detsamplers.loader import DataLoader, WebDatasetSource, check_reproducible
from detsamplers.trial import init, load_trial_from_checkpoint_path
from tests.helpers import ForeignSampler, take


@pytest.fixture(autouse=True)
def alarm() -> Iterator[None]:
    """Fail a case that hangs instead of hanging the suite."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("the case hung for 20 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def chain() -> ds.SkipSampler[int]:
    return ds.SkipSampler(ds.DistributedSampler(ds.RepeatSampler(range(10)), 2, 0), 3)


STATE = chain().state_dict()


def loader_sampler(**kwargs: Any) -> Any:
    return DataLoader(range(10), batch_size=2, **kwargs).get_data_loader(repeat=True).batch_sampler


LOADER_STATE = loader_sampler().state_dict()


class LenRaises(tud.Dataset[int]):
    def __len__(self) -> int:
        raise RuntimeError("the index file is gone")

    def __getitem__(self, index: int) -> int:
        return index


class Stream(tud.IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(3))


Case = tuple[Callable[[], Any], type[Exception], str]

CASES: dict[str, Case] = {
    # Stage arguments.
    "rank is a bool": (
        lambda: ds.DistributedSampler(range(4), 2, True),
        TypeError,
        r"rank should be an integer value, but got rank=True of type bool",
    ),
    "num_workers is a float": (
        lambda: ds.DistributedSampler(range(4), 2.0, 0),
        TypeError,
        r"num_workers should be a positive integer value, but got num_workers=2.0",
    ),
    "num_workers is zero": (
        lambda: ds.DistributedSampler(range(4), 0, 0),
        ValueError,
        r"num_workers should be a positive integer value, but got num_workers=0",
    ),
    "num_workers is huge": (
        lambda: ds.DistributedSampler(range(4), 10**30, 0),
        ValueError,
        r"num_workers should be at most 2\*\*62, but got num_workers=10{30}",
    ),
    "rank is past the world": (
        lambda: ds.DistributedSampler(range(4), 2, 2),
        ValueError,
        r"rank should be an integer in \[0, num_workers\), but got rank=2",
    ),
    "skip is negative": (
        lambda: ds.SkipSampler(range(4), -1),
        ValueError,
        r"skip should be a non-negative integer value, but got skip=-1",
    ),
    "skip is huge": (
        lambda: ds.SkipSampler(ds.RepeatSampler(range(4)), 2**70),
        ValueError,
        r"skip should be at most 2\*\*62, but got skip=1180591620717411303424",
    ),
    "skip is None": (
        lambda: ds.SkipBatchSampler(tud.BatchSampler(range(4), 2, False), None),  # type: ignore[arg-type]
        TypeError,
        r"skip should be an integer value, but got skip=None",
    ),
    "seed is a string": (
        lambda: ds.ReproducibleShuffleSampler(range(4), "a"),  # type: ignore[arg-type]
        TypeError,
        r"seed should be an integer value, but got seed='a'",
    ),
    "sampler is None": (
        lambda: ds.ReproducibleShuffleSampler(None, 0),  # type: ignore[arg-type]
        TypeError,
        r"sampler should be a sampler \(an iterable of indices\), but got sampler=None",
    ),
    "sampler is an int": (
        lambda: ds.RepeatSampler(5),  # type: ignore[arg-type]
        TypeError,
        r"sampler should be a sampler .* but got sampler=5 of type int",
    ),
    "sampler is a one-shot iterator": (
        lambda: ds.RepeatSampler(iter(range(3))),
        TypeError,
        r"sampler should be a sampler that can be iterated again, but got an iterator",
    ),
    "a stage repeats an empty batch pass": (
        lambda: take(
            ds.DistributedBatchSampler(
                ds.RepeatBatchSampler(tud.BatchSampler(range(2), 3, drop_last=True)), 2, 1
            ),
            1,
        ),
        ValueError,
        r"RepeatBatchSampler cannot repeat an empty batch_sampler",
    ),
    # Sampler states.
    "state is None": (
        lambda: chain().load_state_dict(None),  # type: ignore[arg-type]
        TypeError,
        r"state should be a dict from SkipSampler.state_dict\(\), but got state of type NoneType",
    ),
    "state lacks the position": (
        lambda: chain().load_state_dict({k: v for k, v in STATE.items() if k != "position"}),
        ValueError,
        r"but it lacks position",
    ),
    "state has an extra field": (
        lambda: chain().load_state_dict({**STATE, "epoch": 3}),
        ValueError,
        r"state has keys epoch that SkipSampler.state_dict\(\) never writes",
    ),
    "state position is a string": (
        lambda: chain().load_state_dict({**STATE, "position": "3"}),
        ValueError,
        r"state\['position'\] should be a non-negative integer, but got '3'",
    ),
    "state position is negative": (
        lambda: chain().load_state_dict({**STATE, "position": -1}),
        ValueError,
        r"state\['position'\] should be a non-negative integer, but got -1",
    ),
    "state position is huge": (
        lambda: chain().load_state_dict({**STATE, "position": 2**70}),
        ValueError,
        r"state\['position'\] should be at most 2\*\*62",
    ),
    "state is from another version": (
        lambda: chain().load_state_dict({**STATE, "version": 99}),
        ValueError,
        r"state\['version'\] should be 1, but got 99; it was saved by an incompatible version",
    ),
    "state chain is None": (
        lambda: chain().load_state_dict({**STATE, "chain": None}),
        TypeError,
        r"state\['chain'\] should be a list of dicts .* but got None",
    ),
    "state chain holds an int": (
        lambda: chain().load_state_dict({**STATE, "chain": [1]}),
        TypeError,
        r"state\['chain'\] should be a list of dicts .* but got \[1\]",
    ),
    "state fingerprint is mistyped": (
        lambda: chain().load_state_dict({**STATE, "fingerprint": 3}),
        ds.ReproducibilityError,
        r"saved from a different chain \(the fingerprint differs\)",
    ),
    "state is from another world size": (
        lambda: chain().load_state_dict(
            ds.SkipSampler(ds.DistributedSampler(ds.RepeatSampler(range(10)), 3, 0), 3).state_dict()
        ),
        ds.ReproducibilityError,
        r"shard world_size is 3 in the state but 2 here",
    ),
    "state is from another dataset length": (
        lambda: chain().load_state_dict(
            ds.SkipSampler(ds.DistributedSampler(ds.RepeatSampler(range(11)), 2, 0), 3).state_dict()
        ),
        ds.ReproducibilityError,
        r"range length is 11 in the state but 10 here",
    ),
    "state is from another seed": (
        lambda: ds.ReproducibleShuffleSampler(range(5), 1).load_state_dict(
            ds.ReproducibleShuffleSampler(range(5), 2).state_dict()
        ),
        ds.ReproducibilityError,
        r"2 in the state but 1 here",
    ),
    # The DataLoader.
    "batch_size is a bool": (
        lambda: DataLoader(range(4), batch_size=True),
        TypeError,
        r"batch_size should be a positive integer value, but got batch_size=True",
    ),
    "batch_size is huge": (
        lambda: DataLoader(range(4), batch_size=2**70),
        ValueError,
        r"batch_size should be at most 2\*\*62",
    ),
    "num_workers is negative": (
        lambda: DataLoader(range(4), num_workers=-1),
        ValueError,
        r"num_workers should be a non-negative integer value, but got num_workers=-1",
    ),
    "collate_fn is a string": (
        lambda: DataLoader(range(4), collate_fn="stack"),  # type: ignore[arg-type]
        TypeError,
        r"collate_fn should be a callable or None, but got collate_fn='stack'",
    ),
    "worker_init_fn is an int": (
        lambda: DataLoader(range(4), worker_init_fn=3),  # type: ignore[arg-type]
        TypeError,
        r"worker_init_fn should be a callable or None, but got worker_init_fn=3",
    ),
    "loader rank is past num_replicas": (
        lambda: DataLoader(range(4)).get_data_loader(num_replicas=2, rank=5),
        ValueError,
        r"rank should be an integer in \[0, num_replicas\), but got rank=5",
    ),
    "repeat is an int": (
        lambda: DataLoader(range(4)).get_data_loader(repeat=1),  # type: ignore[arg-type]
        TypeError,
        r"repeat should be a bool, but got repeat=1",
    ),
    "the training dataset is empty": (
        lambda: DataLoader([], batch_size=2, shuffle=True).get_data_loader(repeat=True),
        ValueError,
        r"dataset is empty: len\(dataset\) is 0 for the list this DataLoader was built with",
    ),
    "the dataset's len() raises": (
        lambda: DataLoader(LenRaises()),
        TypeError,
        r"len\(dataset\) raised RuntimeError: the index file is gone \(dataset of type LenRaises\)",
    ),
    "an IterableDataset": (
        lambda: DataLoader(Stream()),
        TypeError,
        r"dataset should be a map-style dataset .* but got an IterableDataset",
    ),
    # Loader states.
    "loader state from another seed": (
        lambda: loader_sampler(seed=5).load_state_dict(LOADER_STATE),
        ds.ReproducibilityError,
        r"seed is 0 in the state but 5 here",
    ),
    "loader state lacks its digest": (
        lambda: loader_sampler().load_state_dict(
            {k: v for k, v in LOADER_STATE.items() if k != "digest"}
        ),
        ValueError,
        r"it lacks digest; it was not saved by a detsamplers.loader DataLoader",
    ),
    "loader state fields are None": (
        lambda: loader_sampler().load_state_dict({**LOADER_STATE, "loader": None}),
        TypeError,
        r"state\['loader'\] should be the dict of loader fields .* but got None",
    ),
    "loader state has an extra field": (
        lambda: loader_sampler().load_state_dict({**LOADER_STATE, "rng": 1}),
        ValueError,
        r"state has keys rng that LoaderBatchSampler.state_dict\(\) never writes",
    ),
    "a plain sampler state into the loader": (
        lambda: loader_sampler().load_state_dict(STATE),
        ValueError,
        r"it lacks loader, digest",
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_hostile_input_to_samplers_and_the_loader_is_a_clear_error(case: str) -> None:
    call, kind, message = CASES[case]
    with pytest.raises(kind, match=message) as raised:
        call()
    assert type(raised.value) not in (KeyError, IndexError, AttributeError)


# -- webdataset shards -----------------------------------------------------------------


def write_tar(path: Path, count: int) -> None:
    with tarfile.open(path, "w") as archive:
        for i in range(count):
            data = str(i).encode()
            info = tarfile.TarInfo(f"s{i:04d}.txt")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def shard_case(tmp_path: Path, kind: str) -> str:
    good = tmp_path / "good.tar"
    write_tar(good, 5)
    if kind == "missing":
        return str(tmp_path / "nope-{000..001}.tar")
    if kind == "brace expands to nothing":
        return str(tmp_path / "x-{5..1}.tar")
    if kind == "empty file":
        (tmp_path / "empty.tar").write_bytes(b"")
        return str(tmp_path / "empty.tar")
    if kind == "no records":
        write_tar(tmp_path / "zero.tar", 0)
        return str(tmp_path / "zero.tar")
    if kind == "garbage":
        (tmp_path / "garbage.tar").write_bytes(b"hello world" * 100)
        return str(tmp_path / "garbage.tar")
    if kind == "truncated":
        (tmp_path / "trunc.tar").write_bytes(good.read_bytes()[:700])
        return str(tmp_path / "trunc.tar")
    return str(good)


SHARDS: dict[str, tuple[type[Exception], str]] = {
    "missing": (FileNotFoundError, r"shard '.*nope-000.tar' .* does not exist; check urls"),
    "brace expands to nothing": (FileNotFoundError, r"shard '.*x-5.tar' .* does not exist"),
    "empty file": (ValueError, r"shard '.*empty.tar' is truncated or corrupt: .*empty file"),
    "no records": (ValueError, r"urls should name shards with samples, but all 1 of them"),
    "garbage": (ValueError, r"shard '.*garbage.tar' is truncated or corrupt"),
    "truncated": (ValueError, r"shard '.*trunc.tar' is truncated or corrupt"),
}


@pytest.mark.parametrize("kind", list(SHARDS), ids=list(SHARDS))
def test_a_bad_shard_is_a_clear_error_naming_it(tmp_path: Path, kind: str) -> None:
    error, message = SHARDS[kind]
    with pytest.raises(error, match=message):
        WebDatasetSource(shard_case(tmp_path, kind), seed=0, batch_size=2)


@pytest.mark.parametrize(
    "urls,error,message",
    [
        ([], ValueError, r"urls should name at least one shard, but got an empty list"),
        (5, TypeError, r"urls should be a string .* but got urls of type int"),
    ],
    ids=["empty list", "an int"],
)
def test_bad_urls_are_a_clear_error(urls: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        WebDatasetSource(urls, seed=0, batch_size=2)


@pytest.mark.parametrize(
    "index",
    [b"{not json", b"PK\x03\x04", b"", "cut", "flipped"],
    ids=["garbage", "zip-start", "empty", "truncated", "damaged-body"],
)
def test_a_corrupt_index_file_is_rebuilt_not_trusted(tmp_path: Path, index: bytes | str) -> None:
    shard = tmp_path / "good.tar"
    write_tar(shard, 5)
    WebDatasetSource(str(shard), seed=0, batch_size=2)
    sidecar = tmp_path / "good.tar.index.npz"
    good = sidecar.read_bytes()
    middle = len(good) * 3 // 5
    damaged = {  # flipped: past the header, so found only when the shard is first read
        "cut": good[: len(good) // 2],
        "flipped": good[:middle] + bytes(b ^ 0xFF for b in good[middle : middle + 8]),
    }.get(str(index), index)
    if index == "flipped":
        damaged += good[middle + 8 :]
    sidecar.write_bytes(bytes(damaged))
    source = WebDatasetSource(str(shard), seed=0, batch_size=5, repeat=False)
    assert sorted(int(x) for b in source for x in b["txt"]) == list(range(5))
    if index != "flipped":
        assert sidecar.read_bytes() == good  # rewritten


def test_a_stale_index_file_is_rebuilt_after_the_shard_changes(tmp_path: Path) -> None:
    shard = tmp_path / "good.tar"
    write_tar(shard, 5)
    WebDatasetSource(str(shard), seed=0, batch_size=2)
    write_tar(shard, 7)
    source = WebDatasetSource(str(shard), seed=0, batch_size=7, repeat=False)
    assert sorted(int(x) for b in source for x in b["txt"]) == list(range(7))


# -- errors raised by user code mid-epoch ----------------------------------------------


class FailsAt(tud.Dataset[int]):
    def __init__(self, bad: int | None) -> None:
        self.bad = bad

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> int:
        if index == self.bad:
            raise RuntimeError(f"cannot decode record {index}")
        return index


@pytest.mark.parametrize("where", ["__getitem__", "collate_fn"])
def test_a_user_error_mid_epoch_propagates_and_the_last_state_resumes_exactly(where: str) -> None:
    def collate(items: list[int]) -> torch.Tensor:
        if where == "collate_fn" and 7 in items:
            raise RuntimeError("cannot collate record 7")
        return torch.tensor(items)

    bad = 7 if where == "__getitem__" else None
    broken = DataLoader(FailsAt(bad), batch_size=2, shuffle=True, seed=3, collate_fn=collate)
    loader = broken.get_data_loader(repeat=True)
    seen, state = [], None
    with pytest.raises(RuntimeError, match="record 7"):
        for batch in loader:
            seen.append(batch.tolist())
            state = loader.batch_sampler.state_dict()
    assert state is not None
    clean = DataLoader(FailsAt(None), batch_size=2, shuffle=True, seed=3)
    expected = [b.tolist() for b in take(clean.get_data_loader(repeat=True), len(seen) + 6)]
    assert seen == expected[: len(seen)]
    again = clean.get_data_loader(repeat=True)
    again.batch_sampler.load_state_dict(state)
    assert [b.tolist() for b in take(again, 6)] == expected[len(seen) : len(seen) + 6]


@pytest.mark.workers
def test_a_worker_init_fn_error_propagates() -> None:
    def init(worker: int) -> None:
        raise RuntimeError(f"worker {worker} cannot open its database")

    loader = DataLoader(range(4), num_workers=1, worker_init_fn=init).get_data_loader()
    with pytest.raises(RuntimeError, match="cannot open its database"):
        next(iter(loader))


# -- checkpoint folders ----------------------------------------------------------------


@pytest.mark.parametrize(
    "kind",
    [
        "missing folder",
        "no metadata",
        "garbage metadata",
        "a file",
        "metadata of another format",
        "metadata naming missing files",
        "metadata lacks the seed",
        "metadata is a list",
    ],
)
def test_a_half_written_or_foreign_checkpoint_is_a_clear_error(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "ckpt"
    if kind != "missing folder":
        path.mkdir()
    if kind == "garbage metadata":
        (path / "metadata.json").write_text("{half")
    if kind == "metadata of another format":
        (path / "metadata.json").write_text(json.dumps({"format_version": 99}))
    fields = {"format_version": 1, "batches_trained": 2, "global_batch_size": 8, "world_size": 1}
    if kind == "metadata naming missing files":
        metadata = {**fields, "seed": 0, "files": ["state-dict.pth"]}
        (path / "metadata.json").write_text(json.dumps(metadata))
    if kind == "metadata lacks the seed":
        (path / "state-dict.pth").write_bytes(b"")
        (path / "metadata.json").write_text(json.dumps({**fields, "files": ["state-dict.pth"]}))
    if kind == "metadata is a list":
        (path / "metadata.json").write_text("[]")
    if kind == "a file":
        path.rmdir()
        path.write_text("not a folder")
    with pytest.raises((ValueError, FileNotFoundError), match=r"ckpt") as raised:
        load_trial_from_checkpoint_path(str(path), DemoTrial)
    assert type(raised.value) not in (KeyError, IndexError, AttributeError)


# -- the webdataset source's arguments and state ----------------------------------------


@pytest.fixture
def shard(tmp_path: Path) -> str:
    path = tmp_path / "good.tar"
    write_tar(path, 9)
    return str(path)


def source(urls: str, **kwargs: Any) -> WebDatasetSource:
    return WebDatasetSource(urls, **{"seed": 0, "batch_size": 2, **kwargs})


def saved(urls: str) -> dict[str, Any]:
    first = source(urls)
    next(iter(first))
    return first.state_dict()


WEB_CASES: dict[str, tuple[Callable[[str], Any], type[Exception], str]] = {
    "rank past the world": (
        lambda u: source(u, world_size=2, rank=3),
        ValueError,
        r"rank should be an integer in \[0, world_size\), but got rank=3",
    ),
    "shuffle_window is a bool": (
        lambda u: source(u, shuffle_window=True),
        TypeError,
        r"shuffle_window should be an integer value, but got shuffle_window=True",
    ),
    "repeat is an int": (
        lambda u: source(u, repeat=1),
        TypeError,
        r"repeat should be a bool, but got repeat=1",
    ),
    "map is a string": (
        lambda u: source(u, map="x"),
        TypeError,
        r"map should be a callable or None, but got map='x'",
    ),
    "decode is an int": (
        lambda u: source(u, decode=5),
        TypeError,
        r"decode should be a webdataset image spec .* but got 5",
    ),
    "state has an extra field": (
        lambda u: source(u).load_state_dict({**saved(u), "x": 1}),
        ValueError,
        r"state has keys x that WebDatasetSource.state_dict\(\) never writes",
    ),
    "state config is None": (
        lambda u: source(u).load_state_dict({**saved(u), "config": None}),
        TypeError,
        r"state\['config'\] should be the dict of settings .* but got None",
    ),
    "state counts is None": (
        lambda u: source(u).load_state_dict({**saved(u), "counts": None}),
        TypeError,
        r"state\['counts'\] should be the list of samples per shard .* but got None",
    ),
    "state is from another seed": (
        lambda u: source(u, seed=1).load_state_dict(saved(u)),
        ds.ReproducibilityError,
        r"seed is 0 in the state but 1 here",
    ),
    "validation state is from another global batch": (
        lambda u: source(u, world_size=2, repeat=False).load_state_dict(
            {**source(u, repeat=False).state_dict(), "position": 2}
        ),
        ValueError,
        r"state_dict\['position'\]=2 should be a multiple of the global batch",
    ),
    "state counts are from other shards": (
        lambda u: source(u).load_state_dict({**saved(u), "counts": [9, 3]}),
        ds.ReproducibilityError,
        r"it was saved with 2 shards, but urls name 1",
    ),
}


@pytest.mark.parametrize("case", list(WEB_CASES), ids=list(WEB_CASES))
def test_hostile_input_to_the_webdataset_source_is_a_clear_error(shard: str, case: str) -> None:
    call, kind, message = WEB_CASES[case]
    with pytest.raises(kind, match=message):
        call(shard)


def test_a_webdataset_collate_fn_of_none_means_torchs_default(shard: str) -> None:
    batch = next(iter(source(shard, collate_fn=None, shuffle_shards=False)))
    assert batch["__key__"] == ["s0000", "s0001"]


def test_trial_hparams_that_are_not_a_dict_are_a_clear_error() -> None:
    with (
        pytest.raises(TypeError, match=r"hparams should be a dict of hyperparameters, but got"),
        init(hparams=[1]),  # type: ignore[arg-type]
    ):
        pass


# -- the sweep's remaining findings (issue 21, items 5 and 6) ---------------------------


class Wrapper(tud.Sampler[Any]):
    """A user's wrapper we cannot see through, claiming 5 items a pass.

    It stops the test at 1,000 items: a shuffle that read its endless stream whole would
    fill memory, which no alarm interrupts.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[Any]:
        for count, item in enumerate(self.inner):
            if count == 1000:
                raise AssertionError("the shuffle read past len() + 1 items of an endless pass")
            yield item

    def __len__(self) -> int:
        return 5


class Unsized(tud.Sampler[int]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.n))


GLOBAL_RNG = r"draws each pass's (order|indices) from torch's global RNG \(it has no generator\)"

SWEEP_CASES: dict[str, Case] = {
    "check_reproducible on a SubsetRandomSampler": (
        lambda: check_reproducible(tud.SubsetRandomSampler(range(5))),
        ds.ReproducibilityError,
        r"torch's SubsetRandomSampler " + GLOBAL_RNG + r".* ReproducibleShuffleSampler\(indices",
    ),
    "check_reproducible on a WeightedRandomSampler": (
        lambda: check_reproducible(tud.WeightedRandomSampler([1.0, 2.0], 4)),
        ds.ReproducibilityError,
        r"torch's WeightedRandomSampler " + GLOBAL_RNG + r".* draw the weighted indices once",
    ),
    "check_reproducible on a shuffle over a SubsetRandomSampler": (
        lambda: check_reproducible(
            ds.ReproducibleShuffleSampler(tud.SubsetRandomSampler(range(5)), 0)
        ),
        ds.ReproducibilityError,
        r"torch's SubsetRandomSampler " + GLOBAL_RNG,
    ),
    "check_reproducible on torch's loader over a WeightedRandomSampler": (
        lambda: check_reproducible(
            tud.DataLoader(range(4), sampler=tud.WeightedRandomSampler([1.0] * 4, 4))
        ),
        ds.ReproducibilityError,
        r"torch's WeightedRandomSampler " + GLOBAL_RNG,
    ),
    "check_reproducible on a SubsetRandomSampler with a generator": (
        lambda: check_reproducible(tud.SubsetRandomSampler(range(5), generator=torch.Generator())),
        ds.ReproducibilityError,
        r"SubsetRandomSampler draws each pass's order from the current state of its generator",
    ),
    "our DataLoader over a SubsetRandomSampler": (
        lambda: DataLoader(range(5), sampler=tud.SubsetRandomSampler(range(5))),
        ds.ReproducibilityError,
        r"torch's SubsetRandomSampler " + GLOBAL_RNG,
    ),
    "a shuffle over a repeat hidden in a wrapper": (
        lambda: take(ds.ReproducibleShuffleSampler(Wrapper(ds.RepeatSampler(range(5))), 0), 1),
        ValueError,
        r"ReproducibleShuffleSampler read more than len\(sampler\)=5 items from pass 0 of its "
        r"sampler \(Wrapper\).* shuffle first, e.g. RepeatSampler\(ReproducibleShuffleSampler",
    ),
    "a batch shuffle over a repeat hidden in a wrapper": (
        lambda: take(
            ds.ReproducibleShuffleBatchSampler(
                Wrapper(tud.BatchSampler(ds.RepeatSampler(range(5)), 2, False)), 0
            ),
            1,
        ),
        ValueError,
        r"read more than len\(batch_sampler\)=5 items from pass 0 of its batch_sampler",
    ),
    "a shuffle over a sampler without len()": (
        lambda: ds.ReproducibleShuffleSampler(Unsized(5), 0),
        TypeError,
        r"sampler should have a len\(\) for ReproducibleShuffleSampler, but Unsized has none: "
        r".* give Unsized a __len__",
    ),
    "an empty string as the shard URL": (
        lambda: WebDatasetSource("", seed=0, batch_size=2),
        ValueError,
        r"urls should name shards, but got an empty shard URL \('', shard 0 of 1\) in urls=''; "
        r".* remove the empty entry or the stray '::'",
    ),
    "'::' as the shard URLs": (
        lambda: WebDatasetSource("::", seed=0, batch_size=2),
        ValueError,
        r"an empty shard URL \('', shard 0 of 2\) in urls='::'",
    ),
    "an empty entry in a list of shard URLs": (
        lambda: WebDatasetSource(["a.tar", ""], seed=0, batch_size=2),
        ValueError,
        r"an empty shard URL \(urls\[1\]='', shard 1 of 2\) in urls=\['a.tar', ''\]",
    ),
    "np.bool_ as the batch size": (
        lambda: DataLoader(range(4), batch_size=np.bool_(True)),  # type: ignore[arg-type]
        TypeError,
        r"batch_size should be a positive integer value, but got batch_size=np.True_",
    ),
}


@pytest.mark.parametrize("case", list(SWEEP_CASES), ids=list(SWEEP_CASES))
def test_the_sweeps_findings_are_clear_errors(case: str) -> None:
    call, kind, message = SWEEP_CASES[case]
    with pytest.raises(kind, match=message):
        call()


def writer(folder: Path, pattern: str = "d-%d.tar", **kwargs: Any) -> Any:
    from detsamplers.loader import ShardWriter

    return ShardWriter(str(folder / pattern), **{"verbose": 0, **kwargs})


def written(folder: Path, *samples: Any) -> None:
    sink = writer(folder)
    try:
        for sample in samples:
            sink.write(sample)
    finally:
        sink.close()


def write_after_close(folder: Path) -> None:
    sink = writer(folder, maxcount=1)
    sink.write({"__key__": "a", "cls": 1})
    sink.write({"__key__": "b", "cls": 2})
    sink.close()
    sink.close()  # closing again does nothing
    sink.write({"__key__": "c", "cls": 3})


WRITER_CASES: dict[str, tuple[Callable[[Path], Any], type[Exception], str]] = {
    "maxcount is 0": (
        lambda f: writer(f, maxcount=0),
        ValueError,
        r"maxcount should be a positive integer value, but got maxcount=0",
    ),
    "maxcount is a bool": (
        lambda f: writer(f, maxcount=True),
        TypeError,
        r"maxcount should be a positive integer value, but got maxcount=True of type bool",
    ),
    "maxsize is negative": (
        lambda f: writer(f, maxsize=-1),
        ValueError,
        r"maxsize should be a positive number of bytes, but got maxsize=-1: every sample would "
        r"start a new shard and the first would stay empty; pass .* e.g. maxsize=1e9",
    ),
    "maxsize is 0": (
        lambda f: writer(f, maxsize=0),
        ValueError,
        r"maxsize should be a positive number of bytes, but got maxsize=0",
    ),
    "maxsize is a string": (
        lambda f: writer(f, maxsize="1e9"),
        TypeError,
        r"maxsize should be a positive number of bytes, but got maxsize='1e9' of type str",
    ),
    "start_shard is negative": (
        lambda f: writer(f, start_shard=-1),
        ValueError,
        r"start_shard should be a non-negative integer value, but got start_shard=-1",
    ),
    "a pattern without %d": (
        lambda f: writer(f, "data.tar"),
        ValueError,
        r"pattern should hold one integer format for the shard number, such as %06d in "
        r"'out/data-%06d.tar', but got pattern='.*data.tar': pattern % shard_number would fail",
    ),
    "a pattern in str.format style": (
        lambda f: writer(f, "data-{}.tar"),
        ValueError,
        r"would fail; webdataset formats the shard number with %, not str.format: write "
        r"'.*data-%06d.tar'",
    ),
    "a pattern whose format is escaped": (
        lambda f: writer(f, "data-%%d.tar"),
        ValueError,
        r"but got pattern='.*data-%%d.tar': pattern % shard_number would fail",
    ),
    "a pattern whose format drops the number": (
        lambda f: writer(f, "data-%.0s.tar"),
        ValueError,
        r"pattern % shard_number would give every shard the same file name",
    ),
    "a pattern with two formats": (
        lambda f: writer(f, "%d-%d.tar"),
        ValueError,
        r"pattern should hold one integer format .* would fail",
    ),
    "write() after close()": (
        write_after_close,
        ValueError,
        r"write\(\) after close\(\): this ShardWriter \(pattern='.*d-%d.tar'\) is closed; open "
        r"a new ShardWriter\(pattern, start_shard=2\) to go on with the next shard number",
    ),
    "a key with a dot": (
        lambda f: written(f, {"__key__": "img.001", "cls": 1}),
        ValueError,
        r"sample\['__key__'\] should not hold a dot in its last path component nor end with "
        r"'/', but got 'img.001': .* read back under the key 'img'; replace the dots, e.g. "
        r"key.replace\('.', '_'\)",
    ),
    "a key with dots in its last path component": (
        lambda f: written(f, {"__key__": "v1.0/img.a.b", "cls": 1}),
        ValueError,
        r"but got 'v1.0/img.a.b': .* read back under the key 'v1.0/img'",
    ),
    "a key ending with a slash": (
        lambda f: written(f, {"__key__": "dir/", "cls": 1}),
        ValueError,
        r"but got 'dir/': .* it would read back under no key",
    ),
    "a field name with a slash": (
        lambda f: written(f, {"__key__": "a", "seg/png": b"x"}),
        ValueError,
        r"sample field names should not hold '/' or a NUL byte, but sample 'a' has 'seg/png': "
        r"the member 'a.seg/png' would not read back",
    ),
    "a key that is not a string": (
        lambda f: written(f, {"__key__": 3, "cls": 1}),
        TypeError,
        r"sample\['__key__'\] should be a string, but got 3 of type int",
    ),
    "a sample that is not a dict": (
        lambda f: written(f, [("__key__", "a")]),
        TypeError,
        r"sample should be a dict with '__key__' and one entry per member, but got list",
    ),
}


@pytest.mark.parametrize("case", list(WRITER_CASES), ids=list(WRITER_CASES))
def test_shard_writer_arguments_that_would_lose_or_misname_samples_are_refused(
    tmp_path: Path, case: str
) -> None:
    call, kind, message = WRITER_CASES[case]
    with pytest.raises(kind, match=message):
        call(tmp_path)
    if "after close" not in case:  # refused before a sample was written
        keys = set()
        for shard in tmp_path.glob("*.tar"):
            with tarfile.open(shard) as archive:
                keys |= set(archive.getnames())
        assert keys == set()


def test_a_key_with_a_dot_in_a_folder_name_reads_back_as_written(tmp_path: Path) -> None:
    written(tmp_path, {"__key__": "v1.0/img", "cls": 7}, {"__key__": "v1.0/img2", "cls": 8})
    url = str(tmp_path / "d-0.tar")
    (batch,) = take(source(url, shuffle_shards=False, collate_fn=list, repeat=False), 1)
    assert [sample["__key__"] for sample in batch] == ["v1.0/img", "v1.0/img2"]


def chains_built_with(number: Callable[[int], Any]) -> dict[str, Any]:
    """Every public constructor that takes integers, built with ``number(value)``."""
    n = number
    return {
        "DataLoader": DataLoader(range(12), batch_size=n(4), seed=n(2)).get_data_loader(
            repeat=True, num_replicas=n(2), rank=n(1), skip=n(1), skip_samples=n(2)
        ),
        "DataLoader with workers": DataLoader(
            range(12), batch_size=n(4), num_workers=n(1), prefetch_factor=n(2)
        ).get_data_loader(repeat=True),
        "make_batch_sampler": ds.make_batch_sampler(
            range(12), "training", n(0), n(2), n(1), n(3), n(1), skip_samples=n(2)
        ),
        "make_batch_sampler, validation": ds.make_batch_sampler(
            range(12), "validation", n(0), n(2), n(1), n(3)
        ),
        "make_mixed_batch_sampler": ds.make_mixed_batch_sampler(
            [range(6), range(2)], [3, 1], n(0), n(1), n(0), n(4), n(1), window=n(8)
        ),
        "stages": ds.SkipBatchSampler(
            tud.BatchSampler(
                ds.DistributedSampler(
                    ds.RepeatSampler(ds.ReproducibleShuffleSampler(range(12), n(3))), n(2), n(1)
                ),
                4,
                False,
            ),
            n(1),
            skip_samples=n(2),
        ),
        "GrowingShuffleSampler": ds.RepeatSampler(
            ds.GrowingShuffleSampler(range(12), n(1), initial_length=n(10), growth=[(n(15), 12)])
        ),
    }


@pytest.mark.workers
def test_numpy_integers_are_accepted_wherever_an_int_is_meant_and_give_the_same_stream() -> None:
    ints, numpy = chains_built_with(int), chains_built_with(np.int64)
    for name, chain in numpy.items():
        batches = [b.tolist() if isinstance(b, torch.Tensor) else b for b in take(chain, 4)]
        expected = [b.tolist() if isinstance(b, torch.Tensor) else b for b in take(ints[name], 4)]
        assert batches == expected, name
        sampler = chain.batch_sampler if isinstance(chain, tud.DataLoader) else chain
        if name != "make_batch_sampler, validation":  # torch's BatchSampler: no state
            state = sampler.state_dict()
            assert json.loads(json.dumps(state)) == state, name  # plain ints, JSON-able
    with pytest.raises(TypeError, match=r"rank should be an integer value, but got rank=np.True_"):
        ds.DistributedSampler(range(4), 2, np.bool_(True))


def test_a_skip_past_the_end_of_a_finite_chain_keeps_determineds_output_and_warns_once() -> None:
    records = ds.SkipSampler(range(4), 6)
    batches = ds.SkipBatchSampler(tud.BatchSampler(range(4), 2, False), 2)
    unsized = ds.SkipSampler(Unsized(3), 3)
    for chain, warning in (
        (
            records,
            r"SkipSampler skips 6 items, but a pass of its sampler holds 4: every pass "
            r"yields nothing, as Determined's SkipSampler does. .* the repeat is missing",
        ),
        (batches, r"SkipBatchSampler skips 2 batches, but a pass of its batch_sampler holds 2"),
        (unsized, r"SkipSampler skips 3 items, but a pass of its sampler holds at most 3"),
    ):
        with pytest.warns(UserWarning, match=warning) as caught:
            passes = [list(chain), list(chain), list(chain)]
        assert passes == [[], [], []]
        ours = [w for w in caught if "every pass yields nothing" in str(w.message)]
        assert len(ours) == 1  # once per sampler (a finalizer's ResourceWarning may also land)
        assert ours[0].filename == __file__  # at the line that iterates
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(ds.SkipSampler(Unsized(5), 2)) == [2, 3, 4]  # as Determined's
        assert list(ds.SkipSampler(range(4), 3)) == [3]


@pytest.fixture
def no_webdataset(monkeypatch: pytest.MonkeyPatch) -> None:
    """Import webdataset as an install without the extra would: it is not there."""
    for name in ("webdataset", "webdataset.shardlists", "webdataset.autodecode"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "detsamplers.loader._wds.index._shard_writer", raising=False)


INSTALL = r"webdataset shards need the webdataset package, which is not installed here .*: pip install webdataset \(or, in a clone of detsamplers, pip install -c constraints.txt -e '\.\[webdataset\]'\)"  # noqa: E501


@pytest.mark.usefixtures("no_webdataset")
def test_without_the_webdataset_extra_each_entry_point_says_how_to_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from detsamplers.__main__ import main

    shard = tmp_path / "a.tar"
    write_tar(shard, 3)
    with pytest.raises(ModuleNotFoundError, match=INSTALL):
        WebDatasetSource(str(shard), seed=0, batch_size=2)
    with pytest.raises(ModuleNotFoundError, match=INSTALL):
        ds.loader.WebDatasetMix([str(shard), str(shard)], [1, 1], seed=0, batch_size=2)
    with pytest.raises(ModuleNotFoundError, match=INSTALL):
        from detsamplers.loader import ShardWriter  # noqa: F401
    assert main(["index", str(shard)]) == 1
    assert re.search("index failed: " + INSTALL, capsys.readouterr().err)
    assert not (tmp_path / "a.tar.index.npz").exists()


@pytest.mark.subprocess
def test_the_index_command_without_webdataset_exits_1_with_the_install_line(
    tmp_path: Path,
) -> None:
    shard = tmp_path / "a.tar"
    write_tar(shard, 3)
    blocked = (
        "import runpy, sys; sys.modules['webdataset'] = None; "
        "sys.argv = ['detsamplers', 'index', sys.argv[1]]; "
        "runpy.run_module('detsamplers', run_name='__main__', alter_sys=True)"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked, str(shard)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 1, done.stderr
    assert re.search(INSTALL, done.stderr), done.stderr


def kernel_status_of(package: Path) -> str:
    """``kernel_status()`` of the copy of detsamplers in ``package``, imported alone.

    ``python -S`` keeps the editable install's finder (which would find the worktree's
    kernel) out; site-packages is on PYTHONPATH for torch and numpy.
    """
    site = sysconfig.get_paths()["purelib"]
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import detsamplers as d; print(d.__file__, d.kernel_status())",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=package,
        env={**os.environ, "PYTHONPATH": f"{package}{os.pathsep}{site}"},
    )
    assert done.returncode == 0, done.stderr
    where, _, status = done.stdout.strip().partition(" ")
    assert where == str(package / "detsamplers" / "__init__.py")
    return status


@pytest.mark.subprocess
@pytest.mark.parametrize("kernel", ["absent", "broken"])
def test_kernel_status_says_plainly_what_an_install_without_the_kernel_costs(
    tmp_path: Path, kernel: str
) -> None:
    root = Path(ds.__file__).parent
    shutil.copytree(
        root,
        tmp_path / "detsamplers",
        ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"),
    )
    if kernel == "broken":
        (tmp_path / "detsamplers" / Path(ds._native.kernel.__file__).name).write_bytes(b"not ELF")  # type: ignore[union-attr]
    status = kernel_status_of(tmp_path)
    assert "circular import" not in status
    cost = (
        r"mixtures \(MixSampler, WebDatasetMix\) then compute their indices in numpy: the "
        r"same stream, at about 0.6 to 0.7 of the plain chain's speed .*; to build it, "
        r"install a C compiler .* and reinstall detsamplers"
    )
    first = {
        "absent": r"numpy \(detsamplers was installed without its compiled kernel, most likely "
        r"because no C compiler was found when it was installed; ",
        "broken": r"numpy \(the compiled kernel .*_kernel.* is there but did not load: ",
    }[kernel]
    assert re.match(first + ".*" + cost, status), status


@pytest.mark.servers
def test_a_server_that_ignores_range_requests_is_reported_when_the_source_is_built(
    tmp_path: Path,
) -> None:
    from tests.webdataset.http_server import ShardServer

    write_tar(tmp_path / "a.tar", 5)
    write_tar(tmp_path / "b.tar", 5)
    server = ShardServer(tmp_path)
    try:
        urls = [f"{server.url}/a.tar", f"{server.url}/b.tar"]
        built = WebDatasetSource(urls, seed=0, batch_size=5, index_dir=str(tmp_path / "cache"))
        assert sorted(int(x) for x in next(iter(built))["txt"]) == [0, 1, 2, 3, 4]
        server.reset()
        server.no_range = {"a.tar", "b.tar"}
        with pytest.raises(
            ValueError,
            match=r"shard 'http://127.0.0.1:\d+/a.tar': the server ignores Range requests \(it "
            r"answered 'Range: bytes=0-0' with HTTP 200 and the whole file\), but the source "
            r"reads byte ranges of shards; serve them from a server that honours Range "
            r"requests .* or download the shards and pass their local paths",
        ):  # the index is cached: nothing else would read a shard before the first batch
            WebDatasetSource(urls, seed=0, batch_size=5, index_dir=str(tmp_path / "cache"))
        statuses = server.served.statuses
        assert [s for s in statuses if s[0].endswith(".tar")] == [("a.tar", 200), ("a.tar", 200)]
        # Before that one probe of the host: each shard's own index file, asked for with
        # Range: bytes=0- (a 206 would have settled the host, NOTE [ range support ]).
        assert sorted(s for s in statuses if not s[0].endswith(".tar")) == [
            ("a.tar.index.npz", 404),
            ("b.tar.index.npz", 404),
        ]
    finally:
        server.close()


@settings(max_examples=60, deadline=None)
@given(length=st.integers(0, 12), skip=st.integers(0, 16), sized=st.booleans())
def test_a_finite_skip_is_determineds_and_warns_exactly_when_it_empties_the_pass(
    length: int, skip: int, sized: bool
) -> None:
    sampler = ForeignSampler(range(length)) if sized else Unsized(length)
    chain = ds.SkipSampler(sampler, skip)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        passes = [list(chain), list(chain)]
    assert passes == [list(range(length))[skip:]] * 2  # Determined's SkipSampler, every pass
    # Only the sampler's own warning counts: "always" also records whatever the garbage
    # collector happens to finalize meanwhile (an earlier test's socket, a ResourceWarning).
    ours = [w for w in caught if "every pass yields nothing" in str(w.message)]
    assert len(ours) == (1 if skip and skip >= length else 0)
