from typing import Any

#: The CRC-32 of the C files it was built from (setup.py), checked by _native._load.
SOURCES: str

# tables: (codes uint32, prefix uint16, bases int64, counts int64), from _Segment.kernel_args.
def locate_stride(
    tables: tuple[Any, ...],
    key: int,
    window: int,
    arrangements: int,
    components: int,
    first: int,
    stride: int,
    count: int,
    component_out: Any,
    position_out: Any,
    /,
) -> None: ...
def records_stride(
    tables: tuple[Any, ...],
    key: int,
    window: int,
    arrangements: int,
    components: int,
    first: int,
    stride: int,
    count: int,
    params: Any,
    out: Any,
    /,
) -> None: ...
def check_headers(
    data: Any,
    base: int,
    table: bytearray,
    members: Any,
    first: int,
    stop: int,
    /,
) -> int: ...
def header_table(
    offsets: Any, sizes: Any, starts: Any, keys: Any, suffixes: Any, /
) -> bytearray | None: ...
def pack_bins(sizes: Any, capacity: int, bins_out: Any, /) -> int: ...
def pack_counts(sizes: Any, bounds: Any, capacity: int, counts_out: Any, /) -> None: ...
def pack_scan(
    ends: Any,
    first: int,
    local: int,
    before: int,
    tokens: int,
    n: int,
    seeds: Any,
    lo: int,
    hi: int,
    window: int,
    capacity: int,
    split: bool,
    rests: Any,
    full: Any,
    /,
) -> tuple[int, int, int]: ...
def pack_fit(rests: Any, full: Any, window: int, capacity: int, counts: Any, /) -> None: ...
def pack_rows(
    tokens: Any,
    base: int,
    sources: list[tuple[Any, Any, Any, Any, Any]],
    js: Any,
    seq_len: int,
    vocab: int,
    input_ids: Any,
    labels: Any,
    position_ids: Any,
    document_ids: Any,
    cu_seqlens: Any,
    flat: Any,
    /,
) -> bool: ...
def cut_samples(
    data: Any,
    base: int,
    starts: Any,
    offsets: Any,
    sizes: Any,
    keys: Any,
    suffixes: Any,
    url: Any,
    local: Any,
    indexes: Any,
    slots: Any,
    out: list[Any],
    /,
) -> None: ...
def gather_members(
    data: Any,
    base: int,
    offsets: Any,
    sizes: Any,
    first: int,
    stop: int,
    out: Any,
    at: int,
    positions: Any,
    /,
) -> int: ...
def decode_run(
    samples: list[Any],
    first: int,
    names: tuple[str, ...],
    steps: tuple[tuple[str, Any], ...],
    meta: Any,
    out: list[Any],
    /,
) -> int: ...
