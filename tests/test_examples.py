"""The runnable examples live beside the package, in examples/, and the demo command finds them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
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


@pytest.mark.subprocess
def test_a_wheel_carries_the_demo_trial_and_an_install_of_it_finds_it(tmp_path: Path) -> None:
    # Build a wheel from the project's own files, unpack it as site-packages, and ask the
    # unpacked package, in a fresh interpreter away from the checkout, where its demo is.
    root = EXAMPLES.parent
    source = tmp_path / "source"
    source.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(root / name, source / name)
    shutil.copytree(
        root / "detsamplers", source / "detsamplers", ignore=shutil.ignore_patterns("*.so")
    )
    (source / "examples").mkdir()
    shutil.copy(EXAMPLES / "demo_trial.py", source / "examples" / "demo_trial.py")
    env = {**os.environ, "DETSAMPLERS_NO_KERNEL": "1", "PIP_NO_INDEX": "1"}
    env.pop("DETSAMPLERS_EXAMPLES", None)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path / "dist"), str(source)],
        check=True, env=env, timeout=300, capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("detsamplers-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(site)
    assert "detsamplers/_examples/demo_trial.py" in names
    assert not [n for n in names if n.startswith("examples/")]  # no top-level examples
    copy = site / "detsamplers" / "_examples" / "demo_trial.py"
    assert copy.read_bytes() == (EXAMPLES / "demo_trial.py").read_bytes()
    found = subprocess.run(
        [sys.executable, "-c",
         "from detsamplers.trial._demo import examples_dir; print(examples_dir())"],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(site)}, timeout=120,
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert found.stdout.strip() == str(copy.parent)
