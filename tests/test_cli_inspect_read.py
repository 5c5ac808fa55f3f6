"""``inspect`` reads every state the library saves, and refuses hostile files by name.

Each state is saved as a user saves it (``json.dump`` and ``torch.save`` of its
``state_dict()``) and inspected through the command line (NOTE [ inspect reads data ]).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import detsamplers as ds
from detsamplers.__main__ import main
from detsamplers.loader import DataLoader, WebDataLoader, WebDatasetMix, WebDatasetSource
from detsamplers.trial import Batch, Trainer, Trial, TrialContext, init
from tests.webdataset.wds_helpers import write_shards

ROOT = Path(__file__).resolve().parent.parent


def inspect(*argv: str) -> tuple[int, str, str]:
    """Run ``inspect`` in this process: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["inspect", *argv])
        except SystemExit as exit:
            code = int(exit.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("shards")
    return str(folder / write_shards(folder, [6, 4, 5]))


def _iterated(loader: Any, batches: int) -> Any:
    it = iter(loader)
    for _ in range(batches):
        next(it)
    return loader


def _train_loader() -> Any:
    data = DataLoader(range(20), batch_size=2, shuffle=True, seed=3)
    return _iterated(data.get_data_loader(repeat=True), 3)


SAVERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "ReproducibleShuffleSampler": (
        "sampler state",
        lambda urls: _iterated(ds.ReproducibleShuffleSampler(range(10), seed=1), 4),
    ),
    "make_batch_sampler": (
        "sampler state",
        lambda urls: _iterated(ds.make_batch_sampler(range(10), "training", 1, 2, 0, 2), 3),
    ),
    "MixSampler": (
        "sampler state",
        lambda urls: _iterated(ds.MixSampler([range(4), range(6)], [1, 1], seed=0), 5),
    ),
    "get_data_loader": ("loader state", lambda urls: _train_loader()),
    "its batch_sampler": ("loader state", lambda urls: _train_loader().batch_sampler),
    "WebDatasetSource": (
        "WebDatasetSource state",
        lambda urls: _iterated(WebDatasetSource(urls, seed=3, batch_size=2), 2),
    ),
    "WebDataLoader": (
        "WebDatasetSource state",
        lambda urls: _iterated(WebDataLoader(WebDatasetSource(urls, seed=3, batch_size=2)), 2),
    ),
    "WebDatasetMix": (
        "WebDatasetMix state",
        lambda urls: _iterated(WebDatasetMix([urls, urls], [1, 2], seed=0, batch_size=2), 3),
    ),
}


@pytest.mark.parametrize("saved_as", ["json", "torch"])
@pytest.mark.parametrize("name", sorted(SAVERS))
def test_inspect_reads_the_state_each_object_saves_as_json_and_with_torch_save(
    urls: str, tmp_path: Path, name: str, saved_as: str
) -> None:
    kind, build = SAVERS[name]
    state = build(urls).state_dict()
    assert state["position"] > 0  # saved mid-stream, as a user does
    path = tmp_path / ("state.json" if saved_as == "json" else "state.pth")
    if saved_as == "json":
        path.write_text(json.dumps(state))
    else:
        torch.save(state, path)
    code, out, err = inspect(str(path))
    assert (code, err) == (0, "")
    assert f"{kind} of rank 0\n" in out
    assert f"  position            {state['position']} " in out
    code, out, _ = inspect(str(path), "--json")
    report = json.loads(out)
    assert report["ranks"]["0"]["position"] == state["position"]
    assert report["ranks"]["0"]["fingerprint"] == state["fingerprint"]


class ShardFit(Trial):
    def __init__(self, context: TrialContext) -> None:
        super().__init__(context)
        self.w = context.wrap_model(torch.nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.w.parameters(), 0.1))

    def build_training_data_loader(self) -> Any:
        urls = self.context.get_hparam("urls")
        return WebDataLoader(WebDatasetSource(urls, seed=5, batch_size=2, decode=()))

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
        loss = (self.w(torch.ones(1, 1)) - 1).pow(2).mean()
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return loss


def test_inspect_reads_a_trial_checkpoint_over_webdataset_shards_and_its_files(
    urls: str, tmp_path: Path
) -> None:
    with init(hparams={"global_batch_size": 2, "urls": urls}, seed=3) as context:
        Trainer(ShardFit(context), context).fit(Batch(4), checkpoint_dir=str(tmp_path))
    folder = tmp_path / "batch-000004"
    code, out, err = inspect(str(tmp_path))
    assert (code, err) == (0, "")
    assert f"checkpoint {folder}\n" in out
    assert "WebDatasetSource state of rank 0\n" in out
    assert "  position            8 samples of every rank (the global stream position)\n" in out
    assert "  shards              3 shards, 15 samples\n" in out
    for file in ("metadata.json", "state-dict.pth"):  # a checkpoint's file: its folder
        code, again, _ = inspect(str(folder / file))
        assert (code, again) == (0, out)
    code, out, _ = inspect(str(folder / "rank-0.pth"))
    assert code == 0 and "WebDatasetSource state of rank 0\n" in out


def _loader_state() -> dict[str, Any]:
    state: dict[str, Any] = _train_loader().state_dict()
    return state


@settings(max_examples=60, deadline=None)
@given(position=st.integers(-(2**64), 2**64))
def test_a_state_inspects_exactly_when_its_own_check_accepts_its_position(position: int) -> None:
    # the law: inspect exits 0 on a state iff load_state_dict's first check would pass
    state = {**_loader_state(), "position": position}
    with contextlib.suppress(FileExistsError):
        os.mkdir("/tmp/detsamplers-inspect-law")
    path = f"/tmp/detsamplers-inspect-law/{os.getpid()}.json"
    with open(path, "w") as f:
        json.dump(state, f)
    code, out, err = inspect(path)
    if 0 <= position <= 2**62:
        assert (code, err) == (0, "")
        assert f"  position            {position} batches on this rank\n" in out
    else:
        assert (code, out) == (1, "")
        assert "a loader state that would not load: state['position'] should be" in err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"position": -3}, "state['position'] should be a non-negative integer, but got -3"),
        ({"position": "3"}, "state['position'] should be a non-negative integer, but got '3'"),
        ({"chain": "shuffle"}, "state['chain'] should be a list of dicts"),
        ({"loader": [1]}, "state['loader'] should be the dict of loader fields"),
        ({"version": 9}, "state['version'] should be 1, but got 9"),
    ],
)
def test_a_state_that_would_not_load_is_refused_with_its_own_checks_message(
    tmp_path: Path, edit: dict[str, Any], message: str
) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({**_loader_state(), **edit}))
    code, out, err = inspect(str(path))
    assert (code, out) == (1, "")
    assert err.startswith(f"inspect failed: {path}: a ")
    assert message in err and "Traceback" not in err


def test_a_state_of_another_kind_names_what_it_is(urls: str, tmp_path: Path) -> None:
    source = WebDatasetSource(urls, seed=3, batch_size=2).state_dict()
    (tmp_path / "mixed.json").write_text(json.dumps({**source, "chain": []}))  # two kinds' keys
    code, _, err = inspect(str(tmp_path / "mixed.json"))
    assert code == 1
    assert "a WebDatasetSource state that would not load: state has keys chain that" in err
    optimizer = torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), 0.1)
    torch.save(optimizer.state_dict(), tmp_path / "optimizer.pth")
    code, _, err = inspect(str(tmp_path / "optimizer.pth"))
    assert code == 1
    assert "should be a state detsamplers saves" in err and "keys ['param_groups', 'state']" in err
    torch.save([1, 2], tmp_path / "list.pth")
    code, _, err = inspect(str(tmp_path / "list.pth"))
    assert code == 1 and "but got list" in err


def test_a_missing_path_is_a_file_error_with_status_1(tmp_path: Path) -> None:
    code, out, err = inspect(str(tmp_path / "nothing.json"))
    assert (code, out) == (1, "")
    assert err == f"inspect failed: {tmp_path / 'nothing.json'}: no such file or folder\n"


@pytest.mark.parametrize("name", ["state.json", "state.pth"])
def test_a_symlink_to_dev_zero_and_a_folder_are_refused_before_any_read(
    tmp_path: Path, name: str
) -> None:
    (tmp_path / name).symlink_to("/dev/zero")
    code, _, err = inspect(str(tmp_path / name))
    assert code == 1
    assert f"{tmp_path / name}: should be a regular file" in err and "a character device" in err
    folder = tmp_path / "folder" / name
    folder.mkdir(parents=True)
    code, _, err = inspect(str(folder))
    assert code == 1 and f"{folder}: should be a regular file" in err and "is a folder" in err


@pytest.mark.parametrize("name", ["state.json", "state.pth"])
def test_a_huge_sparse_file_is_refused_by_its_size(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    with open(path, "wb") as f:
        f.truncate(1 << 40)  # 1 TiB, no block of it written
    code, _, err = inspect(str(path))
    assert code == 1
    assert f"{path}: should have at most 16777216 bytes" in err
    assert f"but has {1 << 40}" in err


def test_json_nested_a_million_deep_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 10**6 + "]" * 10**6)
    code, _, err = inspect(str(path))
    assert code == 1 and f"{path}: its JSON nests deeper than" in err


def test_truncated_torch_files_are_refused_by_name(tmp_path: Path) -> None:
    torch.save({"rng": torch.zeros(4), "loader": _loader_state()}, tmp_path / "rank-0.pth")
    whole = (tmp_path / "rank-0.pth").read_bytes()
    for size in (len(whole) // 2, len(whole) - 30, 10, 0):
        path = tmp_path / f"cut-{size}.pth"
        path.write_bytes(whole[:size])
        code, out, err = inspect(str(path))
        assert (code, out) == (1, ""), size
        assert f"inspect failed: {path}: not a " in err and "Traceback" not in err


def test_a_pickle_that_would_run_code_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {marker}",))

    for name, obj in [("state.pth", Evil()), ("rank-0.pth", {"rng": 0, "loader": Evil()})]:
        torch.save(obj, tmp_path / name)
        code, _, err = inspect(str(tmp_path / name))
        assert code == 1 and "torch.load(weights_only=True)" in err
    assert not marker.exists()


def _cli(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "detsamplers", "inspect", *argv],
        cwd=ROOT,
        text=True,
        timeout=120,
        **kwargs,
    )


@pytest.mark.subprocess
def test_a_fifo_is_refused_at_once_instead_of_waiting_for_a_writer(tmp_path: Path) -> None:
    for name in ("state.json", "state.pth"):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        result = _cli(str(fifo), capture_output=True)  # a hang fails on the timeout
        assert result.returncode == 1
        assert f"inspect failed: {fifo}: should be a regular file" in result.stderr
        assert "a FIFO" in result.stderr


@pytest.mark.subprocess
def test_a_closed_output_pipe_ends_quietly_with_status_141(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(_loader_state()))
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line, as `| head -0`
    try:
        result = _cli(str(path), "--json", stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert result.returncode == 141
    assert result.stderr == ""
