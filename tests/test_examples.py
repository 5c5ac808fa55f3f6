"""The runnable examples live beside the package, in examples/, and the demo command finds them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from detsamplers.__main__ import main
from detsamplers.trial._demo import examples_dir, run_env

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_a_checkout_finds_the_demo_trial_in_examples_beside_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DETSAMPLERS_EXAMPLES", raising=False)
    assert Path(examples_dir()) == EXAMPLES
    assert (EXAMPLES / "demo_trial.py").is_file()
    assert not list((EXAMPLES.parent / "detsamplers").rglob("*demo_trial*"))
    assert str(EXAMPLES) in run_env()["PYTHONPATH"].split(os.pathsep)


def test_an_install_without_examples_uses_the_folder_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(EXAMPLES / "demo_trial.py", tmp_path)
    monkeypatch.setenv("DETSAMPLERS_EXAMPLES", str(tmp_path))
    assert examples_dir() == str(tmp_path)


def test_the_demo_without_its_trial_says_where_to_get_it_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DETSAMPLERS_EXAMPLES", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"examples/demo_trial.py is not in .*make demo"):
        examples_dir()
    assert main(["demo", "--workdir", str(tmp_path / "work")]) == 1
    assert "DETSAMPLERS_EXAMPLES to a folder holding a copy" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()  # nothing ran
