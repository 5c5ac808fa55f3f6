"""Hostile input to the public surface gets a clear error, never a raw one, a hang or silence.

One parametrised case per input, each under a 20 s alarm: the fitting exception type, and
a message naming the parameter, field, shard or file, the value, and the fix.
"""

from __future__ import annotations

import io
import json
import signal
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import torch
import torch.utils.data as tud

import detsamplers as ds
from detsamplers.loader import DataLoader, WebDatasetSource
from detsamplers.trial import init, load_trial_from_checkpoint_path
from detsamplers.trial._demo_trial import DemoTrial
from tests.helpers import take


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
