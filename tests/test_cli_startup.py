"""The CLI answers ``--help`` and a mistyped argument without importing torch or numpy.

``python -m detsamplers`` imports the package before its ``__main__`` runs: the package's
public names are imported on first use (NOTE [ lazy public names ]) and each command imports
what it needs when it runs, so the parser alone costs no torch (about 3 s of CPU).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import detsamplers as ds

#: The checkout whose ``detsamplers`` the child imports (``-m`` puts the cwd first on the path).
ROOT = Path(ds.__file__).resolve().parents[1]

#: An ``-X importtime`` line of a module of these packages (its name after the last ``|``).
HEAVY = re.compile(r"^import time:.*\|\s*(torch|numpy)(\.\S+)?$", re.MULTILINE)

#: Arguments, the exit status they give, and a phrase of what they print.
LINES = {
    "--help": (["--help"], 0, "usage: python -m detsamplers"),
    "index --help": (["index", "--help"], 0, "write the files into this folder"),
    "inspect --help": (["inspect", "--help"], 0, "usage: python -m detsamplers inspect"),
    "bench --help": (["bench", "--help"], 0, "usage: python -m detsamplers bench"),
    "tokens build --help": (["tokens", "build", "--help"], 0, "usage: python -m detsamplers"),
    "no command": ([], 2, "the following arguments are required: command"),
    "an unknown command": (["shuffle"], 2, "invalid choice: 'shuffle'"),
    "index without urls": (["index"], 2, "the following arguments are required: urls"),
    "a demo rank count that is not a number": (["demo", "--ranks", "two"], 2, "invalid int"),
}


def run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "detsamplers", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )


@pytest.mark.subprocess
@pytest.mark.parametrize("case", list(LINES), ids=list(LINES))
def test_help_and_argument_errors_import_neither_torch_nor_numpy(case: str) -> None:
    args, status, phrase = LINES[case]
    done = run_cli(args)
    assert done.returncode == status, done.stderr[-2000:]
    assert phrase in done.stdout + done.stderr
    assert "| detsamplers" in done.stderr  # the timing is there: the check below can fail
    assert HEAVY.findall(done.stderr) == []


@pytest.mark.subprocess
def test_the_first_use_of_a_stage_imports_torch_as_the_check_above_would_see() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import detsamplers as d; d.RepeatSampler"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("torch", "") in HEAVY.findall(done.stderr)


def test_the_public_names_resolve_on_first_use_to_their_modules_objects() -> None:
    from detsamplers._repeat import RepeatSampler
    from detsamplers._shard import DistributedSampler

    assert ds.RepeatSampler is RepeatSampler
    assert getattr(ds, "DistributedSampler") is DistributedSampler  # noqa: B009
    assert set(ds.__all__) <= set(dir(ds))
    with pytest.raises(AttributeError, match=r"module 'detsamplers' has no attribute 'Shuffle'"):
        ds.Shuffle  # type: ignore[attr-defined]  # noqa: B018
