"""The first batch after a resume at 1e10 tokens, in ``chunk`` and ``concat``, per epoch.

    PYTHONPATH=. python benchmarks/tokens_epoch_resume.py --folder /tmp/x [--documents 1e7]

Writes (or reuses) the corpus of ``benchmarks/tokens_index.py`` (lognormal document
lengths, mean ``--mean``), then, ``--repeats`` times with a new seed each (so each run
builds its own epoch index and blocks): a fresh ``TokenSequences`` and ``DataLoader``, and
the time to the first batch of 8 sequences of ``--seq-len`` tokens resumed after 1e10
tokens (``skip_samples``; nothing replayed). It prints the median and the minimum wall
time and the median CPU time of this process: on a shared machine the minimum and the CPU
time are the cost, the median the cost plus the neighbours. The same
run times the parts of a ``concat`` batch: the epoch's index, the batch's blocks built one
call each (the earlier path) against one vectorised call (``ConcatOrder.prepare``), and
the sequences read from built blocks.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tokens_index import write

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens

RESUME_TOKENS = 10**10


def timed(run: Callable[[int], object], repeats: int) -> tuple[float, float, float]:
    """Median and minimum wall milliseconds of ``run(i)`` for ``i < repeats``, and the
    median CPU milliseconds of this process (what the neighbours cannot inflate)."""
    times, cpu = [], []
    for i in range(repeats):
        started, used = time.perf_counter(), time.process_time()
        run(i)
        times.append((time.perf_counter() - started) * 1e3)
        cpu.append((time.process_time() - used) * 1e3)
    return statistics.median(times), min(times), statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=float, default=1e7)
    parser.add_argument("--mean", type=float, default=64.0)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--folder", type=Path, required=True)
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    path = args.folder / "corpus.bin"
    if not path.exists():
        write(path, int(args.documents), args.mean)
    corpus = TokenCorpus(path, dtype="uint16", eod_id=0, progress=False)
    skip = RESUME_TOKENS // (args.seq_len + 1)
    print(f"{corpus.num_documents} documents, {corpus.num_tokens:.3e} tokens, L = {args.seq_len}, "
          f"resume at sample {skip}; median / min of {args.repeats} runs")  # fmt: skip
    for mode in ("chunk", "concat"):
        # Built before the clock starts, as tokens_index.py does (the concat order's
        # epoch 0 index is built then; the resumed epoch's is inside the timing).
        built = [TokenSequences(corpus, args.seq_len, mode=mode, seed=seed)
                 for seed in range(args.repeats)]  # fmt: skip

        def first(seed: int, built: list[TokenSequences] = built) -> object:
            loader = DataLoader(built[seed], batch_size=8, shuffle=True, seed=seed,
                                collate_fn=collate_tokens)  # fmt: skip
            return next(iter(loader.get_data_loader(repeat=True, skip_samples=skip)))

        median, low, cpu = timed(first, args.repeats)
        print(f"{mode}: first batch of 8 after 1e10 tokens: {median:.1f} / {low:.1f} ms, "
              f"CPU {cpu:.1f} ms")  # fmt: skip
    sequences = [TokenSequences(corpus, args.seq_len, mode="concat", seed=100 + i)
                 for i in range(args.repeats)]  # fmt: skip
    width = args.seq_len + 1
    picks = np.random.default_rng(0).integers(0, len(sequences[0]), size=(args.repeats, 8))
    epoch = skip // len(sequences[0])
    windows = [[(k * width, (k + 1) * width, epoch) for k in row.tolist()] for row in picks]
    orders = [s._concat for s in sequences]
    assert all(order is not None for order in orders)
    median, low, cpu = timed(lambda i: orders[i].index(epoch), args.repeats)  # type: ignore[union-attr]
    print(f"concat: index of epoch {epoch} ({len(orders[0]._totals)} blocks): "  # type: ignore[union-attr]
          f"{median:.2f} / {low:.2f} ms, CPU {cpu:.2f} ms")  # fmt: skip

    def one_by_one(i: int) -> None:
        order = orders[i]
        assert order is not None
        order._cache.clear()
        for start, stop, e in windows[i]:
            order.pieces(start, stop, e)

    def at_once(i: int) -> None:
        order = orders[i]
        assert order is not None
        order._cache.clear()
        order.prepare(windows[i])

    median, low, cpu = timed(one_by_one, args.repeats)
    print(f"concat: a batch's blocks, one call each (and located): {median:.2f} / {low:.2f} ms, "
          f"CPU {cpu:.2f} ms")  # fmt: skip
    median, low, cpu = timed(at_once, args.repeats)
    print(f"concat: a batch's blocks, one vectorised call: {median:.2f} / {low:.2f} ms, "
          f"CPU {cpu:.2f} ms")  # fmt: skip
    pairs = [[(epoch, int(k)) for k in row] for row in picks]
    median, low, cpu = timed(lambda i: sequences[i].getitems_in_epochs(pairs[i]), args.repeats)
    print(
        f"concat: 8 sequences read from built blocks: {median:.2f} / {low:.2f} ms, CPU {cpu:.2f} ms"
    )


if __name__ == "__main__":
    main()
