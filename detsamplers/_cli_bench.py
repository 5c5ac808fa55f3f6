"""``python -m detsamplers bench``: throughput and resume time on the user's own data.

NOTE [ bench ]
Three kinds of input, each measured against what the user would run otherwise:

- a sampler chain (``--len``, ``--world-size``, ``--batch-size``): indices/s of rank 0's
  training chain, and the first batch after a seek deep into an epoch;
- a map-style dataset (``--dataset module:factory``, ``factory()`` returns it): samples/s
  of ``detsamplers.loader.DataLoader`` and of torch's ``DataLoader(shuffle=True)`` with
  0..k workers, and the first batch after a resume at ``--resume-at`` of an epoch (ours
  seeks; torch's replays its sampler to the same sample, as torchdata's
  ``StatefulDataLoader`` does);
- shard URLs (``--shards``, local paths or fsspec URLs): samples/s of a
  ``WebDataLoader`` over a ``WebDatasetSource`` and, where webdataset is installed, of a
  plain ``webdataset.WebDataset`` pipeline, with 0..k workers, the first batch after a
  resume, and the bytes read. That pipeline shuffles nothing, so its exact resume is a
  restart at the shard holding the sample, skipping the samples before it in that shard
  (no replay of earlier shards); ours seeks to the sample.

Each cell times ``--batches`` batches after the first (whose time, worker start-up
included, is reported apart), with the same bare loop the scripts in ``benchmarks/``
use: the progress bar advances per cell, never per batch, so it adds no cost to the
rates measured. "bytes read" is measured over a cell with ``num_workers=0``: the
``rchar`` of ``/proc/self/io`` (Linux: what the process read from files and pipes, cache
hits included) plus the bytes its sockets received (remote shards over fsspec; counted by
wrapping ``socket.socket.recv``/``recv_into`` during the cell, as ``rchar`` leaves sockets
out). ``--json`` prints the rows for CI.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import islice
from typing import Any

from ._cli_spec import load_callable

__all__ = ["add_parser", "run"]


def _rchar() -> int | None:
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


@contextlib.contextmanager
def _counted_sockets() -> Iterator[list[int]]:
    """Count the bytes this process's sockets receive (remote shards; not in ``rchar``)."""
    import socket

    counted = [0]
    originals = socket.socket.recv, socket.socket.recv_into

    def recv(self: socket.socket, *args: Any) -> bytes:
        data = originals[0](self, *args)
        counted[0] += len(data)
        return data

    def recv_into(self: socket.socket, *args: Any) -> int:
        size = originals[1](self, *args)
        counted[0] += size
        return size

    # socket.socket is a Python subclass of the C type: its methods can be swapped.
    cls: Any = socket.socket
    cls.recv, cls.recv_into = recv, recv_into
    try:
        yield counted
    finally:
        cls.recv, cls.recv_into = originals


def _records(batch: Any) -> int:
    from .testing._compare import records_of

    size = records_of(batch)
    return 1 if size is None else size


def _counter(first: Any) -> Callable[[Any], int]:
    """How to count a batch's records, chosen once from the first: per batch it is a len()."""
    import torch

    if isinstance(first, torch.Tensor) and first.ndim:
        return len
    if isinstance(first, list) and first and not isinstance(first[0], (list, tuple, dict)):
        return len  # indices from a sampler chain, or a list of plain values
    return _records


def measure(
    make: Callable[[], Iterable[Any]], batches: int, bytes_read: bool = False
) -> dict[str, Any]:
    """Time the first batch of ``make()``, then ``batches`` more: the bare loop of benchmarks/."""
    with contextlib.ExitStack() as stack:
        sockets = stack.enter_context(_counted_sockets()) if bytes_read else None
        row = _measure(make, batches, bytes_read)
    if sockets is not None and "bytes_read" in row:
        row["bytes_read"] += sockets[0]
    return row


def _measure(make: Callable[[], Iterable[Any]], batches: int, bytes_read: bool) -> dict[str, Any]:
    before = _rchar() if bytes_read else None
    started = time.perf_counter()
    iterator: Iterator[Any] = iter(make())
    first = next(iterator)
    first_at = time.perf_counter()
    records = _counter(first)
    samples = 0
    count = 0
    for batch in islice(iterator, batches):
        samples += records(batch)
        count += 1
    ended = time.perf_counter()
    after = _rchar() if bytes_read else None
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()
    seconds = ended - first_at
    row: dict[str, Any] = {
        "first_batch_s": first_at - started,
        "batches": count,
        "samples": samples,
        "seconds": seconds,
        "samples_per_s": samples / seconds if seconds > 0 else None,
        "first_records": records(first),
    }
    if before is not None and after is not None:
        row["bytes_read"] = after - before
    return row


Cells = list[tuple[str, Callable[[], dict[str, Any]]]]


def _cell(make: Callable[[], Iterable[Any]], batches: int, bytes_read: bool = False) -> Any:
    return partial(measure, make, batches, bytes_read)


def _chain_cells(args: argparse.Namespace) -> Cells:
    from . import make_batch_sampler

    n, world, size = args.len, args.world_size, args.batch_size
    deep = int(n * args.resume_at) // (size * world) * (size * world)

    def chain(skip_samples: int = 0) -> Any:
        return make_batch_sampler(
            range(n), "training", args.seed, world, 0, size, skip_samples=skip_samples
        )

    return [
        (f"chain len={n} W={world} B={size}: indices/s", _cell(chain, args.batches or 5000)),
        (f"chain: first batch after a seek to sample {deep}", _cell(partial(chain, deep), 0)),
    ]


def _ours(dataset: Any, size: int, seed: int, workers: int, skip: int = 0) -> Any:
    from .loader import DataLoader

    loader = DataLoader(dataset, batch_size=size, shuffle=True, seed=seed, num_workers=workers)
    return loader.get_data_loader(repeat=True, skip_samples=skip)


def _torchs(dataset: Any, size: int, seed: int, workers: int) -> Any:
    import torch
    import torch.utils.data as tud

    generator = torch.Generator().manual_seed(seed)
    return tud.DataLoader(
        dataset, batch_size=size, shuffle=True, num_workers=workers, generator=generator
    )


def _torch_replayed(dataset: Any, size: int, seed: int, deep: int) -> Any:
    import torch.utils.data as tud

    loader = _torchs(dataset, size, seed, 0)
    batches = iter(loader.batch_sampler)
    for _ in range(deep // size):
        next(batches)
    return [tud.default_collate([dataset[i] for i in next(batches)])]


def _dataset_cells(args: argparse.Namespace) -> Cells:
    dataset = load_callable(args.dataset, "--dataset", noun="factory")()
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise ValueError(
            f"--dataset should build a map-style dataset (__len__ and __getitem__), but "
            f"{args.dataset} returned {type(dataset).__name__}"
        )
    n, size, seed, batches = len(dataset), args.batch_size, args.seed, args.batches or 50
    deep = int(n * args.resume_at) // size * size
    cells: Cells = []
    for w in range(args.workers + 1):
        cells.append(
            (
                f"detsamplers DataLoader, num_workers={w}: samples/s",
                _cell(partial(_ours, dataset, size, seed, w), batches, w == 0),
            )
        )
        cells.append(
            (
                f"torch DataLoader(shuffle=True), num_workers={w}: samples/s",
                _cell(partial(_torchs, dataset, size, seed, w), batches, w == 0),
            )
        )
    cells.append(
        (
            f"detsamplers: first batch after a resume at sample {deep}",
            _cell(partial(_ours, dataset, size, seed, 0, deep), 0),
        )
    )
    cells.append(
        (
            f"torch: first batch after replaying its sampler to sample {deep}",
            _cell(partial(_torch_replayed, dataset, size, seed, deep), 0),
        )
    )
    return cells


def _source(urls: Any, seed: int, size: int, **kwargs: Any) -> Any:
    from .loader import WebDatasetSource

    return WebDatasetSource(urls, seed=seed, batch_size=size, decode=(), **kwargs)


def _web_loader(urls: Any, seed: int, size: int, workers: int) -> Any:
    from .loader import WebDataLoader

    return WebDataLoader(_source(urls, seed, size, repeat=True), num_workers=workers)


def _plain(wds: Any, urls: Any, size: int, workers: int) -> Any:
    from torch.utils.data import DataLoader, default_collate

    pipeline = (
        wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        .repeat()
        .batched(size, collation_fn=default_collate)
    )
    return DataLoader(pipeline, batch_size=None, num_workers=workers)


def _plain_resumed(wds: Any, shards: Any, size: int, deep: int) -> Any:
    """Plain webdataset resumed exactly at sample ``deep``: what its user would write.

    The plain pipeline shuffles neither shards nor samples, so sample ``deep`` is a known
    shard's sample: the URL list starts at that shard and ``.slice`` skips the samples
    before it in the shard (the shards' sample counts are the user's bookkeeping; here
    they come from our index).
    """
    from torch.utils.data import default_collate

    shard, skip = 0, deep
    while skip >= len(shards[shard]):
        skip -= len(shards[shard])
        shard += 1
    urls = [info.url for info in shards[shard:]]
    pipeline = wds.WebDataset(urls, shardshuffle=False, empty_check=False).slice(skip, None)
    return iter(pipeline.batched(size, collation_fn=default_collate))


def _shard_cells(args: argparse.Namespace) -> Cells:
    urls = args.shards if len(args.shards) > 1 else args.shards[0]
    size, seed, batches = args.batch_size, args.seed, args.batches or 50
    source = _source(urls, seed, size, repeat=False)
    n = source.num_samples
    deep = int(n * args.resume_at) // size * size
    try:
        wds: Any = importlib.import_module("webdataset")
    except ImportError:
        wds = None
    cells: Cells = []
    for w in range(args.workers + 1):
        cells.append(
            (
                f"WebDatasetSource, num_workers={w}: samples/s",
                _cell(partial(_web_loader, urls, seed, size, w), batches, w == 0),
            )
        )
        if wds is not None:
            cells.append(
                (
                    f"webdataset.WebDataset, num_workers={w}: samples/s",
                    _cell(partial(_plain, wds, urls, size, w), batches, w == 0),
                )
            )
    resumed = partial(_source, urls, seed, size, repeat=True, skip_samples=deep)
    cells.append((f"WebDatasetSource: first batch after a resume at sample {deep}",
                  _cell(resumed, 0, True)))  # fmt: skip
    if wds is not None:
        resumed_plain = partial(_plain_resumed, wds, source.shards, size, deep)
        cells.append((f"webdataset: first batch after a restart at sample {deep}",
                      _cell(resumed_plain, 0, True)))  # fmt: skip
    return cells


def add_parser(commands: Any) -> None:
    """Add the ``bench`` command to the CLI's subparsers."""
    bench = commands.add_parser(
        "bench",
        help="samples/s and resume time of a sampler chain, your dataset or your shards",
        description="Measure a sampler chain (--len), a map-style dataset (--dataset "
        "module:factory) or webdataset shards (--shards URL...): samples/s with 0..k "
        "workers, the first batch after a resume deep in an epoch, bytes read, and the "
        "peer (torch's DataLoader, plain webdataset) on the same data.",
    )
    what = bench.add_mutually_exclusive_group()
    what.add_argument("--len", type=int, default=None, help="records of a sampler chain")
    what.add_argument("--dataset", default=None, help="module:factory building a dataset")
    what.add_argument("--shards", nargs="+", default=None, help="shard paths or URLs")
    bench.add_argument("--world-size", type=int, default=1, help="ranks of the chain (1)")
    bench.add_argument("--batch-size", type=int, default=32, help="records per batch (32)")
    bench.add_argument("--workers", type=int, default=2, help="measure 0..k workers (2)")
    bench.add_argument(
        "--batches", type=int, default=None, help="batches timed per cell (50; 5000 for a chain)"
    )
    bench.add_argument("--resume-at", type=float, default=0.9, help="fraction of an epoch (0.9)")
    bench.add_argument("--seed", type=int, default=0, help="shuffle seed (0)")
    bench.add_argument("--json", action="store_true", help="print JSON rows")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.len is None and args.dataset is None and args.shards is None:
        parser.error("bench needs --len N, --dataset module:factory or --shards URL...")
    for name, minimum in (("len", 1), ("world_size", 1), ("batch_size", 1), ("workers", 0),
                          ("batches", 1)):  # fmt: skip
        value = getattr(args, name)
        if value is not None and value < minimum:
            option = "--" + name.replace("_", "-")
            parser.error(f"{option} should be at least {minimum}, but got {value}")
    if not 0 <= args.resume_at < 1:
        parser.error(f"--resume-at should be a fraction in [0, 1), but got {args.resume_at}")


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'measurement':<66} {'samples/s':>12} {'first batch':>12} {'bytes read':>12}"]
    for row in rows:
        rate = row.get("samples_per_s")
        rate_text = f"{rate:,.0f}" if rate is not None and row["batches"] else "-"
        read = row.get("bytes_read")
        lines.append(
            f"{row['name']:<66} {rate_text:>12} {row['first_batch_s'] * 1e3:>10.1f}ms "
            f"{'-' if read is None else f'{read:,}':>12}"
        )
    return "\n".join(lines)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run ``bench``; the exit status (2 for a usage error, 1 for a failed measurement)."""
    _check(parser, args)
    tqdm = importlib.import_module("tqdm").tqdm  # tqdm ships no type stubs

    try:
        if args.len is not None:
            cells = _chain_cells(args)
        elif args.dataset is not None:
            cells = _dataset_cells(args)
        else:
            cells = _shard_cells(args)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    except (OSError, ImportError) as error:
        print(f"bench failed: {error}", file=sys.stderr)
        return 1
    rows = []
    with contextlib.suppress(Exception):  # the timed run below reports a failure
        cells[0][1]()  # warm-up, untimed: the first cell's code paths, imports and caches
    progress = tqdm(cells, desc="bench", unit="cell", file=sys.stderr,
                    disable=args.no_progress or None, leave=False)  # fmt: skip
    for name, cell in progress:
        progress.set_postfix_str(name.split(":")[0][:40])
        try:
            row = cell()
        except Exception as error:  # the user's dataset or shards failed: name the cell
            progress.close()
            print(f"bench failed in '{name}': {type(error).__name__}: {error}", file=sys.stderr)
            return 1
        rows.append({"name": name, **row})
    progress.close()
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
    else:
        print(_table(rows))
    return 0
