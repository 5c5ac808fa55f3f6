"""Over S3 and GCS the first blocks of a batch's shards are fetched at once, each pinned.

NOTE [ first blocks of a batch ]: a batch that opens several remote shards (here a batch
of 40 of the session's shards of 3 to 20 samples, so 4 of them) fetched their first
blocks one request after another over S3 and GCS; over HTTP(S) they went at once. The proxy
here delays every shard GET by ``SLOW`` seconds and counts the most in flight at once;
the bucket is versioned and a shard is rewritten after indexing: each concurrent GET
carries the ``VersionId`` (the ``generation``) indexed, so the batch is still the indexed samples.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gcs_server import GCSServer
from s3_server import S3Server
from wds_helpers import COUNTS, PATTERN, ids, make

NAMES = [f"data-{i:06d}.tar" for i in range(len(COUNTS))]


@pytest.mark.parametrize("client", ["obstore", "s3fs"])
def test_a_batch_opening_four_s3_shards_fetches_their_first_blocks_at_once(
    s3: S3Server, shards: str, tmp_path: Path, client: str
) -> None:
    """Through either client (NOTE [ S3 reads through obstore ]; test_wds_s3.py's variants)."""
    options = dict(s3.options)
    if client == "s3fs":
        options["config_kwargs"] = {"max_pool_connections": 10}
    bucket = f"ahead-{client}"
    s3.create_bucket(bucket, versioned=True)
    for name in NAMES:
        s3.put(bucket, f"s/{name}", (Path(shards).parent / name).read_bytes())
    source = make(  # parts=0: no node cache, the reader fetches the shards' blocks
        f"s3://{bucket}/s/{PATTERN}",
        index_dir=str(tmp_path / "index"),
        storage_options=options,
        batch_size=40,
        shuffle_shards=False,
    )
    rewritten = NAMES[1]  # a new version of the same size: the reads keep to the indexed one
    s3.put(bucket, f"s/{rewritten}", bytes(len((Path(shards).parent / rewritten).read_bytes())))
    s3.reset()
    s3.slow = {f"s/{name}" for name in NAMES}
    batch = ids(next(iter(source)))
    assert batch == list(range(40))  # the first 4 shards' samples, in order
    assert s3.most_at_once == 4  # main: 1 (one GetObject after another)
    opened = [f"s/{name}" for name in NAMES[:4]]
    assert [len(s3.served.ranges[key]) for key in opened] == [1, 1, 1, 1]


def test_a_batch_opening_four_gcs_shards_fetches_their_first_blocks_at_once(
    gcs: GCSServer, shards: str, tmp_path: Path
) -> None:
    gcs.create_bucket("ahead")
    for name in NAMES:
        gcs.put("ahead", f"s/{name}", (Path(shards).parent / name).read_bytes())
    source = make(
        f"gs://ahead/s/{PATTERN}",
        index_dir=str(tmp_path / "index"),
        storage_options=gcs.options,
        batch_size=40,
        shuffle_shards=False,
    )
    gcs.reset()
    gcs.slow = {f"s/{name}" for name in NAMES}
    assert ids(next(iter(source))) == list(range(40))
    assert gcs.most_at_once == 4  # main: 1
    assert [len(gcs.served.ranges[f"s/{name}"]) for name in NAMES[:4]] == [1, 1, 1, 1]
    assert all(gcs.generations)  # each download asked for the generation indexed


@pytest.mark.parametrize(("answered_503", "fails"), [(1, False), (2, True)])
def test_a_first_block_fetched_together_is_the_first_of_its_retries_plus_one_attempts(
    s3: S3Server, shards: str, tmp_path: Path, answered_503: int, fails: bool
) -> None:
    """With ``retries=1`` a shard's first block gets 2 requests in all, the one sent with
    the batch's others included (it was a third one, after the shard's own 2)."""
    bucket = f"ahead-retries-{answered_503}"
    s3.create_bucket(bucket)
    for name in NAMES:
        s3.put(bucket, f"s/{name}", (Path(shards).parent / name).read_bytes())
    options = {**s3.options, "config_kwargs": {"max_pool_connections": 10}}  # s3fs's loop
    source = make(
        f"s3://{bucket}/s/{PATTERN}",
        index_dir=str(tmp_path / "index"),
        storage_options=options,
        batch_size=40,
        shuffle_shards=False,
        retries=1,
    )
    s3.reset()
    key = f"s/{NAMES[2]}"
    s3.fail_503[key] = answered_503
    if fails:
        with pytest.raises(OSError, match=rf"{NAMES[2]}.* failed 2 times \(retries=1"):
            next(iter(source))
    else:
        assert ids(next(iter(source))) == list(range(40))
    assert len(s3.served.ranges[key]) == 2
