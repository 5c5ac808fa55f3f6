"""MosaicML streaming: ``MDSWriter`` shards read by ``StreamingDataset`` and its loader.

mosaicml-streaming 0.13 cannot share ``.venv`` with datasets 5 (huggingface_hub), so it
lives in ``.venv-mosaic`` (``make mosaic``): ``peers_table.py`` runs these peers there, in a
process of their own, and merges their figures into the same tables. ``import streaming``
runs ``streaming/__init__.py``, which imports the vision datasets and so torchvision (whose
PyPI wheel does not load next to the CPU torch 2.13.0); ``streaming_base()`` imports
``streaming.base`` (the datasets, loader, writer and shuffles) without it.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import tempfile
import types
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from typing import Any

from harness.capability import Outcome, loader_capability, loader_rank_run, state_after
from harness.samples import PNG

from peers import Peer, ShardFormat

#: The venv (relative to the repository root) that has mosaicml-streaming.
VENV = ".venv-mosaic"
#: MDS columns of the question-4 sample.
COLUMNS = {"png": "bytes", "cls": "int"}
#: Bytes one sample takes in an MDS shard: 4 (offset) + 4 (size of png) + png + 8 (cls),
#: and a shard's header (its sample count, last offset and column table), as written.
SAMPLE_BYTES, HEADER_BYTES = 4 + 4 + len(PNG) + 8, 197
#: Samples per shard of the question-2 and question-3 datasets (Mosaic's default shard
#: limit, 64 MB, holds about this many 640-byte samples).
SHARD = 100_000


def streaming_base() -> Any:
    """``streaming.base``, imported without running ``streaming/__init__.py``.

    An empty ``streaming`` package (its real path, no code run) is registered first, so
    that ``streaming.vision`` (torchvision) and ``streaming.text`` are never imported.
    """
    if "streaming" not in sys.modules:
        spec = importlib.util.find_spec("streaming")
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError("mosaicml-streaming is not installed (make mosaic)")
        package = types.ModuleType("streaming")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["streaming"] = package
    return importlib.import_module("streaming.base")


def write(folder: str, total: int, per_shard: int) -> str:
    """``MDSWriter`` of the samples, ``size_limit`` set for ``per_shard`` samples a shard."""
    return _write(folder, total, HEADER_BYTES + per_shard * SAMPLE_BYTES)


def _write(folder: str, total: int, limit: int) -> str:
    out = os.path.join(folder, "mds")
    with streaming_base().MDSWriter(out=out, columns=COLUMNS, size_limit=limit) as sink:
        for i in range(total):
            sink.write({"png": PNG, "cls": i})
    return out


def loader(folder: str, workers: int, batch: int, **options: Any) -> Any:
    """``StreamingDataLoader(StreamingDataset(local=folder, shuffle=True, shuffle_seed=0,
    batch_size=batch), batch_size=batch, num_workers=workers)``: py1e, the defaults."""
    base = streaming_base()
    dataset = base.StreamingDataset(
        local=folder, shuffle=True, shuffle_seed=0, batch_size=batch, **options
    )
    return base.StreamingDataLoader(dataset, batch_size=batch, num_workers=workers)


def _labels(batch: Any) -> list[int]:
    """The labels of a batch (default_collate's tensor), as ours: ``.tolist()``."""
    labels: list[int] = batch["cls"].tolist()
    return labels


def _stop(data: Any) -> None:
    """End the threads that fetch shards ahead of an epoch left midway (else they go on and
    fail once the temporary folder is gone): set the event Mosaic's own error path sets."""
    event = getattr(data.dataset, "_event", None)
    if event is not None:
        event.set()


def epoch(folder: str, workers: int, batch: int) -> Iterator[list[int]]:
    """One epoch of the loader (each ``iter()`` is an epoch)."""
    data = loader(folder, workers, batch)
    try:
        for out in data:
            yield _labels(out)
    finally:
        _stop(data)


def state_at(folder: str, batch: int, position: int, total: int) -> dict[str, Any]:
    """The state ``StreamingDataLoader.state_dict()`` returns after ``position`` samples.

    Reaching it by iterating takes ``position`` samples: this asks the dataset's own
    ``state_dict(sample_in_epoch, from_beginning=True)`` with its epoch counter
    (``next_epoch``) where iterating would leave it. ``_check_state_at`` checks, by
    iterating, that both give the same state.
    """
    dataset = loader(folder, 0, batch).dataset
    dataset.next_epoch = position // total + 1
    state: dict[str, Any] = dataset.state_dict(position % total, True)
    return state


def _iterated_state(folder: str, batch: int, position: int) -> tuple[dict[str, Any], int]:
    """The loader's state after the first batch ending at or past ``position``, and where."""
    state, seen = state_after(loader(folder, 0, batch), position, lambda out: len(out["cls"]))
    return dict(state), seen


def _check_state_at(folder: str, batch: int, position: int, total: int) -> None:
    iterated, seen = _iterated_state(folder, batch, position)
    built = state_at(folder, batch, seen, total)
    if iterated != built:
        raise RuntimeError(f"Mosaic's state after iterating {iterated} != built {built}")


def _resume_from(folder: str, batch: int, state: dict[str, Any]) -> Callable[[], list[int]]:
    def run() -> list[int]:
        fresh = loader(folder, 0, batch)
        fresh.load_state_dict(state)
        labels = _labels(next(iter(fresh)))
        _stop(fresh)
        return labels

    return run


def resume(folder: str, batch: int, position: int) -> Callable[[], list[int]]:
    """The loader's state at ``position`` (``state_at``) loaded into a fresh loader."""
    total = _total(folder)
    return _resume_from(folder, batch, state_at(folder, batch, position, total))


def _total(folder: str) -> int:
    with open(os.path.join(folder, "index.json"), encoding="utf-8") as f:
        return sum(int(shard["samples"]) for shard in json.load(f)["shards"])


@cache
def linked(n: int) -> str:
    """An MDS dataset of ``n`` samples: ``n / SHARD`` links to one real shard of ``SHARD``.

    The index is Mosaic's own (one entry per link); the samples repeat per shard, which no
    question here reads beyond a first batch. Kept for the process's life.
    """
    per_shard = min(n, SHARD)
    if n % per_shard:
        raise ValueError(f"n={n} must be a multiple of {per_shard}")
    folder = tempfile.mkdtemp(prefix="mosaic-linked-")
    real = _write(folder, per_shard, 1 << 30)
    with open(os.path.join(real, "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    [shard] = index["shards"]
    out = os.path.join(folder, "links")
    os.mkdir(out)
    shards = []
    for k in range(n // per_shard):
        name = f"shard.{k:06d}.mds"
        os.symlink(os.path.join(real, shard["raw_data"]["basename"]), os.path.join(out, name))
        shards.append({**shard, "raw_data": {**shard["raw_data"], "basename": name}})
    with open(os.path.join(out, "index.json"), "w", encoding="utf-8") as f:
        json.dump({**index, "shards": shards}, f)
    return out


def index_resume(n: int, batch: int, position: int) -> Callable[[], Sequence[int]]:
    """Question 2: the state at ``position`` of an ``n``-sample dataset, loaded afresh.

    The first call (the harness's warm-up, small n) also checks that the built state equals
    the one iterating to ``position`` gives.
    """
    folder = linked(n)
    if n <= 1000:
        _check_state_at(folder, batch, position, n)
    return _resume_from(folder, batch, state_at(folder, batch, position, n))


#: Canonical nodes and block size StreamingDataset picks on one node (``_resume``):
#: 64 canonical nodes for py1s and py2s, else 1; block max(4e6 // nodes, 2**18).
def _shuffle_defaults(algo: str) -> tuple[int, int]:
    nodes = 64 if algo in ("py1s", "py2s") else 1
    return nodes, max(4_000_000 // nodes, 1 << 18)


def shuffle_first(algo: str) -> Callable[[int], object]:
    """Question 3: ``get_shuffle(algo, shards of SHARD, ...)[0]``, StreamingDataset's defaults."""

    def first(n: int) -> int:
        np = importlib.import_module("numpy")
        streaming_base()
        shuffle = importlib.import_module("streaming.base.shuffle")
        per_shard = min(n, SHARD)
        sizes = np.full(n // per_shard, per_shard, np.int64)
        nodes, block = _shuffle_defaults(algo)
        return int(shuffle.get_shuffle(algo, sizes, nodes, 0, 0, block)[0])

    return first


def rank_run(
    world: int,
    rank: int,
    batch: int,
    steps: int,
    save_at: int | None,
    state: dict[str, Any] | None,
    folder: str,
) -> dict[str, Any]:
    """One rank of a torchrun (Mosaic reads RANK, WORLD_SIZE, LOCAL_WORLD_SIZE)."""
    return loader_rank_run(loader(folder, 0, batch), _labels, state, steps, save_at)


def capability(quick: bool) -> dict[str, Outcome]:
    """StreamingDataLoader's state after CAP_AT steps, loaded into a fresh loader; on other
    world sizes through torchrun (``rank_run``), num_canonical_nodes left to Mosaic."""
    return loader_capability(__name__, write, loader, _labels, quick)


HOW = (
    "MDSWriter(columns png: bytes, cls: int) then StreamingDataLoader(StreamingDataset("
    "local=dir, shuffle=True, shuffle_seed=0, batch_size=B), batch_size=B, num_workers=w): "
    "its defaults, py1e shuffle, num_canonical_nodes = 1 node; resume: load_state_dict of "
    "the loader's state_dict()"
)

PEERS = [
    Peer(
        name="Mosaic streaming",
        distribution="mosaicml-streaming",
        module="streaming",
        venv=VENV,
        how=HOW,
        resume=index_resume,
        shards=ShardFormat(write, epoch, resume),
        capability=capability,
    ),
    *(
        Peer(
            name=f"Mosaic {algo}",
            distribution="mosaicml-streaming",
            module="streaming",
            venv=VENV,
            shuffle_first=shuffle_first(algo),
        )
        for algo in ("py1e", "py1br", "py1s", "py2s", "naive")
    ),
]
