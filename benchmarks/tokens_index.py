"""Cost of a token corpus's document index and of a sequence lookup, at 1e7 documents.

    PYTHONPATH=. python benchmarks/tokens_index.py --documents 10000000 --mean 64 --folder /tmp/x

Writes one ``.bin`` (uint16) of ``documents`` documents with lognormal lengths (mean
``--mean``), each ending with EOD 0, then times: the first open (the end-of-document scan
and the cached index written beside the file), a second open (the cache memory-mapped), the
``concat`` order's block totals, ``__getitem__`` of random sequences in each mode, and
the first batch of a loader resumed after 1e10 tokens.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import numpy as np

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens


def write(path: Path, documents: int, mean: float, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    sigma = 1.0
    lengths = np.maximum(1, rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, documents)).astype(
        np.int64
    )
    ends = np.cumsum(lengths)
    with path.open("wb") as out:
        step = 1 << 20
        for first in range(0, documents, step):
            part = lengths[first : first + step]
            tokens = rng.integers(1, 50_000, size=int(part.sum()), dtype=np.uint16)
            tokens[np.cumsum(part) - 1] = 0
            tokens.tofile(out)
    return int(ends[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=10_000_000)
    parser.add_argument("--mean", type=float, default=64.0)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--folder", type=Path, required=True)
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    path = args.folder / "corpus.bin"
    for stale in args.folder.glob("corpus.bin.*"):
        stale.unlink()
    started = time.perf_counter()
    tokens = write(path, args.documents, args.mean)
    print(f"wrote {tokens:.3e} tokens, {args.documents:.0e} documents in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0, progress=False)
    scan = time.perf_counter() - started
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    index = (args.folder / "corpus.bin.eod0.npy").stat().st_size
    print(f"first open (scan + cache): {scan:.2f} s, {tokens / scan / 1e6:.0f} M tokens/s, "
          f"index {index / 1e6:.1f} MB on disk, peak RSS +{grew:.0f} MB")  # fmt: skip
    started = time.perf_counter()
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0, progress=False)
    print(f"cached open: {(time.perf_counter() - started) * 1e3:.1f} ms, "
          f"{corpus.num_documents} documents")  # fmt: skip
    for mode in ("chunk", "concat"):
        started = time.perf_counter()
        sequences = TokenSequences(corpus, args.seq_len, mode=mode, seed=0)
        built = time.perf_counter() - started
        picks = np.random.default_rng(1).integers(0, len(sequences), size=200).tolist()
        started = time.perf_counter()
        for k in picks:
            sequences[k]
        each = (time.perf_counter() - started) / len(picks)
        print(f"{mode}: build {built * 1e3:.1f} ms, {len(sequences)} sequences of "
              f"{args.seq_len}, random __getitem__ {each * 1e3:.2f} ms")  # fmt: skip
        # A resume after 1e10 tokens trained: skip_samples sequences, nothing replayed.
        skip = 10**10 // (args.seq_len + 1)
        loader = DataLoader(sequences, batch_size=8, shuffle=True, seed=0,
                            collate_fn=collate_tokens)  # fmt: skip
        started = time.perf_counter()
        batch = next(iter(loader.get_data_loader(repeat=True, skip_samples=skip)))
        first = time.perf_counter() - started
        print(f"{mode}: first batch of 8 after a resume at 1e10 tokens ({skip} sequences): "
              f"{first * 1e3:.1f} ms, {tuple(batch['input_ids'].shape)}")  # fmt: skip


if __name__ == "__main__":
    main()
