"""``python -m detsamplers tokens build`` and ``tokens stats``, in-process and as the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from detsamplers.__main__ import main
from detsamplers.tokens import TokenCorpus
from detsamplers.tokens._writer import read_manifest
from tests.tokens.cli_tokenizers import VOCAB, encode

ROOT = Path(__file__).resolve().parents[2]
TOKENIZER = "tests.tokens.cli_tokenizers:encode"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """The CLI's exit status, stdout and stderr, run in this process."""
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's usage errors
        code = int(exit.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def build(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    out = ["--output", str(tmp_path / "out")] if "--output" not in args else []
    return run(["tokens", "build", *args, *out, "--no-progress"], capsys)


def documents(folder: Path) -> list[list[int]]:
    corpus = TokenCorpus(**read_manifest(folder)["corpus"])
    return [corpus.document(d).tolist() for d in range(corpus.num_documents)]


def test_text_files_become_one_document_each_or_one_per_non_blank_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.txt").write_text("first line\n\n  \nsecond é line\n")
    (tmp_path / "b.txt").write_text("other file")
    paths = [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    code, out, err = build(tmp_path, capsys, *paths, "--tokenizer", TOKENIZER)
    assert (code, err) == (0, "")
    assert documents(tmp_path / "out") == [
        encode("first line\n\n  \nsecond é line\n"),
        encode("other file"),
    ]
    assert "2 documents" in out and "documents/s" in out and "tokens/s" in out
    code, out, _ = build(
        tmp_path,
        capsys,
        *paths,
        "--tokenizer",
        TOKENIZER,
        "--documents",
        "line",
        "--eod-id",
        "0",
        "--overwrite",
    )
    assert code == 0
    texts = ["first line", "second é line", "other file"]
    assert documents(tmp_path / "out") == [[*encode(t), 0] for t in texts]


def test_json_lines_take_the_field_named_and_a_numpy_tokenizer_output_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{"body": "one", "id": 1}, {"body": "two two"}, {"body": ""}, {"body": "three"}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows) + "\n")
    code, out, _ = build(
        tmp_path,
        capsys,
        str(tmp_path / "d.jsonl"),
        "--field",
        "body",
        "--tokenizer",
        "tests.tokens.cli_tokenizers:encode_numpy",
    )
    assert code == 0
    assert documents(tmp_path / "out") == [encode("one"), encode("two two"), encode("three")]
    assert "1 empty documents skipped" in out
    manifest = json.loads((tmp_path / "out" / "corpus.json").read_text())
    assert manifest["dtype"] == "uint32" and manifest["eod_id"] is None


def test_a_tokenizers_json_trained_here_tokenizes_and_gives_the_vocab_size_and_dtype(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = ["the cat sat on the mat", "a dog ate the cat food", "cats and dogs and mats"] * 5
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(
        texts, trainers.BpeTrainer(vocab_size=60, special_tokens=["[EOD]", "[UNK]"])
    )
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "in.txt").write_text("\n".join(texts[:3]) + "\nzebra\n")
    code, _, _ = build(
        tmp_path,
        capsys,
        str(tmp_path / "in.txt"),
        "--documents",
        "line",
        "--tokenizer-json",
        str(tmp_path / "tokenizer.json"),
        "--eod-id",
        "0",
    )
    assert code == 0
    expected = [[*tokenizer.encode(t).ids, 0] for t in [*texts[:3], "zebra"]]
    assert documents(tmp_path / "out") == expected
    manifest = json.loads((tmp_path / "out" / "corpus.json").read_text())
    assert (manifest["vocab_size"], manifest["dtype"]) == (tokenizer.get_vocab_size(), "uint16")
    (tmp_path / "broken.json").write_text("{}")
    code, _, err = build(
        tmp_path,
        capsys,
        str(tmp_path / "in.txt"),
        "--tokenizer-json",
        str(tmp_path / "broken.json"),
        "--output",
        str(tmp_path / "x"),
    )
    assert code == 2 and "broken.json cannot be read as a tokenizer" in err


def test_a_saved_hugging_face_dataset_and_its_split_are_read_from_local_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import datasets

    train = datasets.Dataset.from_dict({"text": ["alpha", "beta", "gamma"], "n": [1, 2, 3]})
    test = datasets.Dataset.from_dict({"text": ["delta"], "n": [4]})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / "dd"))
    train.save_to_disk(str(tmp_path / "one"))
    code, _, _ = build(
        tmp_path,
        capsys,
        "--hf-dataset",
        str(tmp_path / "dd"),
        "--split",
        "train",
        "--tokenizer",
        TOKENIZER,
    )
    assert code == 0
    assert documents(tmp_path / "out") == [encode(t) for t in ("alpha", "beta", "gamma")]
    code, _, _ = build(
        tmp_path,
        capsys,
        "--hf-dataset",
        str(tmp_path / "one"),
        "--tokenizer",
        TOKENIZER,
        "--output",
        str(tmp_path / "out1"),
    )
    assert code == 0 and documents(tmp_path / "out1") == documents(tmp_path / "out")
    code, _, err = build(
        tmp_path,
        capsys,
        "--hf-dataset",
        str(tmp_path / "dd"),
        "--split",
        "dev",
        "--tokenizer",
        TOKENIZER,
        "--output",
        str(tmp_path / "out2"),
    )
    assert code == 1 and "--split should name a split of" in err and "'dev'" in err
    code, _, err = build(
        tmp_path,
        capsys,
        "--hf-dataset",
        str(tmp_path / "one"),
        "--field",
        "n",
        "--tokenizer",
        TOKENIZER,
        "--output",
        str(tmp_path / "out3"),
    )
    assert code == 1 and "one row 0 should hold a string in 'n'" in err
    assert not (tmp_path / "out3" / "corpus.json").exists()


@pytest.mark.subprocess
def test_the_corpus_is_the_same_bytes_whatever_the_number_of_workers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(3)
    words = ["token", "stream", "corpus", "ok", "é", "a"]
    for name in ("a.txt", "b.jsonl"):
        lines = [" ".join(rng.choice(words, size=rng.integers(1, 40))) for _ in range(700)]
        if name.endswith(".jsonl"):
            lines = [json.dumps({"text": line}) for line in lines]
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    inputs = [str(tmp_path / "a.txt"), str(tmp_path / "b.jsonl"), "--documents", "line"]
    args = [*inputs, "--tokenizer", TOKENIZER, "--eod-id", "0", "--max-tokens-per-file", "20000"]
    # One worker in this process; three through the command a user types (its entry point,
    # and a pool of worker processes that import the tokenizer by its spec).
    code, out, err = run(["tokens", "build", *args, "--output", str(tmp_path / "out1")], capsys)
    assert code == 0 and "1,400 documents" in out, err
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ["PYTHONPATH"]])}
    command = [sys.executable, "-m", "detsamplers", "tokens", "build", *args]
    command += ["--output", str(tmp_path / "out3"), "--workers", "3"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "1,400 documents" in result.stdout
    outputs = [
        {p.name: p.read_bytes() for p in sorted((tmp_path / f"out{n}").iterdir())} for n in (1, 3)
    ]
    assert outputs[0] == outputs[1]
    assert len([name for name in outputs[0] if name.endswith(".bin")]) > 1
    code, out, err = run(["tokens", "stats", str(tmp_path / "out3"), "--json"], capsys)
    stats = json.loads(out)
    assert (code, stats["documents"]) == (0, 1400), err
    assert sum(b["documents"] for b in stats["histogram"]) == 1400


def test_stats_prints_counts_min_mean_max_and_a_power_of_two_histogram(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lengths = [1, 2, 3, 4, 7, 8, 100, 1000]
    tokens = np.concatenate([np.append(np.full(n - 1, 5), 0) for n in lengths]).astype(np.uint16)
    tokens[:4].tofile(tmp_path / "a.bin")  # documents 1, 2 and 3 tokens... split over two files
    tokens[6:].tofile(tmp_path / "b.bin")
    code, out, _ = run(
        [
            "tokens",
            "stats",
            str(tmp_path / "a.bin"),
            str(tmp_path / "b.bin"),
            "--dtype",
            "uint16",
            "--eod-id",
            "0",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    stats = json.loads(out)
    corpus = TokenCorpus([tmp_path / "a.bin", tmp_path / "b.bin"], dtype="uint16", eod_id=0)
    real = corpus.lengths(0, corpus.num_documents)
    assert (stats["documents"], stats["tokens"]) == (len(real), int(real.sum()))
    assert stats["length"] == {
        "min": int(real.min()),
        "mean": float(real.mean()),
        "max": int(real.max()),
    }
    for bin in stats["histogram"]:
        assert bin["documents"] == int(((real >= bin["low"]) & (real <= bin["high"])).sum())
        assert bin["high"] == 2 * bin["low"] - 1
    assert sum(b["documents"] for b in stats["histogram"]) == len(real)
    code, out, _ = run(
        [
            "tokens",
            "stats",
            str(tmp_path / "a.bin"),
            str(tmp_path / "b.bin"),
            "--dtype",
            "uint16",
            "--eod-id",
            "0",
        ],
        capsys,
    )
    assert code == 0 and f"documents  {len(real)}" in out and "512 - 1,023" in out


def test_stats_reads_lengths_sidecars_and_checks_ids_against_vocab_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    np.save(tmp_path / "t.npy", np.array([3, 4, 5, 300], dtype=np.uint32))
    np.save(tmp_path / "t.len.npy", np.array([1, 3]))
    argv = ["tokens", "stats", str(tmp_path / "t.npy"), "--lengths", str(tmp_path / "t.len.npy")]
    code, out, _ = run([*argv, "--json"], capsys)
    assert code == 0 and json.loads(out)["length"] == {"min": 1, "mean": 2.0, "max": 3}
    code, _, err = run([*argv, "--vocab-size", "256"], capsys)
    assert code == 1 and "t.npy should hold token ids in [0, vocab_size=256), but token 3" in err


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["missing.bin", "--dtype", "uint16", "--eod-id", "0"], 1, "missing.bin cannot be read"),
        (["a.bin", "--eod-id", "0"], 1, "dtype should be given for the raw token file"),
        (
            ["a.bin", "--dtype", "uint16", "--eod-id", "0", "--lengths", "x.npy"],
            2,
            "--eod-id and --lengths should be given one, not both",
        ),
        (["a.bin", "--dtype", "uint16"], 2, "--eod-id or --lengths should be given"),
        (["a.bin", "--dtype", "uint16", "--eod-id", "-1"], 2, "--eod-id should be a non-negative"),
        (["a.bin", "--dtype", "uint16", "--eod-id", "9"], 1, "eod_id=9 should end the documents"),
        (["."], 1, "should hold the corpus.json of a corpus written by `tokens build`"),
    ],
)
def test_stats_exits_as_inspect_does_one_for_a_file_two_for_an_argument(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    status: int,
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    np.array([1, 0, 2, 0], dtype=np.uint16).tofile(tmp_path / "a.bin")
    code, _, err = run(["tokens", "stats", *argv], capsys)
    assert code == status and message in err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tests.tokens.cli_tokenizers:nope", "tests.tokens.cli_tokenizers has no function 'nope'"),
        ("tests.tokens.cli_tokenizers:NOT_CALLABLE", "has no function 'NOT_CALLABLE'"),
        ("no_such_module_here:encode", "cannot import 'no_such_module_here'"),
        ("encode", "--tokenizer should be module:function, but got 'encode'"),
    ],
)
def test_a_tokenizer_spec_that_names_no_callable_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, message: str
) -> None:
    (tmp_path / "a.txt").write_text("text")
    code, _, err = build(tmp_path, capsys, str(tmp_path / "a.txt"), "--tokenizer", spec)
    assert code == 2 and message in err
    assert not (tmp_path / "out" / "corpus.json").exists()


@pytest.mark.parametrize(
    ("function", "extra", "message"),
    [
        (
            "floats",
            [],
            "the tokenizer tests.tokens.cli_tokenizers:floats should return a list of "
            "int ids, but returned list of float64 values",
        ),
        ("strings", [], "should return a list of int ids, but returned list of <U1 values"),
        ("nested", [], "returned list of int64 values with shape (1, 4)"),
        ("raises", [], "should return ids, but it raised KeyError: 'good'"),
        (
            "too_large",
            ["--vocab-size", "1000"],
            "should return ids in [0, 1000), but returned 1000000",
        ),
        ("encode", ["--vocab-size", "100"], "should return ids in [0, 100), but returned 112"),
        ("encode", ["--dtype", "uint16", "--vocab-size", "70000"], "dtype should hold every id"),
    ],
)
def test_a_tokenizer_that_returns_no_ids_or_ids_over_the_vocab_is_an_error_naming_file_and_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    function: str,
    extra: list[str],
    message: str,
) -> None:
    (tmp_path / "a.txt").write_text("good\nthis\n")
    spec = f"tests.tokens.cli_tokenizers:{function}"
    code, _, err = build(
        tmp_path,
        capsys,
        str(tmp_path / "a.txt"),
        "--documents",
        "line",
        "--tokenizer",
        spec,
        *extra,
    )
    assert code in (1, 2) and message in err, err
    if code == 1:
        assert f"{tmp_path / 'a.txt'} line 1: the tokenizer" in err
    assert not (tmp_path / "out").exists() or sorted(os.listdir(tmp_path / "out")) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"text": "ok"}\n[1, 2]\n',
            "line 2 should be a JSON object with a 'text' field, but it is a list",
        ),
        (
            '{"text": "ok"}\n{"body": "x"}\n',
            "line 2 should have the field 'text', but has only ['body']",
        ),
        (
            '{"text": "ok"}\n\n{"text": 3}\n',
            "line 3 should have a string in 'text', but it holds a int",
        ),
        ('{"text": "ok"}\n{"text": \n', "line 2 should be a JSON object, but it is not JSON"),
        (
            '{"text": "ok"}\n' + "[" * 200_000 + "\n",
            "line 2 should be a JSON object, but it is not JSON",
        ),
        ('{"text": "ok"}\n\xff\n', "line 2 should be UTF-8 text, but byte 0 is not"),
    ],
)
def test_json_lines_that_are_not_objects_with_the_field_are_errors_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(content.encode("utf-8").replace("\xff".encode(), b"\xff"))
    code, _, err = build(tmp_path, capsys, str(path), "--tokenizer", TOKENIZER)
    assert code == 1 and f"{path} {message}" in err, err


def test_inputs_that_are_fifos_devices_folders_or_missing_are_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    os.symlink("/dev/zero", tmp_path / "zero.txt")
    for name in ("fifo", "folder", "zero.txt", "/dev/zero"):
        path = str(tmp_path / name)
        code, _, err = build(tmp_path, capsys, path, "--tokenizer", TOKENIZER)
        assert code == 1 and f"input {path} should be a regular file" in err, err
    code, _, err = build(tmp_path, capsys, str(tmp_path / "nope.txt"), "--tokenizer", TOKENIZER)
    assert code == 1 and "nope.txt cannot be read: No such file or directory" in err


def test_a_document_over_max_document_bytes_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.txt").write_text("short\n" + "x" * 5000 + "\n")
    args = [str(tmp_path / "a.txt"), "--tokenizer", TOKENIZER, "--max-document-bytes", "1000"]
    code, _, err = build(tmp_path, capsys, *args, "--documents", "line")
    assert code == 1 and "a.txt line 2 should be at most --max-document-bytes 1000 bytes" in err
    code, _, err = build(tmp_path, capsys, *args)
    assert code == 1 and "a.txt should be a document of at most --max-document-bytes 1000" in err


def test_an_output_with_a_complete_corpus_is_refused_and_a_failed_overwrite_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.txt").write_text("first")
    (tmp_path / "bad.jsonl").write_text('{"text": "x"}\n"no"\n')
    assert build(tmp_path, capsys, str(tmp_path / "a.txt"), "--tokenizer", TOKENIZER)[0] == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()}
    code, _, err = build(tmp_path, capsys, str(tmp_path / "a.txt"), "--tokenizer", TOKENIZER)
    assert code == 2 and "should not hold a complete corpus" in err and "--overwrite" in err
    code, _, _ = build(
        tmp_path, capsys, str(tmp_path / "bad.jsonl"), "--tokenizer", TOKENIZER, "--overwrite"
    )
    assert code == 1
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir()} == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["a.txt"], "--tokenizer or --tokenizer-json should be given"),
        (["a.txt", "--tokenizer", TOKENIZER, "--tokenizer-json", "t.json"], "not both"),
        (["--tokenizer", TOKENIZER], "INPUT files or --hf-dataset should be given"),
        (["a.txt", "--tokenizer", TOKENIZER, "--workers", "0"], "--workers should be a positive"),
        (
            ["a.txt", "--tokenizer", TOKENIZER, "--eod-id", "-2"],
            "--eod-id should be a non-negative",
        ),
        (
            ["a.txt", "--tokenizer", TOKENIZER, "--eod-id", "300", "--vocab-size", "256"],
            "eod_id should be below vocab_size=256, but got eod_id=300",
        ),
    ],
)
def test_bad_build_arguments_are_usage_errors_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _, err = build(tmp_path, capsys, *args)
    assert code == 2 and message in err, err


def test_the_progress_bar_shows_documents_and_tokens_per_second(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    code, _, err = run(
        [
            "tokens",
            "build",
            str(tmp_path / "a.txt"),
            "--documents",
            "line",
            "--tokenizer",
            TOKENIZER,
            "--output",
            str(tmp_path / "o"),
            "--progress",
        ],
        capsys,
    )
    assert code == 0 and "tokens build" in err and "doc/s" in err and "tok/s" in err
    assert VOCAB == 257


def test_the_parallel_build_reads_at_most_ahead_chunks_before_it_writes_the_first() -> None:
    from types import SimpleNamespace

    from detsamplers._cli_tokens_build import ordered

    read: list[int] = []

    def work():  # type: ignore[no-untyped-def]
        for i in range(100):
            read.append(i)
            yield ("text", "text", [(str(i), "x")])

    class InOrder:  # a pool whose task i is done when asked: what ordered() waits for
        def apply_async(self, function, args):  # type: ignore[no-untyped-def]
            return SimpleNamespace(get=lambda: args[0][2][0][0])

    results = ordered(InOrder(), work(), 8)
    assert next(results) == "0" and len(read) == 8
    assert list(results) == [str(i) for i in range(1, 100)]


def test_a_built_corpus_trains_through_token_sequences_and_the_loader_every_token_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from detsamplers.loader import DataLoader
    from detsamplers.tokens import TokenSequences, collate_tokens

    lines = [f"document number {i} " * (i % 7 + 1) for i in range(60)]
    (tmp_path / "a.txt").write_text("\n".join(lines) + "\n")
    code, _, _ = build(
        tmp_path,
        capsys,
        str(tmp_path / "a.txt"),
        "--documents",
        "line",
        "--tokenizer",
        TOKENIZER,
        "--eod-id",
        "0",
        "--max-tokens-per-file",
        "500",
    )
    assert code == 0
    corpus = TokenCorpus(**read_manifest(tmp_path / "out")["corpus"])
    assert len(corpus.paths) > 1
    sequences = TokenSequences(corpus, seq_len=15, mode="chunk", seed=2)
    loader = DataLoader(sequences, batch_size=4, shuffle=True, seed=2, collate_fn=collate_tokens)
    seen = [row for batch in loader.get_data_loader() for row in batch["input_ids"].tolist()]
    stream = np.concatenate([[*encode(line), 0] for line in lines])
    windows = stream[: len(stream) // 16 * 16].reshape(-1, 16)[:, :15].tolist()
    assert sorted(seen) == sorted(windows)
