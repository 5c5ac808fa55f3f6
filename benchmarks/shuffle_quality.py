"""Shuffle quality: detsamplers' keyed permutation next to numpy's uniform permutation.

Run ``python benchmarks/shuffle_quality.py`` (about a minute here) or ``--quick`` (a few
seconds). It prints, for the default ``"feistel"`` permutation and for
``numpy.random.Generator.permutation`` over the same seeds:

- positional chi-square: over many seeds, how often record ``v`` lands at position ``p``.
  Each cell count is Binomial(seeds, 1/n), so a uniform shuffle gives a statistic with
  mean ``n (n - 1)`` (``expected`` column). Large n is bucketed into 32 x 32 cells of
  (position, value), mean ``(32 - 1)**2`` roughly;
- lag-1 chi-square: the 16 x 16 table of (bucket of record i, bucket of record i + 1),
  which catches local structure (mean about 225 for a uniform shuffle);
- adjacent-pair correlation: Pearson correlation of record i with record i + 1, averaged
  over seeds (0 for a uniform shuffle, standard error about ``1 / sqrt(n)``).
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from detsamplers._permute import FeistelPermutation

Shuffle = Callable[[int, int], npt.NDArray[np.int64]]


def feistel(n: int, seed: int) -> npt.NDArray[np.int64]:
    return FeistelPermutation(n, seed)(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64))


def numpy_uniform(n: int, seed: int) -> npt.NDArray[np.int64]:
    return np.random.default_rng(seed).permutation(n).astype(np.int64)


def positional_chi2(shuffle: Shuffle, n: int, seeds: int) -> float:
    counts = np.zeros((n, n))
    for seed in range(seeds):
        counts[np.arange(n), shuffle(n, seed)] += 1
    expected = seeds / n
    return float(((counts - expected) ** 2 / expected).sum())


def bucketed_chi2(shuffle: Shuffle, n: int, seeds: int, buckets: int = 32) -> float:
    counts = np.zeros((buckets, buckets))
    position_bucket = (np.arange(n) * buckets) // n
    for seed in range(seeds):
        np.add.at(counts, (position_bucket, (shuffle(n, seed) * buckets) // n), 1)
    sizes = np.bincount(position_bucket, minlength=buckets).astype(float)
    expected = np.outer(sizes, sizes) / n * seeds
    return float(((counts - expected) ** 2 / expected).sum())


def lag1_chi2(shuffle: Shuffle, n: int, seeds: int, buckets: int = 16) -> float:
    counts = np.zeros((buckets, buckets))
    for seed in range(seeds):
        bucket = (shuffle(n, seed) * buckets) // n
        np.add.at(counts, (bucket[:-1], bucket[1:]), 1)
    expected = counts.sum() / buckets**2
    return float(((counts - expected) ** 2 / expected).sum())


def adjacent_correlation(shuffle: Shuffle, n: int, seeds: int) -> float:
    values = [shuffle(n, seed).astype(float) for seed in range(seeds)]
    return float(np.mean([np.corrcoef(v[:-1], v[1:])[0, 1] for v in values]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds and sizes")
    args = parser.parse_args()
    small_seeds, large_seeds = (2000, 10) if args.quick else (20000, 100)
    small = (3, 7) if args.quick else (2, 3, 7, 16, 100)
    large = (70_000,) if args.quick else (70_000, 600_000, 1_000_003)
    print(
        f"# machine: {platform.platform()}, {platform.machine()},"
        f" python {platform.python_version()}, numpy {np.__version__}"
    )
    print(f"\npositional chi-square over {small_seeds} seeds (uniform: mean n (n - 1))")
    print(f"{'n':>8} {'expected':>9} {'feistel':>9} {'numpy':>9}")
    for n in small:
        f, u = (
            positional_chi2(feistel, n, small_seeds),
            positional_chi2(numpy_uniform, n, small_seeds),
        )
        print(f"{n:>8} {n * (n - 1):>9} {f:>9.0f} {u:>9.0f}")
    print(
        f"\nlarge n over {large_seeds} seeds: bucketed positional chi-square (32 x 32, mean ~961),"
        f" lag-1 chi-square (16 x 16, {max(2, large_seeds // 5)} seeds, mean ~225),"
        " adjacent-pair correlation"
    )
    header = (
        f"{'n':>10} {'pos feistel':>12} {'pos numpy':>10} {'lag1 feistel':>13} {'lag1 numpy':>11}"
    )
    print(f"{header} {'corr feistel':>13} {'corr numpy':>11}")
    for n in large:
        lag_seeds = max(2, large_seeds // 5)
        print(
            f"{n:>10} {bucketed_chi2(feistel, n, large_seeds):>12.0f}"
            f" {bucketed_chi2(numpy_uniform, n, large_seeds):>10.0f}"
            f" {lag1_chi2(feistel, n, lag_seeds):>13.0f}"
            f" {lag1_chi2(numpy_uniform, n, lag_seeds):>11.0f}"
            f" {adjacent_correlation(feistel, n, lag_seeds):>+13.5f}"
            f" {adjacent_correlation(numpy_uniform, n, lag_seeds):>+11.5f}"
        )


if __name__ == "__main__":
    main()
