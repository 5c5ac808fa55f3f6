"""Determined's mnist_pytorch tutorial trial runs on detsamplers with only its imports changed.

examples/determined_mnist/train.py is the tutorial's script with our two import lines;
tests/integration/determined_tutorial/train.py is the same script with Determined's. Under
torchrun the first trains 6 batches on 2 ranks, then, relaunched in the same folder, resumes
from its newest checkpoint (``det.get_cluster_info().latest_checkpoint``) on 1 rank to batch
9 and on 2 ranks to batch 12: 12 global batches of 64 over 256 records, so every record is
trained exactly 3 times, and each launch validates.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.frameworks.framework_helpers import TIMEOUT, free_port
from tests.helpers import run_agent

ROOT = Path(__file__).resolve().parents[2]
OURS = ROOT / "examples" / "determined_mnist"
THEIRS = Path(__file__).resolve().parent / "determined_tutorial" / "train.py"
IMPORTS = {
    "import determined as det": "import detsamplers.trial as det",
    "from determined import pytorch": "from detsamplers import trial as pytorch",
}


def test_the_script_differs_from_determineds_only_in_its_import_lines() -> None:
    ours = (OURS / "train.py").read_text().splitlines()
    theirs = THEIRS.read_text().splitlines()
    changed = [
        line
        for line in difflib.unified_diff(theirs, ours, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed == [f"-{a}" for a in IMPORTS] + [f"+{b}" for b in IMPORTS.values()]


def test_determineds_version_is_a_determined_pytorch_trial() -> None:
    det_pytorch = pytest.importorskip("determined.pytorch")
    sys.path.insert(0, str(OURS))  # its data and model modules
    try:
        spec = importlib.util.spec_from_file_location("det_tutorial_train", THEIRS)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(OURS))
    assert issubclass(module.MNistTrial, det_pytorch.PyTorchTrial)


def _launch(folder: Path, ranks: int, batches: int) -> str:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={ranks}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        "train.py",
        "--batches",
        str(batches),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RECORD_FILE": str(folder / "records")}
    env.pop("DETSAMPLERS_EXPERIMENT_CONFIG", None)
    log = folder / f"torchrun-{ranks}-{len(list(folder.glob('torchrun-*.log')))}.log"
    code = run_agent(command, log, env, TIMEOUT, cwd=folder)  # a hang fails, with stacks
    output = log.read_text()
    assert code == 0, output[-4000:]
    return output


def _trained(folder: Path) -> Counter[int]:
    counts: Counter[int] = Counter()
    for path in folder.glob("records-rank*"):
        counts.update(int(line) for line in path.read_text().split())
    return counts


@pytest.mark.distributed
@pytest.mark.frameworks
def test_the_tutorial_trains_validates_and_resumes_when_relaunched_on_1_and_2_ranks(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "mnist"
    shutil.copytree(OURS, folder, ignore=shutil.ignore_patterns("__pycache__", "checkpoints"))
    seen = []
    for ranks, batches in ((2, 6), (1, 9), (2, 12)):
        output = _launch(folder, ranks, batches)
        assert f"[batch {batches}] validation:" in output
        seen.append(sum(_trained(folder).values()))
        assert (folder / "checkpoints" / f"batch-{batches:06d}").is_dir()
    assert seen == [6 * 64, 9 * 64, 12 * 64]  # each relaunch trained only what was left
    assert _trained(folder) == dict.fromkeys(range(256), 3)
