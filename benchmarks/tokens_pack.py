"""Packing on web-like document lengths: padding, index build time, first batch after a seek.

A synthetic corpus of ``--documents`` lognormal lengths (mean about 800 tokens, sigma 1) is
written as a sparse ``.bin`` of zeros with a lengths sidecar (packing reads only the
lengths, so no real tokens are needed), then one of:

- ``padding``: ``TokenSequences.stats()``'s padding fraction for each ``L`` and window;
- ``build``: the seconds (wall and CPU) to build ``mode``'s index (``pack``: the bin
  counts, no cache; ``concat``: its block totals) for one ``L`` and window, and the build's
  own memory: the peak resident set during the build less the one before it (the peak is
  reset first through ``/proc/self/clear_refs``, so importing torch and the library does
  not count);
- ``resume``: the seconds from opening the (cached) corpus and index to the first batch
  of a loader resumed at ``--position`` sequences, through ``DataLoader``.

Run: ``python benchmarks/tokens_pack.py padding --documents 1000000``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from _peak_memory import growth_since, reset_peak

from detsamplers import kernel_status
from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens


def corpus_at(folder: Path, documents: int, seed: int = 0) -> TokenCorpus:
    """The corpus of ``documents`` lognormal lengths in ``folder`` (written once)."""
    tokens, sidecar = folder / f"web{documents}.bin", folder / f"web{documents}.lengths.npy"
    if not sidecar.exists():
        rng = np.random.default_rng(seed)
        lengths = np.maximum(1, np.rint(rng.lognormal(np.log(800) - 0.5, 1.0, documents)))
        lengths = lengths.astype(np.uint32)
        with open(tokens, "wb") as handle:
            handle.truncate(int(lengths.sum()) * 2)  # sparse: no disk, pages of zeros
        np.save(sidecar, lengths)
    return TokenCorpus(tokens, dtype="uint16", lengths=[sidecar])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["padding", "build", "resume"])
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--seq-len", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--window", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--mode", default="pack", choices=["pack", "concat"])
    parser.add_argument("--position", type=int, default=10**10 // 2049, help="sequences")
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "packbench")
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    corpus = corpus_at(args.folder, args.documents)
    if args.what == "padding":
        print(f"{corpus.num_documents} documents, {corpus.num_tokens} tokens")
        for seq_len in args.seq_len:
            for window in args.window:
                stats = TokenSequences(corpus, seq_len, mode="pack", window=window).stats()
                print(f"L={seq_len} window={window}: padding {100 * stats['padding_fraction']:.3f}%"
                      f" over {stats['sequences']} sequences")  # fmt: skip
        return
    seq_len, window = args.seq_len[0], args.window[0]
    if args.what == "build":
        from detsamplers.tokens._concat import ConcatOrder
        from detsamplers.tokens._pack import PackOrder

        before = reset_peak()
        start, cpu = time.perf_counter(), time.process_time()
        if args.mode == "pack":
            PackOrder(corpus, seq_len, 0, window, cache=False)
        else:
            ConcatOrder(corpus, 0, window)
        seconds, growth = time.perf_counter() - start, growth_since(before)
        cpu = time.process_time() - cpu
        print(f"{args.mode} index build: {seconds:.3f} s ({cpu:.3f} s of CPU), {growth:.1f} MiB "
              f"over the {before:.1f} MiB before it ({kernel_status()})")  # fmt: skip
        return
    TokenSequences(corpus, seq_len, mode=args.mode, window=window)  # the cached index exists
    started = time.perf_counter()
    sidecar = args.folder / f"web{args.documents}.lengths.npy"
    reopened = TokenCorpus(corpus.paths, dtype="uint16", lengths=[sidecar])
    sequences = TokenSequences(reopened, seq_len, mode=args.mode, window=window)
    opened = time.perf_counter() - started
    loader = DataLoader(sequences, batch_size=8, shuffle=True, seed=0, collate_fn=collate_tokens)
    started = time.perf_counter()
    skip = args.position
    batch = next(iter(loader.get_data_loader(repeat=True, skip_samples=skip)))
    first = time.perf_counter() - started
    print(
        f"{args.mode}: open corpus and index {opened * 1e3:.1f} ms; first batch of 8 after "
        f"a resume at {skip} sequences {first * 1e3:.1f} ms, {tuple(batch['input_ids'].shape)}; "
        f"{kernel_status()}"
    )


if __name__ == "__main__":
    main()
