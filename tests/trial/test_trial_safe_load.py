"""A checkpoint's torch files are read as data (detsamplers/trial/_safe_load.py).

NOTE [ checkpoint files are data ]: a file that would run code is refused and the code does
not run; a damaged, truncated, foreign or irregular file is a ValueError naming it.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers.trial._safe_load import load_checkpoint_file


class Payload:
    """A class whose unpickling writes a file: proof that a full unpickler ran the file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))  # unpickling creates the marker file


def test_a_file_that_would_run_code_is_refused_naming_the_file_and_the_global(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "rank-0.pth"
    torch.save({"step": Payload(str(marker))}, path)
    with pytest.raises(
        ValueError,
        match=rf"^cannot load {re.escape(str(path))}: it needs [\w.]*open, which "
        r"torch.load\(weights_only=True\) does not allow, "
        r".*add_safe_globals\(\[TheClass\]\) before loading; .*"
        r"pass weights_only=False, which runs any code the file holds$",
    ):
        load_checkpoint_file(str(path))
    assert not marker.exists()
    load_checkpoint_file(str(path), weights_only=False)  # the trusted way, said in the message
    assert marker.exists()


def test_a_missing_file_or_one_that_is_not_regular_is_named_without_being_opened(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match=r"^cannot load .*nope.pth: No such file or directory$"):
        load_checkpoint_file(str(tmp_path / "nope.pth"))
    fifo = tmp_path / "fifo.pth"
    os.mkfifo(fifo)  # opening it would block until a writer came
    with pytest.raises(ValueError, match=r"fifo.pth: it should be a regular file, but it is not"):
        load_checkpoint_file(str(fifo))
    with pytest.raises(ValueError, match=r"it should be a regular file"):
        load_checkpoint_file(str(tmp_path))


GOOD = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "step": 7, "name": "run"}


@settings(max_examples=40, deadline=None)
@given(cut=st.floats(0.0, 1.0, exclude_max=True), flip=st.integers(0, 2**16))
def test_a_damaged_file_loads_exactly_or_is_a_value_error_naming_it(
    tmp_path_factory: pytest.TempPathFactory, cut: float, flip: int
) -> None:
    path = tmp_path_factory.mktemp("ckpt") / "state-dict.pth"
    torch.save(GOOD, path)
    data = bytearray(path.read_bytes())
    if flip % 2:  # a flipped byte somewhere
        data[flip % len(data)] ^= 0xFF
    else:  # a file cut short by a crash
        data = data[: int(cut * len(data))]
    path.write_bytes(bytes(data))
    try:
        loaded = load_checkpoint_file(str(path))
    except ValueError as error:
        assert str(error).startswith(f"cannot load {path}: "), error
        return
    # A flip the zip's stored bytes tolerate (padding, a name field) may still load.
    assert set(loaded) == set(GOOD)


@pytest.mark.parametrize(
    "content",
    [pickle.dumps({"a": 1}), b'{"step": 3}', b""],
    ids=["a plain pickle", "json", "empty"],
)
def test_a_foreign_file_is_named_as_damaged_not_as_a_class_to_allow(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "rank-1.pth"
    path.write_bytes(content)
    with pytest.raises(ValueError) as raised:
        load_checkpoint_file(str(path))
    assert re.match(
        r"cannot load \S+rank-1.pth: it is not a complete torch file \(\w+: .*\); it was "
        r"truncated by a crash, damaged, or not written by detsamplers. Resume from another "
        r"checkpoint folder",
        str(raised.value),
    ), raised.value
    assert "add_safe_globals" not in str(raised.value)
