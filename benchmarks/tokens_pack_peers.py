"""Padding of ``mode="pack"`` against peers' packers on the same document lengths.

Every packer gets the same synthetic document lengths (``--dist``): ``web`` is lognormal,
mean about 800 tokens, sigma 1 (``benchmarks/tokens_pack.py``'s corpus, same seed); ``sft``
is lognormal with median 256 tokens, sigma 0.8 (mean about 353). Each peer runs its
documented entry point in a process of its own, on documents of that many tokens (all
token ids 0: packing reads only lengths), and prints one JSON line: its padding fraction
(padding over the tokens of the sequences it makes, every sequence padded to its length),
the tokens it truncates, its build time and the process's peak RSS; ``ours`` and ``olmo``
also the build's own growth (``build_growth_mb``: the peak resident set during the build,
reset just before it through ``/proc/self/clear_refs``, less the one before it).

- ``ours``: ``TokenSequences(mode="pack", window=..., long_documents=...)`` on a sparse
  ``.bin`` and a lengths sidecar (capacity ``L + 1`` tokens), ``stats()``; the build time
  is ``PackOrder``'s with no index cache. The peers truncate long documents (or need them
  cut), so ``--long-documents truncate`` is the like-for-like row.
- ``grain``: ``grain.experimental.FirstFitPackIterDataset`` with ``num_packing_bins=K``
  (it has no default), ``shuffle_bins=False``, iterated to the end, on documents cut to
  ``L`` (it refuses longer ones); its padding is the positions whose ``segment_ids`` are 0.
- ``trl``: ``trl.pack_dataset(dataset, L, strategy="bfd")`` on a ``datasets.Dataset`` of
  ``input_ids`` (best-fit-decreasing per ``map`` batch of 1000, long documents truncated).
- ``torchtune``: ``torchtune.datasets.PackedDataset(ds, max_seq_len=L)`` (greedy, in
  order, ``split_across_pack=False``, so documents are cut to ``L`` first, as its SFT
  tokenizers do).
- ``olmo``: OLMo-core's ``InstancePacker(L).pack_documents`` (the best-fit-decreasing
  step of ``pack_documents_into_instances``, one source file) on document indices cut to
  ``L`` (``LongDocStrategy.truncate``); the time excludes its scan of the tokens for EOS.

Run ours with the library's venv and the peers with ``.venv-tokens`` (``make tokens-peers``
plus ``pip install grain trl torchtune torchao==0.16.0``)::

    PYTHONPATH=. .venv/bin/python benchmarks/tokens_pack_peers.py ours --seq-len 2048
    .venv-tokens/bin/python benchmarks/tokens_pack_peers.py grain --bins 8 --seq-len 2048
"""

from __future__ import annotations

import argparse
import importlib
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _peak_memory import growth_since, reset_peak


def lengths_of(dist: str, documents: int) -> Any:
    """The document lengths of ``dist`` (``web`` is ``tokens_pack.py``'s, same seed)."""
    rng = np.random.default_rng(0)
    if dist == "web":
        raw = rng.lognormal(np.log(800) - 0.5, 1.0, documents)
    else:
        raw = rng.lognormal(np.log(256), 0.8, documents)
    return np.maximum(1, np.rint(raw)).astype(np.uint32)


def ours(lengths: Any, seq_len: int, window: int, folder: Path, long: str) -> dict[str, Any]:
    from detsamplers.tokens import TokenCorpus, TokenSequences
    from detsamplers.tokens._pack import PackOrder

    tokens, sidecar = folder / "docs.bin", folder / "docs.lengths.npy"
    with open(tokens, "wb") as handle:
        handle.truncate(int(lengths.sum()) * 2)  # sparse zeros
    np.save(sidecar, lengths)
    corpus = TokenCorpus(tokens, dtype="uint16", lengths=[sidecar])
    before = reset_peak()
    start = time.perf_counter()
    order = PackOrder(corpus, seq_len, 0, window, long, cache=False)
    seconds, growth = time.perf_counter() - start, growth_since(before)
    stats = order.stats()
    sequences = TokenSequences(
        corpus, seq_len, mode="pack", window=window, long_documents=long
    ).stats()
    assert sequences["sequences"] == stats["sequences"]  # the public path counts the same
    for path in folder.glob("docs.bin.pack-*.npy"):
        path.unlink()
    return {
        "sequences": stats["sequences"], "padding_fraction": stats["padding_fraction"],
        "truncated_tokens": stats["truncated_tokens"], "seconds": seconds,
        "build_growth_mb": growth,
    }  # fmt: skip


def grain(lengths: Any, seq_len: int, bins: int) -> dict[str, Any]:
    import grain as gr
    from grain.experimental import FirstFitPackIterDataset

    def doc(n: Any) -> dict[str, Any]:
        return {"tokens": np.zeros(int(n), dtype=np.int32)}

    cut = np.minimum(lengths, seq_len)  # grain refuses a sequence over its length
    source = gr.MapDataset.source(cut).map(doc).to_iter_dataset()
    start = time.perf_counter()
    packed = FirstFitPackIterDataset(
        source, length_struct={"tokens": seq_len}, num_packing_bins=bins, shuffle_bins=False
    )
    sequences = padding = 0
    for row in packed:
        sequences += 1
        padding += int((row["tokens_segment_ids"] == 0).sum())
    room = sequences * seq_len
    truncated = int(np.maximum(lengths.astype(np.int64) - seq_len, 0).sum())
    return {
        "sequences": sequences, "padding_fraction": padding / room,
        "truncated_tokens": truncated, "seconds": time.perf_counter() - start,
    }  # fmt: skip


def trl(lengths: Any, seq_len: int) -> dict[str, Any]:
    pa = importlib.import_module("pyarrow")  # untyped peers: not in the mypy config
    from datasets import Dataset

    pack_dataset = importlib.import_module("trl").pack_dataset

    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = pa.array(np.zeros(int(offsets[-1]), dtype=np.int32))
    column = pa.LargeListArray.from_arrays(pa.array(offsets), values)
    dataset = Dataset(pa.table({"input_ids": column}))
    start = time.perf_counter()
    packed = pack_dataset(dataset, seq_len, strategy="bfd")
    seconds = time.perf_counter() - start
    kept = int(sum(sum(row) for row in packed.data.column("seq_lengths").to_pylist()))
    room = len(packed) * seq_len
    return {
        "sequences": len(packed), "padding_fraction": (room - kept) / room,
        "truncated_tokens": int(lengths.sum()) - kept, "seconds": seconds,
    }  # fmt: skip


def torchtune(lengths: Any, seq_len: int) -> dict[str, Any]:
    PackedDataset = importlib.import_module("torchtune.datasets").PackedDataset  # noqa: N806

    cut = np.minimum(lengths, seq_len)
    docs = [{"tokens": [0] * int(n), "labels": [0] * int(n)} for n in cut]
    start = time.perf_counter()
    packed = PackedDataset(docs, max_seq_len=seq_len)
    seconds = time.perf_counter() - start
    room = len(packed.packs) * seq_len
    kept = int(cut.sum())
    return {
        "sequences": len(packed.packs), "padding_fraction": (room - kept) / room,
        "truncated_tokens": int(lengths.sum()) - kept, "seconds": seconds,
    }  # fmt: skip


def olmo(lengths: Any, seq_len: int) -> dict[str, Any]:
    from olmo_core.data.utils import InstancePacker

    cut = np.minimum(lengths, seq_len).astype(np.uint64)
    starts = np.zeros(len(cut), dtype=np.uint64)
    np.cumsum(cut[:-1], out=starts[1:])
    indices = np.stack([starts, starts + cut], axis=1)
    before = reset_peak()
    start = time.perf_counter()
    instances, _, total = InstancePacker(seq_len).pack_documents(indices)
    seconds, growth = time.perf_counter() - start, growth_since(before)
    room = len(instances) * seq_len
    return {
        "sequences": len(instances), "padding_fraction": (room - total) / room,
        "truncated_tokens": int(lengths.sum()) - int(total), "seconds": seconds,
        "build_growth_mb": growth,
    }  # fmt: skip


def _rate(batches: Any, batch: int, seq_len: int, budget: int, cap: float,
          warmup: int) -> dict[str, Any]:  # fmt: skip
    """Packed tokens/s of an endless iterator of batches, after ``warmup`` batches."""
    for _ in range(warmup):
        next(batches)
    start, cpu, count = time.perf_counter(), time.process_time(), 0
    while count < budget and time.perf_counter() - start < cap:
        next(batches)
        count += 1
    seconds = time.perf_counter() - start
    return {"tokens_per_s": count * batch * seq_len / seconds, "batches": count,
            "main_cpu_us_per_batch": (time.process_time() - cpu) / count * 1e6}  # fmt: skip


def rate_ours(lengths: Any, seq_len: int, window: int, folder: Path, long: str,
              args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    """``mode="pack"`` through ``DataLoader(shuffle=True)`` and ``collate_tokens``."""
    from detsamplers.loader import DataLoader
    from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens

    tokens, sidecar = folder / "docs.bin", folder / "docs.lengths.npy"
    with open(tokens, "wb") as handle:
        handle.truncate(int(lengths.sum()) * 2)  # sparse zeros: a read is page-cache work
    np.save(sidecar, lengths)
    corpus = TokenCorpus(tokens, dtype="uint16", lengths=[sidecar])
    outputs = args.outputs.split(",")
    sequences = TokenSequences(corpus, seq_len, mode="pack", window=window,
                               long_documents=long, outputs=outputs)  # fmt: skip
    loader = DataLoader(sequences, batch_size=args.batch, shuffle=True, seed=0,
                        num_workers=args.rate, collate_fn=collate_tokens)  # fmt: skip
    batches = iter(loader.get_data_loader(repeat=True))
    return {"outputs": outputs,
            **_rate(batches, args.batch, seq_len, args.budget, args.cap, args.warmup)}  # fmt: skip


def rate_torchtune(lengths: Any, seq_len: int, args: argparse.Namespace) -> dict[str, Any]:
    """``PackedDataset`` (packed before, untimed) through torch's ``DataLoader``.

    ``--collate torchtune``: its ``padded_collate_packed`` (tokens, labels, input_pos and a
    dense ``(B, L, L)`` block-causal mask on CPU); ``--collate stack``: tokens, labels and
    input_pos stacked, the mask left out (ours' ``input_ids``, ``labels``,
    ``position_ids``).
    """
    import torch
    from torch.utils.data import DataLoader as TorchLoader

    PackedDataset = importlib.import_module("torchtune.datasets").PackedDataset  # noqa: N806
    collate_packed = importlib.import_module("torchtune.data").padded_collate_packed

    def stack(batch: list[dict[str, Any]]) -> dict[str, Any]:
        return {key: torch.stack([x[key] for x in batch]) for key in ("tokens", "labels",
                                                                      "input_pos")}  # fmt: skip

    cut = np.minimum(lengths, seq_len)
    packed = PackedDataset([{"tokens": [1] * int(n), "labels": [1] * int(n)} for n in cut],
                           max_seq_len=seq_len)  # fmt: skip
    collate = collate_packed if args.collate == "torchtune" else stack

    def endless() -> Any:
        epoch = 0
        while True:
            torch.manual_seed(epoch)
            loader = TorchLoader(packed, batch_size=args.batch, shuffle=True,
                                 num_workers=args.rate, collate_fn=collate)  # fmt: skip
            yield from loader
            epoch += 1

    return {"collate": args.collate, **_rate(endless(), args.batch, seq_len, args.budget,
                                             args.cap, args.warmup)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("peer", choices=["ours", "grain", "trl", "torchtune", "olmo"])
    parser.add_argument("--dist", choices=["web", "sft"], default="web")
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--window", type=int, default=1000, help="ours: documents per window")
    parser.add_argument("--bins", type=int, default=8, help="grain: num_packing_bins")
    parser.add_argument("--long-documents", default="split", choices=["split", "truncate"])
    parser.add_argument("--rate", type=int, default=None, metavar="WORKERS",
                        help="packed tokens/s through the loader with WORKERS workers")  # fmt: skip
    parser.add_argument("--batch", type=int, default=8, help="--rate: sequences per batch")
    parser.add_argument("--budget", type=int, default=200, help="--rate: batches timed")
    parser.add_argument("--cap", type=float, default=10.0, help="--rate: seconds at most")
    parser.add_argument("--warmup", type=int, default=8, help="--rate: batches before timing "
                        "(ours packs each window the first time a batch reads it; torchtune "
                        "packs before, untimed)")  # fmt: skip
    parser.add_argument("--outputs", default="input_ids,labels,position_ids,document_ids,"
                        "cu_seqlens", help="--rate, ours: the arrays computed")  # fmt: skip
    parser.add_argument("--collate", default="torchtune", choices=["torchtune", "stack"])
    args = parser.parse_args()
    lengths = lengths_of(args.dist, args.documents)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if args.rate is not None and args.peer == "ours":
        with tempfile.TemporaryDirectory() as folder:
            out = rate_ours(lengths, args.seq_len, args.window, Path(folder),
                            args.long_documents, args)  # fmt: skip
    elif args.rate is not None and args.peer == "torchtune":
        out = rate_torchtune(lengths, args.seq_len, args)
    elif args.rate is not None:
        parser.error("--rate measures ours and torchtune only")
    elif args.peer == "ours":
        with tempfile.TemporaryDirectory() as folder:
            out = ours(lengths, args.seq_len, args.window, Path(folder), args.long_documents)
    elif args.peer == "grain":
        out = grain(lengths, args.seq_len, args.bins)
    else:
        out = globals()[args.peer](lengths, args.seq_len)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    settings = {"window": args.window, "long_documents": args.long_documents}
    settings = settings if args.peer == "ours" else {}
    settings.update({"bins": args.bins} if args.peer == "grain" else {})
    settings.update({"workers": args.rate, "batch": args.batch, "warmup": args.warmup}
                    if args.rate is not None else {})  # fmt: skip
    line = {
        "peer": args.peer, **settings, "dist": args.dist, "documents": args.documents,
        "seq_len": args.seq_len, "tokens": int(lengths.sum()), **out,
        "peak_rss_mb": peak / 1024, "rss_before_mb": before / 1024,
        "loadavg": Path("/proc/loadavg").read_text().split()[0],
    }  # fmt: skip
    print(json.dumps(line))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
