"""Hostile input to the samplers (the stages, their states, the kernel's absence) is a clear error.

One parametrised case per input under a 20 s alarm (tests/bad_input.py): the fitting exception
type, and a message naming the parameter or field, the value, and the fix.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import given, settings
from hypothesis import strategies as st

import detsamplers as ds
from detsamplers.loader import DataLoader
from tests.bad_input import (
    Case,
    alarm,  # noqa: F401  # autouse: fails a case that hangs
    assert_clear_error,
)
from tests.helpers import ForeignSampler, take


def chain() -> ds.SkipSampler[int]:
    return ds.SkipSampler(ds.DistributedSampler(ds.RepeatSampler(range(10)), 2, 0), 3)


STATE = chain().state_dict()


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
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_hostile_input_to_the_stages_and_their_states_is_a_clear_error(case: str) -> None:
    assert_clear_error(*CASES[case])


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


SWEEP_CASES: dict[str, Case] = {
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
}


@pytest.mark.parametrize("case", list(SWEEP_CASES), ids=list(SWEEP_CASES))
def test_a_shuffle_over_a_sampler_it_cannot_read_a_pass_of_is_a_clear_error(case: str) -> None:
    assert_clear_error(*SWEEP_CASES[case])


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


@pytest.mark.subprocess
@pytest.mark.parametrize("sources", ["edited", "none"])
def test_a_kernel_built_from_other_c_files_than_the_checkouts_runs_numpy_and_says_rebuild(
    tmp_path: Path, sources: str
) -> None:
    """A checkout pulled without a rebuild: its kernel may lack a function or take other
    arguments, so the numpy path runs and the status says to rebuild; a wheel (no C files
    beside the module) keeps its kernel."""
    root = Path(ds.__file__).parent
    shutil.copytree(root, tmp_path / "detsamplers", ignore=shutil.ignore_patterns("__pycache__"))
    c_files = sorted((tmp_path / "detsamplers").glob("_kernel*.c"))
    assert len(c_files) >= 2
    if sources == "edited":  # one byte more in one C file
        with open(c_files[-1], "ab") as file:
            file.write(b"\n")
        status = kernel_status_of(tmp_path)
        assert re.match(
            r"numpy \(the compiled kernel .*_kernel.* was built from other C files than the "
            r"ones beside it \(built from [0-9a-f]{8}, the files now [0-9a-f]{8}\): it is "
            r"stale; mixtures .*; rebuild it in the checkout \(python setup.py build_ext "
            r"--inplace, or make install, or pip install -e . again\)\)$",
            status,
        ), status
    else:
        for path in c_files:
            path.unlink()
        assert kernel_status_of(tmp_path) == "compiled"
