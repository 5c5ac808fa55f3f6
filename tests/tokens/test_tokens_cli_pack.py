"""`tokens stats --seq-len --window`: the padding `mode="pack"` would give, before a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detsamplers._cli_tokens import pack_stats
from detsamplers.tokens import TokenCorpus, TokenSequences
from tests.tokens.test_tokens_cli import ROOT, run


def write(path: Path, lengths: list[int]) -> TokenCorpus:
    """Documents of ``lengths`` tokens (ids 1.., each ending with 0) as a uint16 ``.bin``."""
    docs = [np.append(np.arange(1, n, dtype=np.uint16) % 60 + 1, 0) for n in lengths]
    np.concatenate(docs).astype(np.uint16).tofile(path)
    return TokenCorpus(path, dtype="uint16", eod_id=0, progress=False)


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 70), min_size=1, max_size=60),
    seq_len=st.integers(1, 40),
    window=st.integers(1, 30),
    long_documents=st.sampled_from(["split", "truncate"]),
)
def test_the_stats_rows_are_what_token_sequences_in_pack_mode_report_and_add_up(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    seq_len: int,
    window: int,
    long_documents: str,
) -> None:
    corpus = write(tmp_path_factory.mktemp("c") / "t.bin", lengths)
    reported: list[int] = []
    [row] = pack_stats(corpus, [seq_len], [window], long_documents, 3, reported.append)
    sequences = TokenSequences(
        corpus, seq_len, mode="pack", seed=3, window=window, long_documents=long_documents
    )
    assert row == {
        "seq_len": seq_len, "window": window, "long_documents": long_documents, "seed": 3,
        **sequences.stats(),
    }  # fmt: skip
    assert sum(reported) == len(lengths)  # the progress counts every document once
    capacity = seq_len + 1
    kept = [min(n, capacity) for n in lengths] if long_documents == "truncate" else lengths
    assert row["truncated_tokens"] == sum(lengths) - sum(kept)
    assert row["padding_tokens"] == row["sequences"] * capacity - sum(kept)
    # Best-fit never uses more bins than one per piece, nor fewer than the tokens need.
    pieces = sum(-(-n // capacity) for n in lengths) if long_documents == "split" else len(lengths)
    assert -(-sum(kept) // capacity) <= row["sequences"] <= pieces


def test_stats_prints_padding_for_each_seq_len_and_window_and_json_holds_the_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.bin"
    rng = np.random.default_rng(0)
    corpus = write(path, rng.integers(2, 300, size=500).tolist())
    base = ["tokens", "stats", str(path), "--dtype", "uint16", "--eod-id", "0"]
    code, out, err = run([*base, "--seq-len", "128", "512", "--window", "10", "100"], capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert "pack       long_documents=split, seed 0" in lines
    table = lines[lines.index("pack       long_documents=split, seed 0") + 2 :]
    expected = [
        TokenSequences(corpus, seq_len, mode="pack", window=window).stats()
        for seq_len in (128, 512)
        for window in (10, 100)
    ]
    assert len(table) == 4
    for line, stats, (seq_len, window) in zip(
        table, expected, [(128, 10), (128, 100), (512, 10), (512, 100)], strict=True
    ):
        padding = f"{100 * stats['padding_fraction']:.3f}%"
        assert line.split() == [str(seq_len), str(window), str(stats["sequences"]), padding, "0"]
    # A larger window pads less here: the sorting has more pieces to choose from.
    assert expected[1]["padding_tokens"] < expected[0]["padding_tokens"]
    code, out, _ = run([*base, "--seq-len", "64", "--long-documents", "truncate", "--json"], capsys)
    [row] = json.loads(out)["pack"]
    assert code == 0 and row["window"] == 1000 and row["truncated_tokens"] > 0
    truncated = TokenSequences(corpus, 64, mode="pack", long_documents="truncate").stats()
    assert row["truncated_tokens"] == truncated["truncated_tokens"]
    code, out, _ = run(base, capsys)  # no --seq-len: no packing, as before
    assert code == 0 and "pack" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seq-len", "0"], "--seq-len should be positive integers, but got 0"),
        (["--seq-len", "8", "--window", "-3"], "--window should be positive integers, but got -3"),
        (["--seq-len", "8", "--long-documents", "cut"], "invalid choice: 'cut'"),
    ],
)
def test_bad_packing_options_are_usage_errors_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    path = tmp_path / "t.bin"
    write(path, [3, 4, 5])
    code, out, err = run(
        ["tokens", "stats", str(path), "--dtype", "uint16", "--eod-id", "0", *args], capsys
    )
    assert code == 2 and out == "" and message in err


@pytest.mark.subprocess
def test_the_command_shows_a_progress_bar_of_documents_packed_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.bin"
    write(path, [5, 9, 30, 2] * 5000)
    args = ["tokens", "stats", str(path), "--dtype", "uint16", "--eod-id", "0", "--seq-len", "32",
            "--window", "50"]  # fmt: skip
    code, out, err = run([*args, "--progress"], capsys)  # asked for: in this process
    assert code == 0, err
    assert "pack: 100%" in err and "20.0k/20.0k" in err
    assert "pack: " not in out and " 32 " in out
    # Not asked for, through the command a user types, its stderr a pipe: no bar.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "detsamplers", *args]
    quiet = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0 and "pack:" not in quiet.stderr  # off a terminal: no bar
    assert " 32 " in quiet.stdout
