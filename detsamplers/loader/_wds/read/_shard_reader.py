"""``ShardReader``: read indexed samples from local or remote shards, one open shard at a time."""

from __future__ import annotations

import bisect
import io
import urllib.parse
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any, BinaryIO, cast

from ...._native import kernel
from ..index._shard_index_file import resolved
from ..remote._remote_reads import RemoteOptions, RemoteShard, ShardChangedError
from ..remote._urls import is_remote
from ..shard._file_checks import open_regular, stamp_mismatch
from ..shard._packed_members import PackedMembers
from ..shard._shard_info import ShardInfo
from ..shard._tar_check import HeaderTable
from ..shard._tar_walk import BLOCK
from ._first_blocks import AHEAD, fetch_first_blocks
from ._sample_span import (
    Columns,
    Members,
    cut_sample,
    cut_samples,
    gather_window,
    index_bounds,
    members_of,
    verify_span,
)

__all__ = ["ShardReader"]

#: Local shards are read unbuffered: every read is one span (a sample, or a run of them,
#: NOTE [ runs of samples ]), so a buffer only copies, and a jump of a shuffle would refill
#: it (64 KiB for a sample of a few kB). Measured with shard_shuffle_table.py parts b and c:
#: a random read within a shard 7.8-8.0 -> 4.1-4.2 us, the window shuffle 1.23x faster.
_READ_BUFFER = 0
#: A run of samples read in one go spans at most this many bytes (NOTE [ runs of samples ]).
RUN_BYTES = 8 << 20
#: Bytes of unwanted samples a run reads through rather than seeking past them.
RUN_GAP = 64 << 10
#: A shuffle window of a local shard is read whole and kept when it spans at most this
#: many bytes (NOTE [ kept windows ]): the memory one reader holds, one window at a time.
WINDOW_BYTES = 32 << 20
#: With the kernel, a kept window is read in pieces of at most this many bytes into one
#: buffer, each checked and its members copied out while in the CPU's cache (NOTE [ kept
#: windows ]); a member larger than this is a piece of its own.
PIECE_BYTES = 256 << 10
_CHANGED = (
    "shard {path!r} is shorter than when it was indexed; it changed while in use: rebuild "
    "the source (its index is refreshed automatically)"
)


class ShardReader:
    """Read samples by (shard, index), keeping the current shard open.

    One reader per process or worker. A sample is the dict webdataset yields: ``__key__``,
    ``__url__``, one raw ``bytes`` entry per suffix, and for a local shard
    ``__local_path__`` (webdataset gives remote samples none). A local shard is read at the
    offsets of the index (NOTE [ shard index ]), a batch's neighbouring samples at once (NOTE
    [ runs of samples ]); a remote shard in blocks from the first sample read (NOTE [ remote
    reads ]); a shuffle window of either is kept (NOTE [ kept windows ], [ remote windows ]).

    Examples:
        >>> import os, tempfile, webdataset as wds
        >>> from detsamplers.loader._wds.index._index_shards import index_shards
        >>> from detsamplers.loader._wds.remote._urls import expand_urls
        >>> folder = tempfile.mkdtemp()
        >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), verbose=0) as w:
        ...     w.write({"__key__": "k0", "cls": b"7"})
        >>> reader = ShardReader(index_shards(expand_urls(os.path.join(folder, "s-0.tar"))))
        >>> sample = reader.read(0, 0); reader.close()
        >>> sample["__key__"], sample["cls"]
        ('k0', b'7')
    """

    def __init__(
        self, shards: Sequence[ShardInfo], options: RemoteOptions | None = None, window: int = 0
    ) -> None:
        self.shards = shards
        #: The source's ``shuffle_window`` (0: none), for NOTE [ kept windows ].
        self.window = window if window > 1 else 0
        #: The kept window of the open shard: its number, first byte and bytes.
        self.kept: tuple[int, Any, int, Columns] | None = None
        #: The buffer a kept window's pieces are read into (NOTE [ kept windows ]).
        self.piece = bytearray()
        #: No batch read yet: windows are not kept for it (NOTE [ kept windows ]).
        self.first_batch = True
        self.options = options or RemoteOptions()
        self.remote = [is_remote(s.url) for s in shards]
        self.any_remote = any(self.remote)
        self.local = [urllib.parse.urlparse(s.url).path or s.path for s in shards]
        self.current = -1
        self.keys: Sequence[str] = ()
        self.members: Sequence[list[Any]] = ()
        self.packed: PackedMembers | None = None
        self.handle: BinaryIO | None = None
        self.stream: RemoteShard | None = None
        self.table: HeaderTable | None = None
        #: The remote stream whose first sample's tar headers were checked (NOTE [ set index ]).
        self.checked: RemoteShard | None = None
        #: Streams :meth:`open_batch` opened, by the batch item whose stretch they serve.
        self.opened: dict[int, RemoteShard] = {}

    def read(self, shard: int, index: int) -> dict[str, Any]:
        """The sample ``index`` of shard ``shard`` (numbered as in the URL list)."""
        info = self.shards[shard]
        self._select(shard)
        sample: dict[str, Any] = {"__key__": self.keys[index], "__url__": info.url}
        packed = self.packed
        if packed is not None and not self.remote[shard]:
            rows = range(packed.starts[index], packed.starts[index + 1])
            return self._read_local(
                shard, sample, packed.suffixes, packed.offsets, packed.sizes, rows
            )
        members = self.members[index]
        found = members_of(sample["__key__"], members)
        rows = range(len(members))
        if not self.remote[shard]:
            return self._read_local(shard, sample, found.suffixes, found.offsets, found.sizes, rows)
        # Checked by its ETag and size instead (NOTE [ index verification ]).
        if self.stream is None:
            self.stream = RemoteShard(info.url, info.size, info.version, self.options)
        start = min(found.offsets) if members else 0
        end = max(o + n for o, n in zip(found.offsets, found.sizes, strict=True)) if members else 0
        checking = self.stream is not self.checked and bool(members)
        base = max(0, start - BLOCK) if checking else start  # its first sample: the headers
        data = self.stream.read(base, end)  # in the stream's first block (NOTE [ set index ])
        if checking:
            verify_span(info, data, base, found)
            self.checked = self.stream
        return cut_sample(sample, data, base, found.suffixes, found.offsets, found.sizes, rows)

    def read_many(self, shards: Sequence[int], indexes: Sequence[int]) -> list[dict[str, Any]]:
        """The samples ``(shards[i], indexes[i])``, in that order, as :meth:`read` gives them.

        NOTE [ runs of samples ]
        A batch mostly asks for neighbouring samples of one shard (consecutive ones with
        one rank and no window shuffle, every ``W``-th with ``W`` ranks, a window's worth
        shuffled). For a local shard the requests are sorted by offset and cut into runs:
        a run reads one byte range, at most ``RUN_BYTES`` long, holding samples no more
        than ``RUN_GAP`` bytes apart, and each member is a slice of it. Remote shards and
        shards with members out of tar order are read sample by sample.

        Examples:
            >>> import os, tempfile, webdataset as wds
            >>> from detsamplers.loader._wds.index._index_shards import index_shards
            >>> from detsamplers.loader._wds.remote._urls import expand_urls
            >>> folder = tempfile.mkdtemp()
            >>> with wds.ShardWriter(os.path.join(folder, "s-%d.tar"), verbose=0) as w:
            ...     for i in range(4):
            ...         w.write({"__key__": f"k{i}", "cls": str(i).encode()})
            >>> reader = ShardReader(index_shards(expand_urls(os.path.join(folder, "s-0.tar"))))
            >>> [s["cls"] for s in reader.read_many([0, 0, 0], [3, 1, 2])]
            [b'3', b'1', b'2']
            >>> reader.close()
        """
        jobs = self.open_batch(shards, indexes)  # NOTE [ first blocks of a batch ]
        if len(jobs) > 1:
            fetch_first_blocks(jobs)
        return self.read_opened(shards, indexes)

    def read_opened(self, shards: Sequence[int], indexes: Sequence[int]) -> list[dict[str, Any]]:
        """:meth:`read_many` after :meth:`open_batch`: the batch's samples, in order."""
        out: list[dict[str, Any]] = [{}] * len(indexes)
        ahead, self.opened = self.opened, {}
        first, count = 0, len(shards)
        try:
            while first < count:  # each stretch of one shard
                shard = shards[first]
                if first == 0 and shards[-1] == shard and shards.count(shard) == count:
                    stop = count  # a batch of one shard: found in one C loop
                else:
                    stop = first + 1
                    while stop < count and shards[stop] == shard:
                        stop += 1
                self._select(shard)
                if first in ahead:
                    self.stream = ahead.pop(first)
                packed = self.packed
                if packed is not None and packed.ordered and not self.remote[shard]:
                    self._read_runs(shard, packed, indexes, first, stop, out)
                else:
                    rest: Sequence[int] = range(first, stop)
                    if packed is not None and packed.ordered and self.window:
                        rest = self._remote_windows(shard, packed, indexes, first, stop, out)
                    for i in rest:
                        out[i] = self.read(shard, indexes[i])
                first = stop
        finally:
            for stream in ahead.values():
                stream.close()
        self.first_batch = False
        return out

    def open_batch(
        self, shards: Sequence[int], indexes: Sequence[int], limit: int = AHEAD
    ) -> list[tuple[RemoteShard, ShardInfo, int]]:
        """Open the remote shards this batch opens (up to ``limit``), none read yet.

        Returns the jobs for :func:`fetch_first_blocks` (NOTE [ first blocks of a batch ]);
        :meth:`read_opened` then reads the batch with these streams, fetched or not. A
        shard still open that the batch continues is not opened again.
        """
        for stream in self.opened.values():  # a batch before that failed before its read
            stream.close()
        self.opened = {}
        if not self.any_remote:  # local shards: nothing to open ahead
            return []
        jobs: dict[int, tuple[RemoteShard, ShardInfo, int]] = {}
        first = 0
        while first < len(shards) and len(jobs) < limit:
            shard = shards[first]
            if self.remote[shard] and (first > 0 or shard != self.current):
                info = self.shards[shard]
                stream = RemoteShard(info.url, info.size, info.version, self.options)
                index, packed = indexes[first], resolved(info.members)
                span = self._window_bytes(packed, index // self.window) if self.window else None
                if span is not None:  # its first block: the window (NOTE [ remote windows ])
                    index = index // self.window * self.window
                    stream.block = max(stream.block, span[3] - max(0, span[2] - BLOCK))
                jobs[first] = (stream, info, index)
            while first < len(shards) and shards[first] == shard:
                first += 1
        self.opened = {i: job[0] for i, job in jobs.items()}
        return list(jobs.values())

    def open_remote(self, shard: int, index: int) -> tuple[RemoteShard, ShardInfo, int] | None:
        """Open remote ``shard`` with a stream not read yet, unless it is open already.

        The stream, the shard and ``index`` (the first sample to read), for
        :func:`fetch_first_blocks`; ``None`` for a local or already open shard.
        """
        if shard == self.current or not self.remote[shard]:
            return None
        self._select(shard)
        info = self.shards[shard]
        self.stream = RemoteShard(info.url, info.size, info.version, self.options)
        return self.stream, info, index

    def _select(self, shard: int) -> None:
        """Make ``shard`` the open one."""
        if shard != self.current:
            self.close()
            self.current = shard
            info = self.shards[shard]
            self.keys, self.members = resolved(info.keys), resolved(info.members)
            self.packed = self.members if isinstance(self.members, PackedMembers) else None
            self.table = None

    def _read_runs(
        self,
        shard: int,
        packed: PackedMembers,
        indexes: Sequence[int],
        first: int,
        stop: int,
        out: list[dict[str, Any]],
    ) -> None:
        """Fill ``out[first:stop]`` from runs of one local shard (NOTE [ runs of samples ])."""
        starts, offsets, sizes = packed.starts, packed.offsets, packed.sizes
        keys, url, local = self.keys, self.shards[shard].url, self.local[shard]
        low, high = index_bounds(indexes[first:stop], len(keys), url)
        neighbours = high - low == stop - first - 1
        if neighbours and self._consecutive(shard, packed, indexes, first, stop, out):
            return
        window = self.window
        # All of one window (a window of a whole shard: always): no sort (NOTE [ kept windows ]).
        if window and low // window == high // window:
            span = self._window_span(shard, packed, low // window)
            if span is not None:
                data, base, columns = span
                slots = range(first, stop)
                cut_samples(data, base, columns, keys, url, local, indexes, slots, out)
                return
        order = sorted(range(first, stop), key=indexes.__getitem__)
        if window:
            order = self._from_windows(shard, packed, indexes, order, out)
        position, total = 0, len(order)
        while position < total:
            # One run: samples whose members lie close together (members are in tar order).
            begin = end = -1
            last = position
            while last < total:
                index = indexes[order[last]]
                low, high = starts[index], starts[index + 1]
                if high > low:
                    head, tail = offsets[low], offsets[high - 1] + sizes[high - 1]
                    if begin < 0:
                        begin, end = head, tail
                    elif head - end > RUN_GAP or tail - begin > RUN_BYTES:
                        break
                    elif tail > end:
                        end = tail
                last += 1
            base = max(0, begin - BLOCK)  # with the first header (NOTE [ index verification ])
            data = self._span(shard, base, end) if begin >= 0 else b""
            table = self._table()
            run = [indexes[i] for i in order[position:last]]
            verify_span(self.shards[shard], data, base, table, table.members_of(run))
            run_slots = order[position:last]
            columns = self._columns(packed)
            cut_samples(data, base, columns, keys, url, local, indexes, run_slots, out)
            position = last

    def _remote_windows(
        self,
        shard: int,
        packed: PackedMembers,
        indexes: Sequence[int],
        first: int,
        stop: int,
        out: list[dict[str, Any]],
    ) -> list[int]:
        """Fill ``out[first:stop]`` of a remote shard from its kept windows; the rest, to read.

        NOTE [ remote windows ]
        Without the node cache, a batch of 64 from a window of 2,000 samples of a remote shard
        asked for 64 samples scattered over the window, nearly each outside the blocks its
        :class:`RemoteShard` keeps (NOTE [ remote reads ]): 870 samples/s over loopback HTTP
        in question 4 of the peers' table. As a local one's (NOTE [ kept windows ]), a window
        of at most ``WINDOW_BYTES`` is fetched whole (a batch's first blocks are its windows:
        NOTE [ first blocks of a batch ]), its tar headers all checked (NOTE [ index
        verification ]) and kept, from a reader's first batch on (sample by sample, that batch
        cost a request a sample). The same samples and order; no ``__local_path__``, as
        webdataset's remote samples. A larger window is read sample by sample. Each
        DataLoader worker keeps its own window: with ``w`` workers a window may be fetched
        up to ``w`` times (the node cache, ``parts``, fetches a shard once a node).
        """
        index_bounds(indexes[first:stop], len(self.keys), self.shards[shard].url)
        order = sorted(range(first, stop), key=indexes.__getitem__)
        return self._from_windows(shard, packed, indexes, order, out)

    def _from_windows(
        self,
        shard: int,
        packed: PackedMembers,
        indexes: Sequence[int],
        order: list[int],
        out: list[dict[str, Any]],
    ) -> list[int]:
        """Fill ``out[i]`` for the ``order`` whose window can be kept; the rest, still to read.

        NOTE [ kept windows ]
        With ``shuffle_window = w`` the batches of a shard draw their samples from one
        window of ``w`` samples at a time (NOTE [ shard stream order ]), scattered over it:
        a batch of 64 from a window of 2,000 small samples spans most of the window, so the
        runs of NOTE [ runs of samples ] read through it again for every batch (about
        ``w / batch`` times the window's bytes), or, when the samples are larger than
        ``RUN_GAP / 64`` of the window, read sample by sample. Instead, a local window
        spanning at most ``WINDOW_BYTES`` is read whole, in one read, its tar headers all
        checked at once (NOTE [ index verification ]), and kept until a batch asks for
        another window or shard: the shard's bytes are read once per epoch and each
        sample is a slice. The reader holds one window's bytes at most; a larger window
        is read in runs as before. So is a reader's first batch (the first of a pass or
        after a resume, or a lone ``batch_at``): it may be the only one read, and a batch's
        samples are far fewer bytes than a window (two windows when it spans two shards);
        windows are kept from its second batch on. The order and the samples are
        unchanged. A batch's samples of one window (a window of a whole shard: all of
        them) are cut in one call, unsorted (:func:`.cut_samples`); samples of several
        windows are cut a window's run at a time, in the order of their indexes.
        """
        window, rest = self.window, []
        keys, url = self.keys, self.shards[shard].url
        local = None if self.remote[shard] else self.local[shard]  # NOTE [ remote windows ]
        position, total = 0, len(order)
        while position < total:  # ``order`` is sorted by index: a run per window
            number = indexes[order[position]] // window
            stop = bisect.bisect_left(
                order, (number + 1) * window, position, total, key=indexes.__getitem__
            )
            span = self._window_span(shard, packed, number)
            if span is None:
                rest.extend(order[position:stop])
            else:
                data, base, columns = span
                slots = order[position:stop]
                cut_samples(data, base, columns, keys, url, local, indexes, slots, out)
            position = stop
        return rest

    def _window_span(
        self, shard: int, packed: PackedMembers, number: int
    ) -> tuple[Any, int, Columns] | None:
        """Window ``number`` of the open shard, kept: its bytes, their first byte, its columns.

        Read and its headers checked once, unless it is the window kept already; ``None``
        for a window of no members or of more than ``WINDOW_BYTES``, whose samples are
        read in runs (NOTE [ kept windows ]).
        """
        kept = self.kept
        if kept is not None and kept[0] == number:
            return kept[1], kept[2], kept[3]
        remote = self.remote[shard]
        if self.first_batch and not remote:  # read in runs (NOTE [ kept windows ])
            return None
        if (found := self._window_bytes(packed, number)) is None:
            return None
        low, high, head, tail = found
        self.kept = None  # the old window goes before the new one is read
        table = self._table()
        if kernel is None or remote:  # the whole window in one read, each sample a slice
            base = max(0, head - BLOCK)  # with the first header
            data: Any = (self._remote_span if remote else self._span)(shard, base, tail)
            verify_span(self.shards[shard], data, base, table, range(low, high))
            self.kept = (number, data, base, self._columns(packed))
        else:
            info, read_into = self.shards[shard], partial(self._read_into, shard)
            data = gather_window(read_into, info, table, low, high, PIECE_BYTES)
            if len(self.piece) > 2 * PIECE_BYTES:  # a large member's piece is not kept
                self.piece = bytearray()
            positions = data[1]
            self.kept = (
                number,
                data[0],
                0,
                Columns(table.starts, positions, table.sizes, packed.suffixes),
            )
        return self.kept[1], self.kept[2], self.kept[3]

    def _window_bytes(self, packed: Any, number: int) -> tuple[int, int, int, int] | None:
        """Window ``number``'s members ``low`` to ``high - 1`` and bytes ``head`` to ``tail``.

        ``None`` when it cannot be kept (NOTE [ kept windows ]): members out of tar order or
        not packed, none in it, or more than ``WINDOW_BYTES`` of them.
        """
        if not isinstance(packed, PackedMembers) or not packed.ordered:
            return None
        starts, offsets, sizes = packed.starts, packed.offsets, packed.sizes
        window, count = self.window, len(starts) - 1
        if not 0 <= number * window < count:
            return None
        low, high = int(starts[number * window]), int(starts[min(count, number * window + window)])
        if high == low:
            return None
        head, tail = int(offsets[low]), int(offsets[high - 1] + sizes[high - 1])
        return None if tail - head > WINDOW_BYTES else (low, high, head, tail)

    def _columns(self, packed: PackedMembers) -> Columns:
        """The open shard's columns for :func:`.cut_samples`.

        The header table's arrays with the kernel (one C call a run), else the index's lists.
        """
        if kernel is not None:
            table = self._table()
            return Columns(table.starts, table.offsets, table.sizes, packed.suffixes)
        return Columns(packed.starts, packed.offsets, packed.sizes, packed.suffixes)

    def _consecutive(
        self,
        shard: int,
        packed: PackedMembers,
        indexes: Sequence[int],
        first: int,
        stop: int,
        out: list[dict[str, Any]],
    ) -> bool:
        """:meth:`_read_runs` when ``indexes[first:stop]`` are distinct neighbours: one read.

        ``False`` (nothing done) when they span more than ``RUN_BYTES`` or repeat.
        """
        low = min(indexes[first:stop])
        starts, offsets, sizes = packed.starts, packed.offsets, packed.sizes
        head, tail = starts[low], starts[low + stop - first]
        if head == tail or len(set(indexes[first:stop])) != stop - first:
            return False
        begin, end = offsets[head], offsets[tail - 1] + sizes[tail - 1]
        if end - begin > RUN_BYTES:
            return False
        base = max(0, begin - BLOCK)  # with the first header (NOTE [ index verification ])
        data = self._span(shard, base, end)
        info = self.shards[shard]  # checked while the bytes are in the cache
        verify_span(info, data, base, self._table(), range(head, tail))
        keys, url, local = self.keys, info.url, self.local[shard]
        columns = self._columns(packed)
        cut_samples(data, base, columns, keys, url, local, indexes, range(first, stop), out)
        return True

    def _open(self, shard: int) -> BinaryIO:
        """The open local shard, opened (and checked to be the one indexed) on first use."""
        if self.handle is None:
            info = self.shards[shard]
            handle = open_regular(info.path, "shard", info.path, buffering=_READ_BUFFER)
            try:
                changed = stamp_mismatch(info.path, info.stamp, handle)
            except BaseException:
                handle.close()
                raise
            if changed is not None:
                handle.close()
                raise ShardChangedError(changed)
            self.handle = handle
        return self.handle

    def _table(self) -> HeaderTable:
        """The open shard's :class:`HeaderTable`, built once per decoded index and kept there."""
        table = self.table
        if table is None:
            packed = self.packed
            assert packed is not None
            table = packed.table
            if not isinstance(table, HeaderTable) or table.keys is not self.keys:
                table = packed.table = HeaderTable(self.keys, packed)
            self.table = table
        return table

    def _span(self, shard: int, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` of a local shard: one read, its length checked."""
        handle = self._open(shard)
        handle.seek(start)
        data = handle.read(end - start)
        while 0 < len(data) < end - start:  # an unbuffered read may return less
            more = handle.read(end - start - len(data))
            if not more:
                break
            data += more
        if len(data) != end - start:
            raise ValueError(_CHANGED.format(path=self.shards[shard].path))
        return data

    def _remote_span(self, shard: int, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` of the open remote shard, through its stream.

        A span longer than ``read_ahead`` (a window) is not kept in the stream's blocks too.
        """
        if self.stream is None:
            info = self.shards[shard]
            self.stream = RemoteShard(info.url, info.size, info.version, self.options)
        data = self.stream.read(start, end)
        if len(data) != end - start:  # a server that answers a range short
            raise ValueError(_CHANGED.format(path=self.shards[shard].url))
        if end - start > self.options.read_ahead:  # held once, as the kept window
            self.stream.blocks = []
        return data

    def _read_into(self, shard: int, start: int, end: int) -> memoryview:
        """:meth:`_span` into the reader's piece buffer (grown to fit): a view of its bytes."""
        handle = cast(io.RawIOBase, self._open(shard))  # unbuffered: a FileIO
        length = end - start
        if len(self.piece) < length:
            self.piece = bytearray(max(length, PIECE_BYTES))
        view = memoryview(self.piece)[:length]
        handle.seek(start)
        got = 0
        while got < length:  # an unbuffered read may return less
            more = handle.readinto(view[got:]) or 0
            if not more:
                raise ValueError(_CHANGED.format(path=self.shards[shard].path))
            got += more
        return view

    def _read_local(
        self,
        shard: int,
        sample: dict[str, Any],
        suffixes: Sequence[str],
        offsets: Sequence[int],
        sizes: Sequence[int],
        rows: range,
    ) -> dict[str, Any]:
        """:meth:`read` of a local sample, its members the ``rows`` of the columns given.

        One span from the header before its first member (NOTE [ index verification ]) to
        the end of its last, verified and cut (NOTE [ one way to read a sample ]).
        """
        if rows:  # one read per sample: its members are consecutive in the tar
            first, stop = rows.start, rows.stop
            start = max(0, min(offsets[first:stop]) - BLOCK)  # with the first member's header
            end = max(o + n for o, n in zip(offsets[first:stop], sizes[first:stop], strict=True))
            data = self._span(shard, start, end)
            info = self.shards[shard]
            if self.packed is not None and kernel is not None:  # one compiled call over the
                verify_span(info, data, start, self._table(), rows)  # table, built once
            else:
                key = [sample["__key__"]] * len(rows)
                found = Members(key, suffixes[first:stop], offsets[first:stop], sizes[first:stop])
                verify_span(info, data, start, found)
            cut_sample(sample, data, start, suffixes, offsets, sizes, rows)
        sample["__local_path__"] = self.local[shard]
        return sample

    def follow(self, plan: Iterator[Sequence[int]]) -> None:
        """Ignore ``plan``: this reader does not prefetch (NOTE [ sample readers ])."""
        del plan

    def close(self) -> None:
        """Close the open shard, if any."""
        self.checked = None
        self.kept = None
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        self.current = -1
