"""Reading the metadata without owning it: the local file with its journal replayed
(:func:`read_metadata`), and the backend mirror with its chunks (:func:`read_mirror`).

:class:`~tiered.metadata.metadata_store.MetadataStore` (the owner) reads through the same
helpers.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tiered.errors import MetadataError
from tiered.errors import ReadPastEndError
from tiered.errors import SegmentNotFoundError
from tiered.providers.base import Provider
from tiered.providers.layout import check_component
from tiered.providers.layout import check_key
from tiered.providers.layout import cluster_dir_name

from .journal import Journal
from .journal import apply_delta
from .journal import chunk_prefix
from .journal import decode_frames
from .journal import snapshot_id
from .models import MetadataDocument
from .models import parse_metadata

__all__ = [
    "FILE_NAME",
    "apply_chunks",
    "apply_frames",
    "mirror_chunks",
    "mirror_key_for",
    "parse_raw",
    "read_document",
    "read_metadata",
    "read_mirror",
    "read_raw",
]

log = logging.getLogger(__name__)

FILE_NAME = "tieredStoreMetadata.json"
"""The metadata file name, locally (below ``config/``) and in the backend mirror key."""


def mirror_key_for(cluster: str, broker: str) -> str:
    """The backend key of a broker's metadata mirror.

    ``{md5(cluster)[:8]}_{cluster}/{broker}/config/tieredStoreMetadata.json``: beside the broker's
    segment tree, never inside a segment directory (those are ``{topic}/{queueId}/{TYPE}/``).

    Raises:
        InvalidKeyError: the cluster or broker name is not a safe key component.
    """
    check_component(broker, "broker name")
    return check_key(f"{cluster_dir_name(cluster)}/{broker}/config/{FILE_NAME}")


def read_raw(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def parse_raw(path: Path, raw: bytes | None, problems: list[str]) -> MetadataDocument | None:
    """``raw`` (the bytes of ``path``) parsed, or None with the reason appended to ``problems``."""
    if raw is None:
        problems.append(f"{path} is missing")
        return None
    try:
        return parse_metadata(raw.decode("utf-8"), source=str(path))
    except UnicodeDecodeError as e:
        problems.append(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})")
    except MetadataError as e:
        problems.append(str(e))
    return None


def read_document(path: Path, problems: list[str]) -> MetadataDocument | None:
    """``path`` parsed, or None with the reason appended to ``problems``."""
    return parse_raw(path, read_raw(path), problems)


def apply_frames(doc: MetadataDocument, frames: list[bytes], source: str) -> list[bytes]:
    """Replay ``frames`` onto ``doc`` in order; returns those replayed (a frame that is not a
    change this store wrote ends the replay, logged)."""
    for n, frame in enumerate(frames):
        try:
            apply_delta(doc, frame, source=source)
        except MetadataError as e:
            log.warning("%s; replay stops before change %d of %d", e, n + 1, len(frames))
            return frames[:n]
    return frames


READ_ATTEMPTS = 5
"""Times :func:`read_metadata` reads again when the journal was replaced under it."""


def read_metadata(data_dir: Path) -> tuple[MetadataDocument, str]:
    """The metadata as its files hold it, read without touching them -- the main file (with
    the journal extending it replayed), else its ``.bak`` -- and which file it came from. For
    processes beside a running sidecar (``fetch``, ``query``, ``status``, ``explain``);
    :meth:`MetadataStore.load` is the owner's reader.

    Raises:
        MetadataError: a file exists but neither it nor ``.bak`` parses.
    """
    directory = Path(data_dir) / "config"
    journal = Journal(directory)
    for _ in range(READ_ATTEMPTS):
        problems: list[str] = []
        for name in (FILE_NAME, FILE_NAME + ".bak"):
            path = directory / name
            raw = read_raw(path)
            if raw is None:
                continue
            doc = parse_raw(path, raw, problems)
            if doc is None:
                continue
            read = journal.read()
            if read.snapshot is None or read.snapshot != snapshot_id(raw):
                if read.snapshot is not None and name == FILE_NAME and _raw_changed(path, raw):
                    break  # the owner compacted between the two reads: read both again
                return doc, str(path)
            apply_frames(doc, read.frames, str(journal.path))
            return doc, f"{path} + {len(read.frames)} journal changes"
        else:
            if problems:
                raise MetadataError("; ".join(problems))
            return MetadataDocument(), "none (nothing offloaded yet)"
    raise MetadataError(
        f"{directory}: the metadata was rewritten {READ_ATTEMPTS} times while being read; try again"
    )


def _raw_changed(path: Path, raw: bytes) -> bool:
    return read_raw(path) != raw


def read_mirror(mirror: Provider, mirror_key: str) -> tuple[MetadataDocument, bytes, int]:
    """The backend mirror's document: its snapshot with the journal chunks extending it
    replayed (chunks in order while they follow on from each other); the snapshot's bytes; and
    the journal frames replayed.

    Raises:
        MetadataError: there is no mirror object, or it does not parse.
        ProviderError: the backend failed; ``retriable`` says whether to try again.
    """
    source = f"{mirror.name}:{mirror_key}"
    try:
        size = mirror.size(mirror_key)
        raw = mirror.read(mirror_key, 0, size) if size else b""
    except (SegmentNotFoundError, ReadPastEndError) as e:
        raise MetadataError(
            f"no metadata mirror {mirror_key!r} in the {mirror.name} backend: check "
            "brokerClusterName/brokerName, or rebuild from the segments themselves"
        ) from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MetadataError(f"{source}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    doc = parse_metadata(text, source=source)
    frames = apply_chunks(doc, mirror, mirror_key, snapshot_id(raw))
    return doc, raw, frames


def mirror_chunks(mirror: Provider, mirror_key: str, snapshot: str) -> list[tuple[int, str, int]]:
    """The journal chunks extending ``snapshot`` in the mirror: (first frame, key, size), in
    order."""
    prefix = f"{chunk_prefix(mirror_key)}{snapshot}/"
    found = []
    for key, size in mirror.list_sizes(prefix):
        name = key[len(prefix) :]
        if name.isdigit():
            found.append((int(name), key, size))
    return sorted(found)


def apply_chunks(
    doc: MetadataDocument,
    mirror: Provider,
    mirror_key: str,
    snapshot: str,
    *,
    after: int = 0,
) -> int:
    """Replay the mirror's chunks extending ``snapshot`` from frame ``after`` on onto ``doc``;
    returns the frame after the last replayed (chunks stop at a gap or a damaged frame)."""
    at = after
    chunks = mirror_chunks(mirror, mirror_key, snapshot)
    for n, (first, key, size) in enumerate(chunks):
        following = chunks[n + 1][0] if n + 1 < len(chunks) else None
        if following is not None and following <= at:
            continue  # replayed before
        if first > at:
            log.warning("metadata chunk %r follows a gap at frame %d; not replayed", key, at)
            break
        frames, good = decode_frames(mirror.read(key, 0, size) if size else b"")
        fresh = frames[at - first :]  # a chunk put again with more frames: only the new ones
        applied = apply_frames(doc, fresh, f"{mirror.name}:{key}")
        at += len(applied)
        if good < size or len(applied) < len(fresh):
            break
    return at
