"""``python -m detsamplers bench``: chains, a user's dataset, shards; --json; usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from detsamplers.__main__ import main
from detsamplers.loader import ShardWriter

DATASET = """
import torch


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, index):
        return torch.full((4,), float(index))


def build():
    return Squares()


def not_a_dataset():
    return 3


class Broken(Squares):
    def __getitem__(self, index):
        raise OSError(f"cannot open record {index}")


def broken():
    return Broken()
"""


def bench(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["bench", "--no-progress", *argv])
    except SystemExit as exit:
        code = int(exit.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> dict[str, dict[str, float]]:
    return {row["name"]: row for row in json.loads(out)["rows"]}


def test_a_chain_reports_indices_per_second_and_a_deep_seek(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = bench(capsys, "--len", "1000", "--world-size", "2", "--batch-size", "8",
                         "--batches", "40", "--json")  # fmt: skip
    assert code == 0
    got = rows(out)
    rate = got["chain len=1000 W=2 B=8: indices/s"]
    assert (rate["batches"], rate["samples"]) == (40, 320)
    assert rate["samples_per_s"] > 0
    seek = got["chain: first batch after a seek to sample 896"]
    assert seek["first_records"] == 8


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "user_data.py").write_text(DATASET)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.workers
def test_a_users_dataset_is_measured_beside_torchs_loader_with_workers(
    module: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = bench(capsys, "--dataset", "user_data:build", "--workers", "1",
                         "--batch-size", "10", "--batches", "5", "--json")  # fmt: skip
    assert code == 0
    got = rows(out)
    assert list(got) == [
        "detsamplers DataLoader, num_workers=0: samples/s",
        "torch DataLoader(shuffle=True), num_workers=0: samples/s",
        "detsamplers DataLoader, num_workers=1: samples/s",
        "torch DataLoader(shuffle=True), num_workers=1: samples/s",
        "detsamplers: first batch after a resume at sample 360",
        "torch: first batch after replaying its sampler to sample 360",
    ]
    for name, row in got.items():
        assert row["first_records"] == 10, name
        if "samples/s" in name:
            assert (row["batches"], row["samples"]) == (5, 50)


def test_shards_are_measured_beside_plain_webdataset_with_bytes_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ShardWriter(str(tmp_path / "s-%02d.tar"), maxcount=100, verbose=0) as sink:
        for i in range(300):
            sink.write({"__key__": f"{i:05d}", "bin": bytes(2000), "cls": b"1"})
    urls = str(tmp_path / "s-{00..02}.tar")
    code, out, _ = bench(capsys, "--shards", urls, "--workers", "0", "--batch-size", "10",
                         "--batches", "10", "--json")  # fmt: skip
    assert code == 0
    got = rows(out)
    ours = got["WebDatasetSource, num_workers=0: samples/s"]
    plain = got["webdataset.WebDataset, num_workers=0: samples/s"]
    assert ours["samples"] == plain["samples"] == 100
    # 11 batches of 10 samples of 2,000 bytes at least were read (tar headers besides).
    assert ours["bytes_read"] >= 110 * 2000
    assert plain["bytes_read"] >= 110 * 2000
    resumed = got["WebDatasetSource: first batch after a resume at sample 270"]
    restarted = got["webdataset: first batch after a restart at sample 270"]
    assert resumed["first_records"] == restarted["first_records"] == 10
    # Ours seeks to sample 270; plain webdataset reads shard 2 from its start (70 skipped),
    # not the three shards a replay would read.
    replayed = sum(path.stat().st_size for path in tmp_path.glob("s-*.tar"))
    assert 10 * 2000 <= resumed["bytes_read"] < restarted["bytes_read"] < replayed


@pytest.mark.subprocess
def test_the_terminal_table_and_the_command_line(module: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "detsamplers", "bench", "--len", "500", "--batches", "10"],
        capture_output=True, text=True, timeout=180, cwd=module,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["measurement", "samples/s", "first", "batch", "bytes", "read"]
    assert lines[1].startswith("chain len=500 W=1 B=32: indices/s")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "bench needs --len N, --dataset module:factory or --shards URL..."),
        (["--len", "0"], "--len should be at least 1, but got 0"),
        (["--len", "10", "--world-size", "0"], "--world-size should be at least 1, but got 0"),
        (["--len", "10", "--workers", "-1"], "--workers should be at least 0, but got -1"),
        (["--len", "10", "--resume-at", "1.5"], "--resume-at should be a fraction in [0, 1)"),
        (["--len", "ten"], "argument --len: invalid int value: 'ten'"),
        (
            ["--len", "10", "--dataset", "a:b"],
            "argument --dataset: not allowed with argument --len",
        ),
        (["--dataset", "nomodule_xyz:f"], "--dataset: cannot import 'nomodule_xyz'"),
        (["--dataset", "user_data"], "--dataset should be module:factory, but got 'user_data'"),
        (["--dataset", "user_data:nothing"], "--dataset: user_data has no factory 'nothing'"),
        (["--dataset", "user_data:not_a_dataset"], "--dataset should build a map-style dataset"),
        (["--shards", "/no/such/shard-{0..1}.tar"], "/no/such/shard-0.tar"),
        (
            ["--dataset", "user_data:broken", "--workers", "0"],
            "bench failed in 'detsamplers DataLoader, num_workers=0: samples/s': OSError: cannot "
            "open record",
        ),
    ],
)
def test_bad_arguments_are_usage_errors_not_tracebacks(
    module: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = bench(capsys, *argv)
    assert code in (1, 2)
    assert message in err
    assert "Traceback" not in err


def test_plain_webdatasets_restart_gives_the_batch_its_uninterrupted_run_gives(
    tmp_path: Path,
) -> None:
    wds = pytest.importorskip("webdataset")

    from detsamplers._cli_bench import _plain_resumed, _source

    with ShardWriter(str(tmp_path / "s-%02d.tar"), maxcount=7, verbose=0) as sink:
        for i in range(30):  # shards of 7, 7, 7, 7 and 2 samples
            sink.write({"__key__": f"{i:05d}", "cls": str(i).encode()})
    urls = str(tmp_path / "s-{00..04}.tar")
    shards = _source(urls, 0, 4, repeat=False).shards
    for deep in (0, 4, 7, 12, 28):
        batch = next(_plain_resumed(wds, shards, 4, deep))
        assert batch["__key__"] == [f"{i:05d}" for i in range(deep, min(deep + 4, 30))]
