"""Hostile, damaged and newer checkpoints, and the trial's bad inputs: errors, never code.

NOTE [ checkpoint files are data ] and NOTE [ checkpoint metadata ]: every crafted pickle
here would create a marker file if it were unpickled in full; each test asserts that the
marker never appears and that the error names the file.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from demo_trial import DemoTrial
from hypothesis import given
from hypothesis import strategies as st
from trial_helpers import HPARAMS, identical, run, weights

from detsamplers.trial import (
    Batch,
    Callback,
    Trainer,
    find_latest_checkpoint,
    init,
    load_trial_from_checkpoint_path,
)
from detsamplers.trial._metadata import (
    MAX_METADATA_BYTES,
    IncompleteCheckpointError,
    read_checkpoint_metadata,
)


class Payload:
    """Pickles as ``open(marker, "w")``: a full unpickler would create the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.marker, "w"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of 6 batches with checkpoints at 3, 4 (a validation) and 6 (tests copy it)."""
    folder = tmp_path_factory.mktemp("saved")
    run(str(folder), 6)
    return folder


@pytest.fixture
def copy(saved: Path, tmp_path: Path) -> Path:
    shutil.copytree(saved, tmp_path / "ckpt")
    return tmp_path / "ckpt"


def _fit(folder: Path, latest: Any, batches: int = 9, **kwargs: Any) -> DemoTrial:
    with init(hparams=HPARAMS, seed=1) as context:
        trial = DemoTrial(context)
        Trainer(trial, context).fit(
            Batch(batches), checkpoint_dir=str(folder), latest_checkpoint=latest, **kwargs
        )
    return trial


def _edit(folder: Path, **fields: Any) -> None:
    path = folder / "metadata.json"
    metadata = json.loads(path.read_text())
    metadata.update(fields)
    path.write_text(json.dumps(metadata))


@pytest.mark.parametrize("name", ["state-dict.pth", "rank-0.pth"])
def test_a_crafted_checkpoint_file_never_runs_its_payload_on_an_auto_resume(
    copy: Path, tmp_path: Path, name: str
) -> None:
    marker = tmp_path / "marker"
    torch.save({"models_state_dict": [Payload(marker)]}, copy / "batch-000006" / name)
    with pytest.raises(ValueError, match=rf"cannot load \S+/batch-000006/{name}: it needs io.open, "
                       r".*add_safe_globals"):  # fmt: skip
        _fit(copy, "auto")
    assert not marker.exists()


def test_load_trial_from_checkpoint_path_never_runs_a_crafted_payload(
    copy: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    torch.save(Payload(marker), copy / "batch-000006" / "state-dict.pth")
    with pytest.raises(ValueError, match=r"batch-000006/state-dict.pth: it needs io.open"):
        load_trial_from_checkpoint_path(str(copy / "batch-000006"), DemoTrial)
    assert not marker.exists()


@pytest.mark.parametrize("cut", [0, 100, -10])
def test_a_truncated_checkpoint_file_is_an_error_that_names_it(copy: Path, cut: int) -> None:
    path = copy / "batch-000006" / "state-dict.pth"
    data = path.read_bytes()
    path.write_bytes(data[:cut])
    with pytest.raises(ValueError, match=r"cannot load \S+state-dict.pth: it is not a complete "
                       r"torch file .*Resume from another checkpoint folder"):  # fmt: skip
        _fit(copy, str(copy / "batch-000006"))


def test_a_rank_file_of_another_shape_is_an_error_that_names_it(copy: Path) -> None:
    torch.save([1, 2, 3], copy / "batch-000006" / "rank-0.pth")
    with pytest.raises(ValueError, match=r"rank-0.pth: it should hold a dict with rng and loader"):
        _fit(copy, "auto")


def test_a_state_file_of_another_shape_is_an_error_that_names_it(copy: Path) -> None:
    path = copy / "batch-000006" / "state-dict.pth"
    state = torch.load(path, weights_only=True)
    torch.save({**state, "models_state_dict": [[1, 2]]}, path)
    with pytest.raises(ValueError, match=r"state-dict.pth: it should hold a dict with lists of"):
        _fit(copy, "auto")


def test_a_newer_format_is_reported_not_skipped_for_an_older_checkpoint(copy: Path) -> None:
    _edit(copy / "batch-000006", format_version=2)
    message = r"batch-000006/metadata.json: the checkpoint was written by a newer detsamplers"
    with pytest.raises(ValueError, match=message + r" \(checkpoint format 2; .* up to 1\)"):
        find_latest_checkpoint(str(copy))
    with pytest.raises(ValueError, match=message):
        _fit(copy, "auto")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"batches_trained": "6"}, r"batches_trained should be an int >= 0, but got "),
        ({"world_size": True}, r"world_size should be an int >= 1, but got world_size=True"),
        ({"global_batch_size": 0}, r"global_batch_size should be an int >= 1"),
        ({"seed": 1.5}, r"seed should be an int, but got seed=1.5"),
        ({"format_version": 0}, r"format_version should be an int >= 1"),
        ({"files": ["../../etc/passwd"]}, r"files should list \['rank-0.pth', 'state-dict.pth'\]"),
        ({"world_size": 2}, r"global_batch_size should be a multiple of world_size|files should"),
        ({"samples_trained": 7, "records_consumed": 7}, r"samples_trained should be 48 after 6"),
        ({"records_consumed": 40}, r"records_consumed should equal samples_trained"),
        (
            {
                "batches_trained": 5,
                "batch_segments": [[0, 0, 8]],
                "samples_trained": 40,
                "records_consumed": 40,
            },
            r"batches_trained should be 6 in a folder named batch-000006",
        ),
        ({"batch_segments": [[0, 0, 8], [0, 8, 8]]}, r"batch_segments should each start where"),
        ({"hparams": [1]}, r"hparams should be dict or null"),
        ({"pending_gradients": 1}, r"pending_gradients should be bool"),
        (
            {"dataset_length": 41},
            r"dataset_length should be 40, the last length of dataset_growth=\[\[0, 40\]\], "
            r"but got dataset_length=41; the file was edited",
        ),
        ({"dataset_growth": [[8, 40]]}, r"dataset_growth should be a non-empty list of \[sample"),
        ({"dataset_growth": [[0, "40"]]}, r"dataset_growth should be a non-empty list of \[sample"),
    ],
)
def test_invalid_metadata_is_an_error_that_names_the_file_and_the_field(
    copy: Path, fields: dict[str, Any], message: str
) -> None:
    _edit(copy / "batch-000006", **fields)
    with pytest.raises(ValueError, match=r"cannot resume from \S+batch-000006/metadata.json: "):
        find_latest_checkpoint(str(copy))
    with pytest.raises(ValueError, match=message):
        read_checkpoint_metadata(str(copy / "batch-000006"))


def test_cut_short_oversized_or_special_metadata_is_said_never_silently_skipped(
    copy: Path,
) -> None:
    path = copy / "batch-000006" / "metadata.json"
    path.write_text('{"format_version": 1, "batches')  # cut short: passed over, said
    with pytest.warns(UserWarning, match=r"passing over \S+batch-000006: .*not valid JSON"):
        assert find_latest_checkpoint(str(copy)) == str(copy / "batch-000004")
    with pytest.raises(ValueError, match=r"metadata.json: it is not valid JSON"):
        load_trial_from_checkpoint_path(str(copy / "batch-000006"), DemoTrial)
    path.write_bytes(b" " * (MAX_METADATA_BYTES + 1))
    with pytest.raises(ValueError, match=rf"should be at most {MAX_METADATA_BYTES} bytes"):
        find_latest_checkpoint(str(copy))
    path.unlink()
    os.mkfifo(path)  # a FIFO would block a reader forever
    with pytest.raises(ValueError, match=r"metadata.json: it should be a regular file"):
        find_latest_checkpoint(str(copy))


def test_a_folder_whose_files_are_gone_is_passed_over_with_a_warning(copy: Path) -> None:
    (copy / "batch-000006" / "rank-0.pth").unlink()  # as a crash during retention leaves it
    with pytest.warns(
        UserWarning,
        match=r"passing over \S+batch-000006: .*rank-0.pth, listed .*, is gone",
    ):
        assert find_latest_checkpoint(str(copy)) == str(copy / "batch-000004")
    with pytest.raises(IncompleteCheckpointError, match="latest_checkpoint should be a complete"):
        _fit(copy, str(copy / "batch-000006"))


@given(length=st.integers(0, 10**6) | st.none())
def test_a_dataset_length_edited_away_from_the_recorded_growth_is_refused_naming_it(
    saved: Path, length: int | None
) -> None:
    target = Path(f"{saved}-length") / "batch-000006"
    shutil.rmtree(target.parent, ignore_errors=True)
    shutil.copytree(saved / "batch-000006", target)
    _edit(target, dataset_length=length)
    if length == 40:  # the length recorded by the run
        assert read_checkpoint_metadata(str(target))["dataset_length"] == 40
        return
    with pytest.raises(ValueError, match=r"batch-000006/metadata.json: dataset_length should be "):
        read_checkpoint_metadata(str(target))


def test_an_auto_resume_refuses_a_checkpoint_whose_dataset_length_was_edited(copy: Path) -> None:
    _edit(copy / "batch-000006", dataset_length=1000)  # was accepted: the growth decided
    with pytest.raises(ValueError, match=r"batch-000006/metadata.json: dataset_length should be "):
        _fit(copy, "auto")
    with pytest.raises(ValueError, match=r"but got dataset_length=1000"):
        _fit(copy, str(copy / "batch-000006"))


@given(
    field=st.sampled_from(["batches_trained", "global_batch_size", "world_size", "seed", "files",
                           "samples_trained", "batch_segments", "format_version", "hparams"]),
    value=st.recursive(
        st.none() | st.booleans() | st.integers(-3, 100) | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=8,
    ),
)  # fmt: skip
def test_any_value_in_any_field_is_accepted_as_valid_or_refused_with_a_value_error(
    saved: Path, field: str, value: Any
) -> None:
    folder = saved / "batch-000006"
    original = json.loads((folder / "metadata.json").read_text())
    changed = {**original, field: value}
    target = Path(f"{saved}-h") / "batch-000006"
    shutil.rmtree(target.parent, ignore_errors=True)
    shutil.copytree(folder, target)
    (target / "metadata.json").write_text(json.dumps(changed))
    try:
        metadata = read_checkpoint_metadata(str(target))
    except ValueError as error:
        assert "metadata.json" in str(error) or "complete checkpoint folder" in str(error)
    else:  # accepted: then it holds what a resume needs, with its types
        assert json.dumps(metadata[field]) == json.dumps(value)
        assert isinstance(metadata["batches_trained"], int)
        assert metadata["files"] == ["rank-0.pth", "state-dict.pth"]


class Tally:
    """A user's own class in a callback's state."""

    def __init__(self, count: int) -> None:
        self.count = count


class Counting(Callback):
    def __init__(self) -> None:
        self.tally = Tally(0)

    def on_training_workload_end(self, avg_metrics: Any, batch_metrics: Any) -> None:
        self.tally = Tally(self.tally.count + 1)

    def state_dict(self) -> dict[str, Any]:
        return {"tally": self.tally}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tally = state["tally"]


class TallyTrial(DemoTrial):
    def build_callbacks(self) -> dict[str, Callback]:
        return {"counting": Counting()}


def test_a_users_own_class_in_the_state_needs_the_documented_opt_in(tmp_path: Path) -> None:
    run(str(tmp_path), 6, trial_class=TallyTrial)
    path = str(tmp_path / "batch-000006")
    name = f"{__name__}.Tally"
    with pytest.raises(ValueError, match=rf"state-dict.pth: it needs {name}, "):
        load_trial_from_checkpoint_path(path, TallyTrial)
    with torch.serialization.safe_globals([Tally]):  # the way the error names
        allowed = load_trial_from_checkpoint_path(path, TallyTrial)
    trusted = load_trial_from_checkpoint_path(path, TallyTrial, weights_only=False)
    for trial in (allowed, trusted):
        callbacks = trial.build_callbacks()
        assert isinstance(callbacks["counting"], Counting)
    assert identical(weights(allowed), weights(trusted))
    with pytest.raises(ValueError, match=rf"it needs {name}"):
        run(str(tmp_path), 9, trial_class=TallyTrial, resume=True)
    with torch.serialization.safe_globals([Tally]):
        run(str(tmp_path), 9, trial_class=TallyTrial, resume=True)
    assert find_latest_checkpoint(str(tmp_path)) == str(tmp_path / "batch-000009")


def test_weights_only_should_be_a_bool(copy: Path) -> None:
    with pytest.raises(TypeError, match="weights_only should be a bool"):
        load_trial_from_checkpoint_path(str(copy / "batch-000006"), DemoTrial, weights_only="no")
    with pytest.raises(TypeError, match="weights_only should be a bool"):
        _fit(copy, "auto", weights_only=0)


def test_latest_checkpoint_of_a_wrong_type_names_the_parameter_the_value_and_the_fix(
    tmp_path: Path,
) -> None:
    with pytest.raises(TypeError, match=r"latest_checkpoint should be a checkpoint folder path "
                       r"\(str or os.PathLike\), \"auto\" or None, but got latest_checkpoint=5 of "
                       r"type int; pass find_latest_checkpoint\(checkpoint_dir\)"):  # fmt: skip
        _fit(tmp_path, 5)
    assert not any(tmp_path.glob("batch-*"))


def test_find_latest_checkpoint_of_none_names_the_parameter_the_value_and_the_fix() -> None:
    with pytest.raises(TypeError, match=r"checkpoint_dir should be a folder path \(str or "
                       r"os.PathLike\), but got checkpoint_dir=None of type NoneType; pass the "
                       r"checkpoint_dir given to fit"):  # fmt: skip
        find_latest_checkpoint(None)  # type: ignore[arg-type]
    assert find_latest_checkpoint(Path("no-such-folder")) is None
    with pytest.raises(TypeError, match=r"path should be a folder path \(str or os.PathLike\), "
                       r"but got path=None of type NoneType; pass a folder"):  # fmt: skip
        load_trial_from_checkpoint_path(None, DemoTrial)  # type: ignore[arg-type]


def _drop_root_overrides() -> None:  # pragma: no cover - runs in the child before exec
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH: root obeys modes
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.mark.subprocess
def test_a_read_only_checkpoint_dir_is_found_before_training_starts(tmp_path: Path) -> None:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    records = tmp_path / "records"
    script = textwrap.dedent(f"""
        from detsamplers.trial import Batch, Trainer, init
        from demo_trial import DemoTrial
        hparams = {{**{HPARAMS!r}, "record_dir": {str(records)!r}}}
        with init(hparams=hparams) as context:
            Trainer(DemoTrial(context), context).fit(Batch(4), checkpoint_dir={str(folder)!r})
    """)
    records.mkdir()
    # As root, drop the capabilities that let root write anywhere (as the CI user could not).
    preexec = _drop_root_overrides if os.geteuid() == 0 else None
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=preexec,  # no threads are started before it runs
        check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    message = (
        f"ValueError: checkpoint_dir should be a folder every rank can write, but rank 0 cannot "
        f"write in '{folder}' (PermissionError: Permission denied); pass a writable "
        "checkpoint_dir"
    )
    assert message in done.stderr, done.stderr[-3000:]
    assert not list(records.iterdir())  # not one batch trained
