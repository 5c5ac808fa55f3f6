"""``pack_small`` shards in S3, read the way jobs read them (NOTE [ packed small fields ]).

The packed member is split after the read, wherever the shard lives: the same samples, in the
same order, as the plain shards on disk, over S3 by ranges (``cache_dir=False``) and through
the node cache (``parts``), with no worker and with 2 DataLoader workers; and the packed
shards' bytes, not more, are what the server sends.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server

from detsamplers.__main__ import main
from detsamplers.loader import ShardWriter, WebDataLoader, WebDatasetSource

pytestmark = pytest.mark.servers

BUCKET = "packed-remote"
_META = ("__url__", "__local_path__")


def _write(folder: Path, **options: Any) -> list[Path]:
    folder.mkdir(parents=True)
    with ShardWriter(str(folder / "s-%d.tar"), maxcount=6, verbose=0, mtime=1e9, **options) as sink:
        for i in range(30):
            sink.write(
                {
                    "__key__": f"k{i:03d}",
                    "cls": i,
                    "txt": "x" * (i * 37 % 700),
                    "png": bytes([i]) * 900,
                }
            )
    return sorted(folder.glob("s-*.tar"))


def _samples(batches: Iterable[list[dict[str, Any]]]) -> list[list[tuple[str, Any]]]:
    return [[(k, v) for k, v in s.items() if k not in _META] for b in batches for s in b]


@pytest.mark.workers
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    "options", [{"cache_dir": False, "shuffle_window": 4}, {"parts": 4}], ids=["ranges", "cache"]
)
def test_packed_shards_in_s3_read_as_the_plain_shards_on_disk(
    s3: S3Server, tmp_path: Path, options: dict[str, Any], workers: int
) -> None:
    plain = _write(tmp_path / "plain")
    packed = _write(tmp_path / "packed", pack_small=2**31)
    prefix = f"{options.get('parts', 0)}-{workers}"
    s3.create_bucket(BUCKET)
    for path in packed:
        s3.put(BUCKET, f"{prefix}/{path.name}", path.read_bytes())
    urls = f"s3://{BUCKET}/{prefix}/s-{{0..{len(packed) - 1}}}.tar"
    argv = ["index", urls, "--endpoint-url", s3.endpoint, "--storage-option", "key=testing"]
    assert main([*argv, "--storage-option", "secret=testing"]) == 0
    s3.reset()
    common: dict[str, Any] = {"seed": 3, "batch_size": 4, "repeat": False, "collate_fn": list}
    local = {k: v for k, v in options.items() if k != "cache_dir"}
    want = _samples(WebDatasetSource(str(tmp_path / "plain" / "s-{0..4}.tar"), **common, **local))
    if "cache_dir" not in options:
        options = {**options, "cache_dir": str(tmp_path / "cache")}
    source = WebDatasetSource(urls, storage_options=s3.options, **common, **options)
    got = _samples(WebDataLoader(source, num_workers=workers) if workers else source)
    assert got == want and len(got) == 30
    assert all("packed_fields.msgpack" not in dict(sample) for sample in got)
    sent = sum(s3.served.bytes[k] for k in s3.served.ranges if k.endswith(".tar"))
    packed_bytes = sum(p.stat().st_size for p in packed)
    assert packed_bytes < sum(p.stat().st_size for p in plain)
    assert sent <= (1 + workers) * packed_bytes  # each worker at most the shards once
