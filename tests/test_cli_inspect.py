"""``python -m detsamplers inspect``: a checkpoint's contents, --against, and bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from detsamplers.__main__ import main
from detsamplers.loader import DataLoader
from detsamplers.trial import Batch, Trainer, Trial, TrialContext, init

AGAINST = """
from detsamplers.loader import DataLoader


def same(rank, world_size, num_workers):
    return DataLoader(range(24), batch_size=4, shuffle=True, seed=3, num_workers=num_workers)


def half_batch(rank, world_size, num_workers):
    return DataLoader(range(24), batch_size=2, shuffle=True, seed=3, num_workers=num_workers)


def other_seed(rank, world_size, num_workers):
    return DataLoader(range(24), batch_size=4, shuffle=True, seed=4, num_workers=num_workers)
"""


class Fit(Trial):
    def __init__(self, context: TrialContext) -> None:
        super().__init__(context)
        self.w = context.wrap_model(torch.nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.w.parameters(), 0.1))

    def build_training_data_loader(self) -> Any:
        return DataLoader(range(24), batch_size=4, shuffle=True, seed=3)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        loss = (self.w(batch.float().view(-1, 1) / 24) - 1).pow(2).mean()  # inputs in [0, 1)
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return loss


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("checkpoints")
    with init(hparams={"global_batch_size": 4}, seed=3) as context:
        Trainer(Fit(context), context).fit(Batch(9), checkpoint_dir=str(folder))
    (folder / "against.py").write_text(AGAINST)
    return folder


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["inspect", *argv])
    except SystemExit as exit:
        code = int(exit.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_inspect_reports_position_epoch_history_chain_and_the_contract(
    checkpoints: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, str(checkpoints))
    assert code == 0
    assert f"checkpoint {checkpoints / 'batch-000009'}" in out  # the newest complete one
    assert "  batches trained     9\n" in out
    assert "  samples trained     36\n" in out
    assert "  epoch               1 (started at sample 24)\n" in out
    assert "  batch-size history  4 from sample 0 (batch 0)\n" in out
    assert "shuffle(seed=3, permutation=feistel) > repeat > shard(world_size=1, rank=0)" in out
    assert "may change: a schedule's future: segments starting after sample 36" in out
    assert "must match: seed 3, data seed 3, dataset length 24" in out


def test_inspect_prints_json_for_ci(checkpoints: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(checkpoints / "batch-000009"), "--json")
    report = json.loads(out)
    assert code == 0
    assert report["checkpoint"]["samples_trained"] == 36
    assert report["ranks"]["0"]["samples"] == 36
    assert report["ranks"]["0"]["chain"][1] == {
        "stage": "shuffle",
        "seed": 3,
        "permutation": "feistel",
    }


def test_inspect_reads_a_saved_state_file(
    checkpoints: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = torch.load(checkpoints / "batch-000009" / "rank-0.pth", weights_only=True)["loader"]
    (tmp_path / "state.json").write_text(json.dumps(state))
    code, out, _ = run(capsys, str(tmp_path / "state.json"))
    assert code == 0
    assert out.startswith(f"state {tmp_path / 'state.json'}\n")
    assert "  position            9 batches on this rank\n" in out


@pytest.mark.parametrize(
    ("function", "world", "code", "lines"),
    [
        ("same", "1", 0, ["would resume exactly at sample 36"]),
        ("half_batch", "2", 0, ["batch.batch_size: 4 saved, 2 here (may change)",
                                "shard.world_size: 1 saved, 2 here (may change)",
                                "would resume exactly at sample 36"]),
        ("other_seed", "1", 1, ["shuffle.seed: 3 saved, 4 here (must match)",
                                "would not resume: ReproducibilityError: cannot load this state "
                                "into LoaderBatchSampler: it was saved by a loader with other "
                                "settings (seed is 3 in the state but 4 here)"]),
    ],
)  # fmt: skip
def test_against_says_whether_a_configuration_resumes_and_which_field_differs(
    checkpoints: Path,
    capsys: pytest.CaptureFixture[str],
    function: str,
    world: str,
    code: int,
    lines: list[str],
) -> None:
    spec = f"{checkpoints / 'against.py'}:{function}"
    got, out, _ = run(capsys, str(checkpoints), "--against", spec, "--world-size", world)
    assert got == code
    for line in lines:
        assert f"  {line}" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["CK", "--against", "nomodule_xyz:f"], "error: --against: cannot import 'nomodule_xyz'"),
        (["CK", "--against", "just_a_name"], "error: --against should be module:function"),
        (["CK", "--against", "CK/against.py:nothing"], "has no function 'nothing'"),
        (["CK", "--world-size", "0", "--against", "x:y"], "--world-size should be a positive"),
        (["CK", "--world-size", "two"], "argument --world-size: invalid int value: 'two'"),
    ],
)
def test_bad_arguments_are_usage_errors_not_tracebacks(
    checkpoints: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    argv = [a.replace("CK", str(checkpoints)) for a in argv]
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_a_hostile_or_broken_file_is_refused_by_name_without_running_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {marker}",))

    torch.save({"loader": Evil()}, tmp_path / "evil.pth")
    code, _, err = run(capsys, str(tmp_path / "evil.pth"))
    assert code == 1
    assert (
        f"inspect failed: {tmp_path / 'evil.pth'}: not a checkpoint file that loads as data" in err
    )
    assert not marker.exists()
    (tmp_path / "broken.json").write_text("{not json")
    code, _, err = run(capsys, str(tmp_path / "broken.json"))
    assert (code, "broken.json: not a readable JSON file" in err) == (1, True)
    (tmp_path / "other.json").write_text('{"a": 1}')
    code, _, err = run(capsys, str(tmp_path / "other.json"))
    assert code == 1
    assert "should be a state detsamplers saves" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run(capsys, str(tmp_path / "empty"))
    assert (code, "a folder without metadata.json" in err) == (1, True)


@pytest.mark.subprocess
def test_the_command_line_runs_as_a_module(checkpoints: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "detsamplers", "inspect", str(checkpoints)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert "samples trained     36" in result.stdout


def test_a_checkpoint_folder_whose_metadata_lies_is_refused_naming_the_file_and_field(
    checkpoints: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = sorted(checkpoints.glob("batch-*"))[-1]
    folder = tmp_path / source.name
    shutil.copytree(source, folder)
    metadata = json.loads((folder / "metadata.json").read_text())
    metadata["world_size"] = 3  # rank files 1 and 2 do not exist, 4 is not a multiple of 3
    (folder / "metadata.json").write_text(json.dumps(metadata))
    code, out, err = run(capsys, str(folder))
    assert (code, out) == (1, "")
    assert err.startswith("inspect failed: ")
    assert str(folder / "metadata.json") in err and "world_size" in err
    metadata["world_size"], metadata["format_version"] = 1, 99
    (folder / "metadata.json").write_text(json.dumps(metadata))
    code, _, err = run(capsys, str(folder))
    assert code == 1 and "newer" in err
