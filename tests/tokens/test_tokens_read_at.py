"""Ends read by position (``read_at``): the same values as the map, without its pages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.tokens import TokenCorpus, TokenSequences
from detsamplers.tokens._ends_check import READ_GAP, EndsCheck, distinct, mapped_from, read_at

ROOT = Path(__file__).resolve().parents[2]


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(["uint16", "uint32", "int32", "int64", "uint64"]),
    size=st.integers(1, 3000),
    skip=st.integers(0, 40),
    picks=st.lists(st.integers(0, 10**6), min_size=0, max_size=80),
    step=st.sampled_from([1, 7, READ_GAP // 8 + 1]),
)
def test_values_read_at_positions_of_a_mapped_file_equal_the_maps_values(
    tmp_path_factory: pytest.TempPathFactory,
    dtype: str,
    size: int,
    skip: int,
    picks: list[int],
    step: int,
) -> None:
    path = tmp_path_factory.mktemp("read") / "v.npy"
    values = np.random.default_rng(size).integers(0, 60_000, size, dtype=np.int64)
    np.save(path, values.astype(dtype))
    mapped = mapped_from(np.load(path, mmap_mode="r"), path)
    view = mapped[min(skip, size - 1) :].view(np.ndarray)
    # Unsorted, repeated, and runs of neighbours (step 1), spread ones and wide gaps.
    at = np.array([(p * step) % len(view) for p in picks], dtype=np.int64)
    got = read_at(view, at)
    assert got.dtype == np.int64
    assert got.tolist() == np.asarray(view[at], np.int64).tolist()


def test_an_array_that_maps_no_recorded_file_is_indexed_as_usual(tmp_path: Path) -> None:
    in_memory = np.array([5, 9, 14], dtype=np.int32)
    assert read_at(in_memory, np.array([2, 0])).tolist() == [14, 5]
    path = tmp_path / "v.npy"
    np.save(path, in_memory)
    unrecorded = np.load(path, mmap_mode="r")  # no mapped_from: read through the map
    assert read_at(unrecorded, np.array([1, 1])).tolist() == [9, 9]


def test_a_file_that_shrank_while_open_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "v.npy"
    np.save(path, np.arange(4096, dtype=np.int64))
    mapped = mapped_from(np.load(path, mmap_mode="r"), path)
    os.truncate(path, 1024)
    with pytest.raises(ValueError, match=r"file .*v\.npy should hold .* it changed while open"):
        read_at(mapped, np.array([4000]))
    with pytest.raises(ValueError, match=r"file .*v\.npy should hold .* it changed while open"):
        read_at(mapped, np.array([3000, 3001]))


GROWTH = """
import json, sys
from pathlib import Path
from typing import Any
import numpy as np
from detsamplers.tokens import TokenCorpus, TokenSequences

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

folder = Path(sys.argv[1])
small = TokenCorpus(folder / "small.bin", dtype="uint16", lengths=[folder / "small.lengths.npy"])
TokenSequences(small, 8, mode="concat", seed=0)  # the code's own pages, before counting
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM from here
before = status("VmRSS:")
corpus = TokenCorpus(folder / "big.bin", dtype="uint16", lengths=[folder / "big.lengths.npy"])
sequences = TokenSequences(corpus, 2048, mode="concat", seed=0)
sequences._concat.index(0)
print(json.dumps({"growth": status("VmHWM:") - before, "ends": 8 * corpus.num_documents}))
"""


@pytest.mark.subprocess
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's VmHWM")
def test_a_concat_build_from_a_large_cached_ends_file_keeps_it_out_of_memory(
    tmp_path: Path,
) -> None:
    # 2e6 documents: a 16 MB ends cache and an 8 MB sidecar, both in the page cache.
    documents = 2_000_000
    lengths = np.random.default_rng(0).integers(1, 4, documents).astype(np.int32)
    for name, counts in (("small", lengths[:5000]), ("big", lengths)):
        with (tmp_path / f"{name}.bin").open("wb") as out:
            out.truncate(2 * int(counts.sum()))  # sparse: the build reads no token
        np.save(tmp_path / f"{name}.lengths.npy", counts)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # The ends cache, built here (only the measured run needs a process of its own).
    big = TokenCorpus(tmp_path / "big.bin", dtype="uint16", lengths=[tmp_path / "big.lengths.npy"])
    TokenSequences(big, 2048, mode="concat", seed=0)._concat.index(0)
    assert (tmp_path / "big.lengths.npy.ends.npy").is_file()
    command = [sys.executable, "-c", GROWTH, str(tmp_path)]
    done = subprocess.run(command, check=True, env=env, capture_output=True, timeout=300)
    found = json.loads(done.stdout.decode().strip().splitlines()[-1])
    # Through the map, the sampled checks alone made most of both files resident, and the
    # block starts a 4 MB window of ends at a time. Read by position, the first build of a
    # fresh corpus grows by about 2.6 MB alone and grew by 3.76 MB once on a CI of 4 busy
    # xdist workers; a half of the ends file still tells the map from the reads.
    assert found["ends"] == 16_000_000
    assert found["growth"] < found["ends"] // 2, found


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.integers(-(2**62), 2**62) | st.integers(0, 5), max_size=60))
def test_distinct_values_and_their_places_are_numpys_unique_and_inverse(values: list[int]) -> None:
    array = np.array(values, dtype=np.int64)
    kept, back = distinct(array)
    unique, inverse = np.unique(array, return_inverse=True)
    assert kept.tolist() == unique.tolist()
    assert back.tolist() == inverse.reshape(-1).tolist()
    assert kept[back].tolist() == values


@settings(max_examples=80, deadline=None)
@given(
    steps=st.lists(st.integers(1, 5), min_size=1, max_size=90),
    forged=st.none() | st.tuples(st.integers(0, 89), st.integers(-3, 400)),
    at=st.lists(st.integers(0, 89), min_size=1, max_size=30),
    region=st.integers(1, 9),
)
def test_regions_checked_in_runs_pass_and_fail_as_they_do_one_by_one(
    steps: list[int], forged: tuple[int, int] | None, at: list[int], region: int
) -> None:
    ends = np.cumsum(steps).astype(np.int64)
    if forged is not None:
        ends[forged[0] % len(ends)] = forged[1]
    tokens = int(np.cumsum(steps)[-1])
    at = [a % len(ends) for a in at]

    def outcome(check: EndsCheck, cover: Any) -> tuple[str, list[bool]]:
        try:
            cover()
        except ValueError as error:
            return str(error), check._done.tolist()
        return "", check._done.tolist()

    runs = EndsCheck(len(ends), tokens, "c.npy", checked=False, region=region)
    one_by_one = EndsCheck(len(ends), tokens, "c.npy", checked=False, region=region)
    got = outcome(runs, lambda: runs.cover_at(ends, np.array(at)))

    def each() -> None:
        for r in sorted({a // region for a in at}):
            one_by_one._check(ends, r)

    assert got == outcome(one_by_one, each)
    ranged = EndsCheck(len(ends), tokens, "c.npy", checked=False, region=region)
    low, high = min(at), max(at) + 1
    whole = EndsCheck(len(ends), tokens, "c.npy", checked=False, region=region)

    def each_range() -> None:
        for r in range(low // region, (high - 1) // region + 1):
            whole._check(ends, r)

    assert outcome(ranged, lambda: ranged.cover(ends, low, high)) == outcome(whole, each_range)
