"""What a sample costs on disk: webdataset tars (plain and packed) against MDS and litdata.

Run ``python benchmarks/shard_bytes_table.py`` (``--quick``: 1,024 samples a dataset). It
writes the same samples in each format into a temporary folder and prints the bytes per
sample of the shard files and, apart, of their index files:

- ``webdataset.ShardWriter`` (the plain tar layout: one member per field);
- ours, ``detsamplers.loader.ShardWriter`` with ``pack_small`` unset (the same tar bytes),
  with a whole-second ``mtime`` (no pax record a member), and with ``pack_small=1024`` and
  ``pack_small=2**31`` (every field in one member; NOTE [ packed small fields ]);
- litdata's ``optimize`` (chunks of ``per_shard`` samples) and Mosaic's ``MDSWriter``
  (``size_limit`` for about ``per_shard`` samples), each if importable. Mosaic runs in
  ``.venv-mosaic`` (``make mosaic``), or in the interpreter ``--mosaic-python`` names.

Two datasets: the shard questions' sample (a 71-byte PNG and a label, ``harness.samples``)
and the S3 table's (2-8 KB of random bytes and a label, ``s3_peers_table.samples``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
MOSAIC_PYTHON = ROOT / ".venv-mosaic" / "bin" / "python"

Sample = dict[str, Any]


def tiny(total: int) -> list[Sample]:
    from harness.samples import PNG

    return [{"png": PNG, "cls": i} for i in range(total)]


def payload(total: int) -> list[Sample]:
    rng = random.Random(0)
    return [{"bin": rng.randbytes(rng.randint(2048, 8192)), "cls": i} for i in range(total)]


DATASETS: dict[str, Callable[[int], list[Sample]]] = {
    "71-byte PNG + label": tiny,
    "2-8 KB bytes + label": payload,
}


def _sizes(folder: Path, data: str, index: str) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return (
        sum(p.stat().st_size for p in files if p.name.endswith(data)),
        sum(p.stat().st_size for p in files if p.name.endswith(index)),
    )


def write_webdataset(folder: Path, samples: list[Sample], per_shard: int) -> tuple[int, int]:
    import webdataset as wds

    folder.mkdir()
    with wds.ShardWriter(str(folder / "d-%06d.tar"), maxcount=per_shard, verbose=0) as sink:
        for i, sample in enumerate(samples):
            sink.write({"__key__": f"k{i:08d}", **sample})
    return _sizes(folder, ".tar", ".index.npz")


def write_ours(folder: Path, samples: list[Sample], per_shard: int, **kw: Any) -> tuple[int, int]:
    from detsamplers.loader import ShardWriter

    folder.mkdir()
    with ShardWriter(str(folder / "d-%06d.tar"), maxcount=per_shard, verbose=0, **kw) as sink:
        for i, sample in enumerate(samples):
            sink.write({"__key__": f"k{i:08d}", **sample})
    return _sizes(folder, ".tar", ".index.npz")


def write_litdata(folder: Path, samples: list[Sample], per_shard: int) -> tuple[int, int]:
    import litdata

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        litdata.optimize(
            fn=_identity,
            inputs=samples,
            output_dir=str(folder),
            chunk_size=per_shard,
            num_workers=1,
            verbose=False,
        )
    return _sizes(folder, ".bin", ".json")


def _identity(sample: Sample) -> Sample:
    return sample


def write_mds(folder: Path, dataset: str, total: int, per_shard: int) -> Any:
    """MDS shards, written in this process if it has mosaicml-streaming (``--write-mds``)."""
    base = __import__("peers.mosaic_streaming", fromlist=["x"]).streaming_base()
    samples = DATASETS[dataset](total)
    field = next(name for name in samples[0] if name != "cls")
    limit = 1 + max(8 + len(s[field]) + 8 for s in samples) * per_shard
    columns = {field: "bytes", "cls": "int"}
    with base.MDSWriter(out=str(folder), columns=columns, size_limit=limit) as sink:
        for sample in samples:
            sink.write(sample)
    return _sizes(folder, ".mds", ".json")


def mds_elsewhere(folder: Path, dataset: str, total: int, per_shard: int, python: Path) -> Any:
    """:func:`write_mds` in the interpreter ``python`` (Mosaic's own venv)."""
    out = subprocess.run(
        [python, __file__, "--write-mds", str(folder), dataset, str(total), str(per_shard)],
        capture_output=True,
        text=True,
        check=True,
    )
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--mosaic-python", type=Path, default=MOSAIC_PYTHON)
    parser.add_argument("--write-mds", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_mds:
        folder, dataset, total, per_shard = args.write_mds
        print(json.dumps(write_mds(Path(folder), dataset, int(total), int(per_shard))))
        return
    total, per_shard = (1024, 256) if args.quick else (8192, 256)
    print(f"# {total} samples a dataset, {per_shard} a shard; bytes per sample (index apart)")
    print("| dataset | format | shard bytes / sample | index bytes / sample | vs MDS |")
    print("|---|---|---|---|---|")
    for dataset, make in DATASETS.items():
        samples = make(total)
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            rows: dict[str, Any] = {}
            try:
                rows["MDS (mosaicml-streaming)"] = write_mds(
                    root / "mds", dataset, total, per_shard
                )
            except ModuleNotFoundError:
                if args.mosaic_python.exists():
                    rows["MDS (mosaicml-streaming)"] = mds_elsewhere(
                        root / "mds", dataset, total, per_shard, args.mosaic_python
                    )
            with contextlib.suppress(ModuleNotFoundError):
                rows["litdata chunks"] = write_litdata(root / "litdata", samples, per_shard)
            rows["webdataset tar"] = write_webdataset(root / "wds", samples, per_shard)
            rows["ours, tar"] = write_ours(root / "ours", samples, per_shard)
            rows["ours, tar, mtime=1_700_000_000"] = write_ours(
                root / "ours-mtime", samples, per_shard, mtime=1_700_000_000
            )
            for small in (1024, 2**31):
                rows[f"ours, tar, pack_small={small if small < 2**31 else '2**31'}"] = write_ours(
                    root / f"ours-{small}", samples, per_shard, pack_small=small
                )
            base = rows.get("MDS (mosaicml-streaming)", rows.get("litdata chunks"))
            for name, (data, index) in rows.items():
                ratio = f"{data / base[0]:.2f}x" if base else "-"
                print(
                    f"| {dataset} | {name} | {data / total:,.0f} | {index / total:,.1f} | {ratio} |"
                )


if __name__ == "__main__":
    main()
