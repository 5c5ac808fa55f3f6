"""Hostile input to the trial API is a clear error.

A half-written or foreign checkpoint folder is named in the error; hparams that are not a dict
say what they should be.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from demo_trial import DemoTrial

from detsamplers.trial import init, load_trial_from_checkpoint_path
from tests.bad_input import alarm  # noqa: F401  # autouse: fails a case that hangs


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


def test_trial_hparams_that_are_not_a_dict_are_a_clear_error() -> None:
    with (
        pytest.raises(TypeError, match=r"hparams should be a dict of hyperparameters, but got"),
        init(hparams=[1]),  # type: ignore[arg-type]
    ):
        pass
