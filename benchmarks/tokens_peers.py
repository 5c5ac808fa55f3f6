"""Token streams against Megatron-Core, OLMo-core and litdata, each on its own fastest path.

How to run (from the repository root; the peers live in a venv of their own)::

    make tokens-peers      # build .venv-tokens: megatron-core, ai2-olmo-core, litdata
    PYTHONPATH=. .venv-tokens/bin/python benchmarks/tokens_peers.py --folder /tmp/tokbench
    PYTHONPATH=. .venv-tokens/bin/python benchmarks/tokens_peers.py --folder /tmp/t --quick

Synthetic corpora of ``--documents`` documents (lognormal lengths, sigma 1, mean 800
tokens, uint16, every document ending with EOS 0) are written once into ``--folder`` in
each library's format: ``corpus.bin``/``corpus.idx`` by megatron-core's
``IndexedDatasetBuilder`` (the ``.bin`` is also OLMo's numpy token file and ours, with a
lengths sidecar ``corpus.lengths.npy``), and litdata's chunks by ``litdata.optimize``.
Above ``--write-limit`` documents only the index files are written and the ``.bin`` is a
sparse file of the right size: row 1 reads lengths only; rows 2 to 4 run on the largest
corpus written in full. Every measurement runs in a fresh process (its imports untimed),
the libraries alternating which goes first. The rows:

1. index build time and peak RSS growth at ``L``: our ``concat`` (open the corpus from its
   lengths sidecar, build the block totals) against Megatron-Core's ``GPTDataset`` (open
   the ``IndexedDataset``, build ``doc_idx``, ``sample_idx`` by its compiled helpers and
   ``shuffle_idx`` for one epoch, and save them: its cache folder is removed first);
2. the first batch of ``B`` sequences after a resume at 1e10 trained tokens, through each
   library's own state API (the state and any index cache prepared before, untimed);
3. tokens per second on one rank through each library's data loader with 0 and 2
   workers, after a warm-up of ``B`` batches;
4. the size of each library's resume state, serialised as JSON.

Each adapter lists in ``IMPORTS`` the modules imported before anything is timed. The
adapters are ``benchmarks/peers/tokens/`` (one module per library; their docstrings
give each configuration). Speed is reported, never asserted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _peak_memory import growth_since, reset_peak
from harness.fmt import fmt_bytes, fmt_rate, fmt_ratio, fmt_time
from harness.machine import load_average, machine_info, machine_line
from peers.tokens import EOD, VOCAB, Corpus, document_lengths

ROOT = Path(__file__).resolve().parents[1]
MODULES = {
    "ours": "peers.tokens.ours",
    "megatron": "peers.tokens.megatron",
    "olmo": "peers.tokens.olmo",
    "litdata": "peers.tokens.litdata_tokens",
}
#: Column label per (library, mode).
LABELS = {
    ("ours", "chunk"): "ours chunk",
    ("ours", "concat"): "ours concat",
    ("ours", "chunk-io"): "ours chunk, inputs+labels",
    ("ours", "concat-io"): "ours concat, inputs+labels",
    ("megatron", ""): "Megatron-Core",
    ("olmo", ""): "OLMo-core",
    ("litdata", ""): "litdata",
    ("litdata", "user"): "litdata + user's int64",
}
PEER_MODULE = {"megatron": "megatron.core", "olmo": "olmo_core", "litdata": "litdata"}


def available(name: str) -> bool:
    """Whether the library behind ``name`` imports in this interpreter."""
    import importlib.util

    module = PEER_MODULE.get(name)
    return module is None or importlib.util.find_spec(module.split(".")[0]) is not None


# ---------------------------------------------------------------------------- writing


def blocks(lengths: np.ndarray, per_block: int = 1 << 16, seed: int = 1) -> Any:
    """``(tokens, lengths)`` per block of documents: ids in [1, VOCAB), EOD last."""
    rng = np.random.default_rng(seed)
    for first in range(0, len(lengths), per_block):
        part = lengths[first : first + per_block]
        tokens = rng.integers(1, VOCAB, size=int(part.sum()), dtype=np.uint16)
        tokens[np.cumsum(part) - 1] = EOD
        yield tokens, part


def write_corpus(corpus: Corpus, documents: int, mean: float, full: bool, seq_len: int) -> None:
    """Every format of one corpus, once (a ``done`` marker skips a finished folder)."""
    done = corpus.folder / "done"
    if done.exists():
        return
    if corpus.folder.exists():
        shutil.rmtree(corpus.folder)
    corpus.folder.mkdir(parents=True)
    lengths = document_lengths(documents, mean)
    np.save(corpus.lengths, lengths.astype(np.int32))  # int32, as Megatron's .idx holds them
    megatron = importlib.import_module(MODULES["megatron"])
    started = time.perf_counter()
    if full:
        megatron.write(corpus, blocks(lengths))
        print(f"  megatron IndexedDatasetBuilder: {time.perf_counter() - started:.1f} s")
        if available("litdata"):
            started = time.perf_counter()
            litdata = importlib.import_module(MODULES["litdata"])
            litdata.write(corpus, seq_len, np.cumsum(lengths))
            print(f"  litdata.optimize: {time.perf_counter() - started:.1f} s")
    else:
        with corpus.bin.open("wb") as out:
            out.truncate(2 * int(lengths.sum()))
        megatron.write_index_only(corpus, lengths)
    done.write_text(json.dumps({"documents": documents, "tokens": int(lengths.sum())}))


# ---------------------------------------------------------------------------- workers


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement in this fresh process; returns what the driver tabulates."""
    corpus = Corpus(args.folder)
    module = importlib.import_module(MODULES[args.lib])
    for name in module.IMPORTS:  # imports are never timed
        importlib.import_module(name)
    extra = {"mode": args.mode} if args.mode else {}
    if args.worker == "build":
        shutil.rmtree(corpus.work / "megatron-build", ignore_errors=True)
        import gc

        gc.collect()
        before = reset_peak()
        started = time.perf_counter()
        built = module.build(corpus, args.seq_len, **extra)
        seconds = time.perf_counter() - started
        del built
        return {"seconds": seconds, "rss": round(growth_since(before) * 2**20)}
    if args.worker == "resume":
        first = module.resume(corpus, args.seq_len, args.batch, args.samples, **extra)
        times = []
        for _ in range(args.repeats):
            first()  # untimed: warm caches, as the house's resume rows do
            started = time.perf_counter()
            batch = first()
            times.append(time.perf_counter() - started)
        shape = list(batch.shape) if hasattr(batch, "shape") else None
        state = module.state(corpus, args.seq_len, args.batch, args.samples, **extra)
        cache = module.cache_bytes(corpus) if hasattr(module, "cache_bytes") else 0
        return {"seconds": statistics.median(times), "all": times, "shape": shape,
                "state": len(state), "cache": cache}  # fmt: skip
    if args.worker == "rate":
        batches = module.loader(corpus, args.seq_len, args.batch, args.num_workers, **extra)
        for _ in range(args.batch):
            next(batches)
        started, cpu = time.perf_counter(), time.process_time()
        count = 0
        while count < args.budget and time.perf_counter() - started < args.cap:
            next(batches)
            count += 1
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        return {"tokens_per_s": count * args.batch * args.seq_len / seconds, "batches": count,
                "cpu_per_batch": cpu / max(count, 1)}  # the main process's CPU  # fmt: skip
    raise ValueError(f"--worker should be build, resume or rate, but got {args.worker!r}")


def run_worker(kind: str, lib: str, mode: str, folder: Path, args: argparse.Namespace,
               **options: int) -> dict[str, Any]:  # fmt: skip
    """Run ``worker`` in a fresh process of this interpreter; its JSON result."""
    command = [sys.executable, __file__, "--worker", kind, "--lib", lib, "--mode", mode,
               "--folder", str(folder), "--seq-len", str(args.seq_len),
               "--batch", str(args.batch), "--repeats", str(args.repeats)]  # fmt: skip
    for key, value in options.items():
        command += [f"--{key.replace('_', '-')}", str(value)]
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"{lib} {mode} {kind} failed: {tail}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# ---------------------------------------------------------------------------- tables


def show(rows: list[list[str]], headers: list[str]) -> str:
    """A plain text table."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def alternate(names: Sequence[Any], round_: int) -> list[Any]:
    """``names`` rotated by ``round_``, so that each goes first in turn."""
    k = round_ % len(names)
    return [*names[k:], *names[:k]]


def row_build(
    args: argparse.Namespace, corpora: list[tuple[int, Corpus]], info: dict[str, str]
) -> None:
    libs = [("ours", "concat"), ("megatron", "")]
    print(f"Row 1. Index build at L = {args.seq_len}: time and peak RSS growth (lower is better)")
    print(machine_line(info, load_end=None))
    rows = []
    for documents, corpus in corpora:
        got: dict[tuple[str, str], list[dict[str, Any]]] = {lib: [] for lib in libs}
        for r in range(args.repeats):
            for lib, mode in alternate(libs, r):
                if available(lib):
                    got[(lib, mode)].append(run_worker("build", lib, mode, corpus.folder, args))
        cells = [f"{documents:.0e}", f"{corpus.num_tokens():.2e}"]
        medians = {}
        for lib in libs:
            runs = [x for x in got[lib] if "error" not in x]
            errors = [x["error"] for x in got[lib] if "error" in x]
            if errors:
                print("  " + errors[0])
            if not runs:
                cells += ["not installed" if not available(lib[0]) else "failed"] * 2
                continue
            t = statistics.median(x["seconds"] for x in runs)
            m = statistics.median(x["rss"] for x in runs)
            medians[lib] = (t, m)
            cells += [fmt_time(t), fmt_bytes(m)]
        if len(medians) == 2:
            (t0, m0), (t1, m1) = medians[libs[0]], medians[libs[1]]
            cells += [fmt_ratio(t0 / t1), fmt_ratio(m0 / max(m1, 1))]
        else:
            cells += ["", ""]
        rows.append(cells)
    print(show(rows, ["docs", "tokens", "ours time", "ours RSS", "Megatron time", "Megatron RSS",
                      "time ours/M", "RSS ours/M"]))  # fmt: skip
    print(f"  median of {args.repeats} fresh processes each, alternating")
    print(f"  load {load_average()} at the end\n")


def row_resume(args: argparse.Namespace, corpus: Corpus, info: dict[str, str]) -> None:
    libs = [("ours", "chunk"), ("ours", "concat"), ("megatron", ""), ("olmo", ""), ("litdata", "")]
    samples = args.resume_tokens // (args.batch * args.seq_len) * args.batch
    print(
        f"Row 2 and 4. First batch of {args.batch} x {args.seq_len} after a resume at "
        f"{args.resume_tokens:.0e} tokens ({samples:,} sequences), and the state's size"
    )
    print(machine_line(info, load_end=None))
    rows = []
    for lib, mode in libs:
        if not available(lib):
            rows.append([LABELS[(lib, mode)], "not installed", "", "", ""])
            continue
        got = run_worker("resume", lib, mode, corpus.folder, args, samples=samples)
        if "error" in got:
            print("  " + got["error"])
            rows.append([LABELS[(lib, mode)], "failed", "", "", ""])
            continue
        rows.append([LABELS[(lib, mode)], fmt_time(got["seconds"]),
                     " ".join(fmt_time(x) for x in got["all"]), f"{got['state']:,} B",
                     fmt_bytes(got["cache"]) if got["cache"] else "-"])  # fmt: skip
    print(show(rows, ["library", "first batch", "runs (each after an untimed one)", "state",
                      "index cache read"]))  # fmt: skip
    print(f"  load {load_average()} at the end\n")


def row_rate(args: argparse.Namespace, corpus: Corpus, info: dict[str, str]) -> None:
    # "chunk-io" is the equal-work column against litdata + user (its batch turned into
    # int64 inputs and targets as litgpt does); "concat-io" the one against Megatron-Core's
    # GPTDataset (a shuffled document order).
    libs = [("ours", "chunk"), ("ours", "concat"), ("ours", "chunk-io"), ("ours", "concat-io"),
            ("megatron", ""), ("olmo", ""), ("litdata", ""), ("litdata", "user")]  # fmt: skip
    shape = f"{args.batch} x {args.seq_len}"
    print(f"Row 3. Tokens/s on one rank, batches of {shape} (higher is better)")
    print(machine_line(info, load_end=None))
    rows = []
    for workers in (0, 2):
        got: dict[tuple[str, str], list[float]] = {lib: [] for lib in libs}
        for r in range(args.repeats):
            for lib, mode in alternate(libs, r):
                if available(lib):
                    x = run_worker("rate", lib, mode, corpus.folder, args, num_workers=workers,
                                   budget=args.budget, cap=args.cap)  # fmt: skip
                    if "error" in x:
                        print("  " + x["error"])
                    else:
                        got[(lib, mode)].append(x["tokens_per_s"])
        rows.append([str(workers), *(fmt_rate(statistics.median(got[lib])) if got[lib] else
                                     "n/a" for lib in libs)])  # fmt: skip
    print(show(rows, ["workers", *(LABELS[lib] for lib in libs)]))
    print(
        f"  {args.budget} batches or {args.cap} s after a warm-up of {args.batch} batches, "
        f"median of {args.repeats} fresh processes, alternating"
    )
    print(f"  load {load_average()} at the end\n")


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_argument("--folder", type=Path, default=Path("/tmp/detsamplers-tokens-bench"))
    cli.add_argument("--documents", type=float, nargs="+", default=[1e6, 1e7])
    cli.add_argument("--write-limit", type=float, default=1e6,
                     help="corpora up to this many documents get real tokens")  # fmt: skip
    cli.add_argument("--mean", type=float, default=800.0)
    cli.add_argument("--seq-len", type=int, default=2048)
    cli.add_argument("--batch", type=int, default=8)
    cli.add_argument("--resume-tokens", type=float, default=1e10)
    cli.add_argument("--repeats", type=int, default=3)
    cli.add_argument("--budget", type=int, default=200)
    cli.add_argument("--cap", type=float, default=10.0)
    cli.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3])
    cli.add_argument("--quick", action="store_true", help="2e4 documents, one repeat, short runs")
    cli.add_argument("--keep", action="store_true", help="keep the corpora in --folder")
    # A worker's own options (the driver passes them).
    cli.add_argument("--worker", help=argparse.SUPPRESS)
    cli.add_argument("--lib", help=argparse.SUPPRESS)
    cli.add_argument("--mode", default="", help=argparse.SUPPRESS)
    cli.add_argument("--samples", type=int, default=0, help=argparse.SUPPRESS)
    cli.add_argument("--num-workers", type=int, default=0, help=argparse.SUPPRESS)
    args = cli.parse_args(argv)
    args.resume_tokens = int(args.resume_tokens)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.quick:
        args.documents, args.write_limit, args.repeats = [2e4], 2e4, 1
        args.budget, args.cap = 10, 2.0
    if not available("megatron"):
        print("megatron-core is not importable here: run this with .venv-tokens/bin/python "
              "(make tokens-peers)", file=sys.stderr)  # fmt: skip
        return 1
    started = time.perf_counter()
    info = machine_info({d: v for d, v in _versions().items()})
    corpora = []
    for documents in sorted(int(d) for d in args.documents):
        corpus = Corpus(args.folder / f"docs{documents}")
        full = documents <= args.write_limit
        what = "tokens" if full else "index only"
        print(f"corpus of {documents:.0e} documents ({what}) in {corpus.folder}")
        write_corpus(corpus, documents, args.mean, full, args.seq_len)
        corpora.append((documents, corpus, full))
    print()
    try:
        if 1 in args.rows:
            row_build(args, [(d, c) for d, c, _ in corpora], info)
        written = [c for _, c, full in corpora if full]
        if written and 2 in args.rows:
            row_resume(args, written[-1], info)
        if written and 3 in args.rows:
            row_rate(args, written[-1], info)
    finally:
        if not args.keep:
            shutil.rmtree(args.folder, ignore_errors=True)
    mode = "quick" if args.quick else "full"
    print(f"{mode} mode: {time.perf_counter() - started:.1f} s wall time")
    return 0


def _versions() -> dict[str, str]:
    import importlib.metadata as metadata

    found = {}
    for distribution in ("megatron-core", "ai2-olmo-core", "litdata"):
        try:
            found[distribution] = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            found[distribution] = "not installed"
    return found


if __name__ == "__main__":
    sys.exit(main())
