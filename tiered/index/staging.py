"""Compaction elsewhere: SEALED files staged in the backend for ``spark-submit``, results picked up.

Keys, beside the INDEX segments of the broker (``rmq_sys_INDEX`` is a pseudo topic, so no queue
directory can collide)::

    {md5(cluster)[:8]}_{cluster}/{broker}/rmq_sys_INDEX/index-staging/{beginTimestamp}
    {md5(cluster)[:8]}_{cluster}/{broker}/rmq_sys_INDEX/index-compacted/{beginTimestamp}

A staged object is the used prefix of the SEALED file (header, slot table, items; the unused
tail of the file is not sent). The job (``jobs/compact_index.py --pending ROOT``) compacts every
staged file that has no result yet and writes the result whole (a rename, or an object that
appears when its upload completes). The sidecar picks a result up only if it checks out against
the SEALED file it still holds (:func:`~tiered.index.compacted_file.check_compacted`), then
uploads it as an INDEX segment like a file it compacted itself, and deletes both objects.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import Final

from tiered import metrics
from tiered.config import TieredConfig
from tiered.errors import IndexFileError
from tiered.errors import ProviderError
from tiered.errors import SegmentNotFoundError
from tiered.file.flat_append_file import retrying
from tiered.index.compacted_file import check_compacted
from tiered.index.format import HEADER_SIZE
from tiered.index.format import ITEM_SIZE
from tiered.index.format import SLOT_SIZE
from tiered.index.index_store_file import IndexStoreFile
from tiered.providers.base import Provider
from tiered.providers.layout import INDEX_TOPIC
from tiered.providers.layout import cluster_dir_name

log = logging.getLogger(__name__)

STAGING_DIR: Final = "index-staging"
COMPACTED_DIR: Final = "index-compacted"
_DOWNLOAD_PIECE: Final = 8 << 20


def staging_root(cluster: str, broker: str) -> str:
    """The key prefix holding ``index-staging/`` and ``index-compacted/`` of a broker."""
    return f"{cluster_dir_name(cluster)}/{broker}/{INDEX_TOPIC}"


class Staging:
    """The staging area of one broker's index files in the backend."""

    def __init__(self, provider: Provider, *, cluster: str, broker: str, slots: int) -> None:
        self.provider = provider
        self.slots = slots
        self.root = staging_root(cluster, broker)

    def staged_key(self, begin: int) -> str:
        """Where the SEALED file of ``begin`` is staged."""
        return f"{self.root}/{STAGING_DIR}/{begin}"

    def compacted_key(self, begin: int) -> str:
        """Where the job writes the compacted file of ``begin``."""
        return f"{self.root}/{COMPACTED_DIR}/{begin}"

    def is_staged(self, begin: int) -> bool:
        """Whether the file of ``begin`` is staged."""
        return retrying(lambda: self.provider.exists(self.staged_key(begin)))

    @metrics.counts_index_failures("stage")
    def stage(self, f: IndexStoreFile) -> str:
        """Put the used prefix of the SEALED file ``f``; returns the key."""
        key = self.staged_key(f.begin_timestamp)
        used = HEADER_SIZE + f.slots * SLOT_SIZE + (f.item_count + 1) * ITEM_SIZE
        view = f.buffer()
        try:
            retrying(lambda: self.provider.put(key, view[:used], overwrite=True))
        finally:
            view.release()
        log.info("index file %s staged at %s (%d bytes)", f.path, key, used)
        return key

    @metrics.counts_index_failures("pickup")
    def result(self, f: IndexStoreFile, into: Path) -> tuple[Path | None, int] | None:
        """The compacted file of ``f`` written by the job, downloaded into ``into/{begin}``:
        ``(path, size)``, ``(None, 0)`` for an empty result of an empty file, or None when there
        is no usable result (none yet, or one that does not check out: it is deleted)."""
        key = self.compacted_key(f.begin_timestamp)
        try:
            size = retrying(lambda: self.provider.size(key))
        except SegmentNotFoundError:
            return None
        try:
            if size == 0:
                if f.item_count:
                    raise IndexFileError("the result is empty but the SEALED file has items")
                return None, 0
            head = retrying(lambda: self.provider.read(key, 0, HEADER_SIZE))
            if len(head) < HEADER_SIZE:
                raise IndexFileError(f"{len(head)} bytes, shorter than a header")
            check_compacted(head, size, self.slots, f.header)
        except IndexFileError as e:
            log.error("%s: %s; deleted (the file is compacted again)", key, e,
                      extra={"objectKey": key})  # fmt: skip
            retrying(lambda: self.provider.delete(key))
            return None
        into.mkdir(parents=True, exist_ok=True)
        path = into / str(f.begin_timestamp)
        with path.open("wb") as out:
            for position in range(0, size, _DOWNLOAD_PIECE):
                n = min(_DOWNLOAD_PIECE, size - position)
                out.write(retrying(lambda p=position, n=n: self.provider.read(key, p, n)))  # type: ignore[misc]
            out.flush()
            os.fsync(out.fileno())
        if path.stat().st_size != size:
            raise ProviderError(f"{key}: downloaded {path.stat().st_size} of {size} bytes", key=key)
        return path, size

    def clean(self, begin: int) -> None:
        """Delete the staged file, the result and any leftover part files of ``begin``."""
        parts = f"{self.compacted_key(begin)}.parts/"
        for key in [self.staged_key(begin), self.compacted_key(begin), *self.provider.list(parts)]:
            retrying(lambda k=key: self.provider.delete(k))  # type: ignore[misc]

    def staged(self) -> list[int]:
        """The begin timestamps of every staged file."""
        prefix = f"{self.root}/{STAGING_DIR}/"
        names = (key[len(prefix) :] for key in self.provider.list(prefix))
        return sorted(int(n) for n in names if n.isdigit())


def backend_url(cfg: TieredConfig, key: str) -> str | None:
    """The path or fsspec URL at which a Spark job reaches ``key`` (None for memory)."""
    provider = cfg.tiered_backend_service_provider
    if provider == "posix":
        return os.path.join(os.path.abspath(cfg.tiered_store_file_path or "."), key)
    if provider == "s3":
        prefix = cfg.object_store_prefix.strip("/")
        return f"s3://{cfg.object_store_bucket}/{prefix + '/' if prefix else ''}{key}"
    if provider == "fsspec" and cfg.tiered_store_fsspec_url:
        return f"{cfg.tiered_store_fsspec_url.rstrip('/')}/{key}"
    return None


def submit_command(cfg: TieredConfig, master: str = "spark://HOST:7077") -> str | None:
    """The ``spark-submit`` line that compacts every staged file of the broker (None when the
    backend is not reachable from a cluster)."""
    url = backend_url(cfg, staging_root(cfg.broker_cluster_name, cfg.broker_name))
    if url is None:
        return None
    spec = importlib.util.find_spec("tiered.jobs.compact_index")  # the job file, not imported
    job = spec.origin if spec is not None and spec.origin else "jobs/compact_index.py"
    args = [
        "spark-submit", "--master", master, job, "--pending", url,
        "--slots", str(cfg.tiered_store_index_file_max_hash_slot_num),
    ]  # fmt: skip
    if cfg.tiered_backend_service_provider == "s3" and cfg.object_store_endpoint:
        options = {"client_kwargs": {"endpoint_url": str(cfg.object_store_endpoint)}}
        args += ["--storage-options", json.dumps(options)]
    import shlex

    return shlex.join(args)
