# Type stub of the compiled kernel (tiered/kernel/src/lib.rs, PyO3).
from typing import Any
from typing import Literal

from typing_extensions import Buffer

__version__: str

def index_items(
    data: Buffer, starts: Buffer, sizes: Buffer, prefix_hash: int, /
) -> tuple[bytes, bytes, bytes, int]: ...
def index_columns(
    data: Buffer,
    starts: Buffer,
    sizes: Buffer,
    prefix_hash: int,
    topic_id: int,
    queue_id: int,
    flat_offsets: Buffer,
    timestamps: Buffer,
    /,
) -> tuple[list[bytes], int]: ...
def index_columns_many(
    datas: list[Buffer],
    bounds: Buffer,
    starts: Buffer,
    sizes: Buffer,
    prefixes: Buffer,
    flat_offsets: Buffer,
    timestamps: Buffer,
    /,
) -> tuple[list[bytes], int]: ...
def check_units(
    data: Buffer,
    starts: Buffer,
    sizes: Buffer,
    queue_offsets: Buffer,
    physical_offsets: Buffer | None = None,
    /,
) -> int: ...
def check_batch(
    data: Buffer,
    sizes: Buffer,
    first_queue_offset: int,
    physical_offsets: Buffer | None = None,
    /,
) -> tuple[int, bytes, bytes, int, int]: ...
def check_batches(
    datas: list[Buffer],
    sizes: Buffer,
    counts: Buffer,
    first_queue_offsets: Buffer,
    physical_offsets: Buffer | None = None,
    /,
) -> tuple[bytes, bytes, bytes, bytes, bytes]: ...
def rewrite_batches(
    datas: list[Buffer], starts: Buffer, offsets: Buffer, counts: Buffer, /
) -> None: ...
def encode_units(offsets: Buffer, sizes: Buffer, tags_codes: Buffer, /) -> bytes: ...
def store_timestamps(data: Buffer, starts: Buffer, /) -> bytes: ...
def rewrite_physical_offsets(data: Buffer, starts: Buffer, offsets: Buffer, /) -> None: ...
def link_items(
    table: Buffer,
    slots: int,
    hashes: Buffer,
    topic_ids: Buffer,
    queue_ids: Buffer,
    offsets: Buffer,
    sizes: Buffer,
    timestamps: Buffer,
    rows: Buffer,
    first: int,
    begin_timestamp: int,
    /,
) -> tuple[bytes, int, int]: ...
def uninitialized(size: int, /) -> bytearray: ...
def gather_plan(
    offsets: list[Buffer],
    sizes: list[Buffer],
    bases: Buffer,
    scratch: Buffer,
    gap_bytes: int,
    /,
) -> tuple[list[bytearray], bytes, bytes, bytes, bytes]: ...
def read_pieces(fd: int, position: int, iov: Buffer, iov_max: int, split: bool, /) -> int: ...
def crc_mismatches(data: Buffer, starts: Buffer, /) -> bytes: ...
def tags_in(data: Buffer, starts: Buffer, sizes: Buffer, wanted: list[bytes], /) -> bytes: ...

WalkStop = Literal["more", "unwritten", "blank", "torn"]

def walk_commitlog(
    data: Buffer, /
) -> tuple[int, int, WalkStop, list[tuple[bytes, int, int, int, int]]]: ...
def queue_bounds(
    dirs: list[str],
    file_size: int,
    commitlog_min_offset: int,
    hints: Buffer,
    threads: int,
    /,
) -> tuple[bytes, bytes, bytes]: ...
def queue_tails(
    paths: list[str],
    file_sizes: Buffer,
    positions: Buffer,
    cap: int,
    threads: int,
    /,
) -> tuple[bytes, bytes]: ...
def append_files(
    paths: list[str],
    positions: Buffer,
    datas: list[Buffer],
    threads: int,
    /,
) -> tuple[bytes, bytes, bytes]: ...
def dirs_exist(paths: list[str], threads: int, /) -> bytes: ...
def fastjson_layout(json: bytes, /) -> bytes: ...
def quote_bare_keys(json: bytes, /) -> bytes: ...

class Owned:
    """A read-only buffer the kernel made (bytes, int32 or int64 in native order)."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

def decode_units(
    data: Buffer,
    starts: Buffer,
    sizes: Buffer,
    first_queue_offset: int,
    flat_offsets: Buffer,
    bounds: tuple[int, int, int, int],
    columns: list[str],
    /,
) -> tuple[Owned, Owned, dict[str, tuple[Any, ...]], Owned]: ...
