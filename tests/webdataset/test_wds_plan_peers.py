"""docs/plan.md's peer columns: the rules restated in benchmarks/plan_rules.py are the peers' own.

benchmarks/plan_rules.py computes Mosaic's and litdata's assignment of shards to nodes
from rules restated from their code (the 1,024-GPU cluster is too large to run them). Here
the peers' own code runs on small clusters, as their datasets call it, and each node's
shards must be exactly what the restated rule gives:

- Mosaic streaming (its pinned wheel unpacked into ``.mosaic-lib`` by ``make install``,
  without its dependencies: it cannot share the main venv), in one subprocess of the main
  venv that imports only its ``partition`` and ``shuffle`` packages (numpy), under empty
  ``streaming`` and ``streaming.base`` packages (their ``__init__`` would import torch's
  loader, the cloud SDKs and torchvision): ``get_partitions("orig", ...)`` then
  ``get_shuffle("py1e", ...)`` applied to the ids, as ``generate_work_random_batching``
  does for one stream, with ``StreamingDataset``'s defaults (canonical nodes = physical
  nodes, seed 9176, its block size), for epochs 0 to 2: the node's shards each epoch;
- litdata (the main venv): ``FullShuffle.get_chunks_and_intervals_per_workers`` for epoch
  1 on a cluster of more than one node, each node's chunks grouped by litdata's own
  ``_unique_chunk_indexes_per_node``.

A peer that is not installed is skipped, saying which and how to install it.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Mosaic streaming's code (``make install``: pip install --no-deps --target .mosaic-lib).
MOSAIC_LIB = ROOT / ".mosaic-lib"

#: (shard sample counts, nodes, ranks a node, workers a rank, batch size)
CLUSTERS = [
    ([100] * 40, 4, 2, 2, 4),
    ([37, 80, 5, 64, 120, 9, 51, 77, 33, 90, 12, 66, 48, 101, 7, 58], 2, 4, 1, 3),
    (list(range(20, 84, 2)), 8, 1, 3, 2),
    ([250] * 12, 3, 2, 4, 8),
]
IDS = ["equal", "uneven-2-nodes", "8-nodes", "3-nodes"]

_MOSAIC_SCRIPT = """
import json, os, sys, types
import numpy as np
lib = sys.argv[1]
for name in ("streaming", "streaming.base"):  # empty packages: their __init__ never runs
    package = types.ModuleType(name)
    package.__path__ = [os.path.join(lib, *name.split("."))]
    sys.modules[name] = package
from streaming.base.partition import get_partitions
from streaming.base.shuffle import get_shuffle
assert os.path.dirname(sys.modules["streaming.base.partition"].__file__).startswith(lib)
out = []
for counts, nodes, per_node, workers, batch in json.load(sys.stdin):
    counts = np.array(counts, np.int64)
    block = max(4_000_000 // nodes, 1 << 18)  # StreamingDataset's shuffle_block_size default
    ends = np.cumsum(counts)
    epochs = []
    for epoch in range(3):
        ids = get_partitions("orig", int(counts.sum()), nodes, nodes, per_node, workers, batch)
        shuffle = get_shuffle("py1e", counts, nodes, 9176, epoch, block)
        ids = np.where(ids != -1, shuffle[ids], -1)
        sets = []
        for node in range(nodes):
            got = ids[node].ravel()
            got = got[got != -1]
            sets.append(np.unique(np.searchsorted(ends, got, side="right")).tolist())
        epochs.append(sets)
    out.append(epochs)
json.dump(out, sys.stdout)
"""


def _rules() -> Any:
    spec = importlib.util.spec_from_file_location("plan_rules", ROOT / "benchmarks/plan_rules.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _restated(sets: list[np.ndarray]) -> list[list[int]]:
    return [sorted(int(s) for s in shards) for shards in sets]


def mosaic_missing(lib: Path) -> str | None:
    """Why Mosaic's partition and shuffle code cannot run from ``lib`` (``None``: it can)."""
    found = [lib / "streaming" / "base" / name / "__init__.py" for name in ("partition", "shuffle")]
    if all(path.is_file() for path in found):
        return None
    return (
        f"Mosaic streaming's partition and shuffle code is not in {lib}: run make install "
        f"(or python -m pip install --no-deps --target {lib.name} mosaicml-streaming==0.13.0)"
    )


@pytest.fixture(scope="module")
def mosaic_epochs() -> list[Any]:
    """Each cluster's node shard sets for epochs 0 to 2, from Mosaic's code, in one process."""
    why = mosaic_missing(MOSAIC_LIB)
    if why is not None:
        pytest.skip(why)
    ran = subprocess.run(
        [sys.executable, "-c", _MOSAIC_SCRIPT, str(MOSAIC_LIB)],
        input=json.dumps(CLUSTERS),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    out: list[Any] = json.loads(ran.stdout)
    return out


def test_the_skip_without_mosaics_code_names_the_folder_and_the_fix(tmp_path: Path) -> None:
    why = mosaic_missing(tmp_path / ".mosaic-lib")
    assert why is not None and str(tmp_path / ".mosaic-lib") in why
    assert "run make install" in why and "mosaicml-streaming==0.13.0" in why
    (tmp_path / ".mosaic-lib" / "streaming" / "base" / "partition").mkdir(parents=True)
    (tmp_path / ".mosaic-lib" / "streaming" / "base" / "partition" / "__init__.py").touch()
    assert mosaic_missing(tmp_path / ".mosaic-lib") is not None  # shuffle still missing


@pytest.mark.subprocess  # Mosaic's code runs in a process of its own
@pytest.mark.parametrize("cluster", CLUSTERS, ids=IDS)
def test_mosaics_own_partition_and_py1e_shuffle_give_each_node_the_restated_rules_shards(
    cluster: tuple[list[int], int, int, int, int], mosaic_epochs: list[Any]
) -> None:
    counts, nodes = cluster[0], cluster[1]
    epochs = mosaic_epochs[CLUSTERS.index(cluster)]
    expected = _restated(_rules().mosaic_sets(np.array(counts, dtype=np.int64), nodes))
    assert len(epochs) == 3
    for sets in epochs:  # the same shards every epoch: only the order inside a node changes
        assert sets == expected


@pytest.mark.parametrize("cluster", CLUSTERS, ids=IDS)
def test_litdatas_own_full_shuffle_gives_each_node_the_restated_rules_chunks_in_epoch_1(
    cluster: tuple[list[int], int, int, int, int],
) -> None:
    pytest.importorskip("litdata", reason="litdata is not installed: pip install litdata")
    from litdata.streaming.shuffle import FullShuffle
    from litdata.utilities.env import _DistributedEnv
    from litdata.utilities.shuffle import _unique_chunk_indexes_per_node

    counts, nodes, per_node, workers, batch = cluster
    starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
    intervals = [(a, a, b, b) for a, b in itertools.pairwise(starts)]
    config = SimpleNamespace(_chunks=[{"chunk_bytes": c} for c in counts])
    reader = SimpleNamespace(_config=config, _max_cache_size=0)  # the cache: no limit
    cache = SimpleNamespace(_reader=reader, get_chunk_intervals=lambda: intervals)
    shuffle = FullShuffle(cache, seed=42, drop_last=False)  # type: ignore[arg-type]
    env = _DistributedEnv(world_size=nodes * per_node, global_rank=0, num_nodes=nodes)
    chunks, _ = shuffle.get_chunks_and_intervals_per_workers(env, workers, batch, 1)
    got = [sorted(n) for n in _unique_chunk_indexes_per_node(chunks, env, workers)]
    rules = _rules()
    assert got == _restated(rules.litdata_sets(np.array(counts), nodes, per_node, batch))
