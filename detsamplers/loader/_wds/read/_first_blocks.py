"""A batch's first blocks of its remote shards, fetched at once.

NOTE [ first blocks of a batch ]
A reader reads a batch's samples shard after shard (NOTE [ runs of samples ]); each remote
shard it opens costs a first block (NOTE [ remote reads ]), one request that waited for
the one before. A batch that opens several remote shards (the first batch after a resume,
which crosses a shard boundary or reads a part of each of several shards; a window shuffle
that visits several) waited for their round trips one after the other. So before reading,
the reader finds the shards of the batch it will open, and fetches the first block of each,
the block its first read would fetch, the same bytes in the same requests, all at once:
up to ``AHEAD`` of them, as concurrent requests on the filesystem's event loop (no thread
of ours): HTTP(S) GETs, and S3 ``GetObject``s and GCS media GETs pinned as every read of
theirs is (``IfMatch``/``VersionId``, the generation: NOTE [ object storage ]), each one
attempt, a failed one the first of the ``retries + 1`` that the shard's own read then
makes, with its timeout. S3 read through obstore (NOTE [ S3 reads through obstore ]),
whose calls block, goes on a thread per shard instead, each its whole read with retries;
other filesystems one after the other. A shard still open from the batch before, which
continues its kept block, is not fetched again; a batch
that opens one shard fetches it as before. A mixture (NOTE [ mixture readers ]) reads each
set with its own reader, so each set's reader opens its shards of the batch
(``open_batch``), the first blocks of every set are fetched in one go, and then each set
reads (``read_opened``): a resume of a mixture of S sets waits one round trip, not S. The
``AHEAD`` shards are shared among the batch's sets, ``AHEAD // S`` each (at least one, for
the first ``AHEAD`` sets); a set's shards past its share are fetched when read. Memory: at
most ``AHEAD`` first blocks (256 KiB each by default, or the sample if larger; with a window
shuffle, the window: NOTE [ remote windows ]) held until the reader reaches their shards.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from ..index._shard_index_file import resolved
from ..remote._remote_reads import RemoteShard
from ..shard._shard_info import ShardInfo
from ..shard._tar_walk import BLOCK

__all__ = ["AHEAD", "fetch_first_blocks"]

#: Remote shards of one batch whose first blocks are fetched at once.
AHEAD = 8


def fetch_first_blocks(jobs: Sequence[tuple[RemoteShard, ShardInfo, int]]) -> None:
    """Fill each new stream with the first block its sample ``index`` needs, at once.

    Over HTTP(S), S3 and GCS the requests go out together on the filesystem's event loop
    (one call, no thread); a request that fails there is the first of the ``retries + 1``
    attempts :meth:`RemoteShard.fill` then makes, with its errors. S3 read through
    obstore, whose calls block, is filled on a thread per shard at once (up to
    ``AHEAD``), each with its retries. Other filesystems are filled one by one.

    Args:
        jobs: ``(stream, shard info, sample index)``: a stream of the shard opened but not
            read yet, and the first sample the reader will read from it.
    """
    spans = []
    for stream, info, index in jobs:
        members = resolved(info.members)[index]
        start = min(m[1] for m in members) if members else 0
        end = max(m[1] + m[2] for m in members) if members else 0
        start = max(0, start - BLOCK) if members else 0  # with its header (NOTE [ set index ])
        spans.append((stream, start, min(stream.size, max(end, start + stream.block))))
    failed: dict[int, BaseException] = {}
    loops = [getattr(stream.fs, "loop", None) for stream, _, _ in spans]
    loop = next((each for each in loops if each is not None), None)
    together = [s for s, each in zip(spans, loops, strict=True) if each is loop]
    if loop is not None and len(together) > 1:
        from fsspec.asyn import sync

        received = [bytearray() for _ in together]
        got = sync(loop, _get_all, together, received)
        for (stream, start, stop), error, data in zip(together, got, received, strict=True):
            if error is None and len(data) == stop - start:
                stream.keep(start, bytes(data))
            elif error is not None and not isinstance(error, NotImplementedError):
                failed[id(stream)] = error  # the first of its retries + 1 attempts
    rest = [span for span in spans if not span[0].blocks]
    threaded = [span for span in rest if span[0].through_obstore()]
    if len(threaded) > 1:  # obstore's calls block: one thread each, with its retries
        with ThreadPoolExecutor(len(threaded), thread_name_prefix="first-blocks") as pool:
            list(pool.map(lambda span: span[0].fill(span[1], span[2]), threaded))
    for stream, start, stop in rest:
        if not stream.blocks:  # not fetched together: alone, with the retries left
            stream.fill(start, stop, failed.get(id(stream)))


async def _get_all(
    spans: Sequence[tuple[RemoteShard, int, int]], received: Sequence[bytearray]
) -> list[BaseException | None]:
    """One attempt at each span's ranged GET, concurrently; each one's error or ``None``.

    A span whose filesystem makes no such attempt gets a ``NotImplementedError`` (it is
    then filled alone).
    """

    async def nothing() -> None:
        raise NotImplementedError

    attempts = [
        stream.attempt(start, stop, data) or nothing()
        for (stream, start, stop), data in zip(spans, received, strict=True)
    ]
    return list(await asyncio.gather(*attempts, return_exceptions=True))
