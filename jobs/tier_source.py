"""``rocketmq_tiered``: the tier as a Spark table (a PySpark Python data source, Spark 4.1+).

::

    from tiered.jobs.tier_source import TierSource
    spark.dataSource.register(TierSource)
    df = spark.read.format("rocketmq_tiered").option("config", "/etc/tiered.conf").load()
    df.where("topic = 'Orders' AND storeTimestamp >= '2026-03-01'").groupBy("tags").count()

One row per message, columns as RocketMQ's ``MessageExt`` names them
(:data:`tiered.jobs.tier_batch.COLUMNS`). The driver reads each broker's metadata once and plans
input partitions over the flat commitlog segments, a run of a queue's segments up to
``splitBytes`` each (:func:`tiered.jobs.tier_scan.plan`); executors read their segments straight
from the backend and decode them into Arrow batches. Neither the sidecar nor the broker is in the
path.

Pruning: filters on ``topic``, ``queueId``, ``queueOffset``, ``storeTimestamp``, ``broker``,
``cluster`` and ``uniqKey = ...`` are pushed down when the session sets
``spark.sql.python.filterPushdown.enabled=true`` (:func:`tiered.jobs.session.local_spark_session`
does); a session without it reads without pushdown (Spark refuses a reader that has
``pushFilters`` there, so the source gives it one without). The same bounds can be given as
options (``topic``, ``queueId``, ``since``, ``until``, ``key``), which work on any session
(``pushdown=false`` turns pushdown off). Spark still applies every filter to the rows: pushdown
only skips what cannot match. Columns: a schema given with
``.schema("topic string, tags string, storeTimestamp timestamp")`` (any subset of the columns)
makes the source build only those (a query without ``body`` never decompresses one).

The source runs in Spark's Python workers (``PYSPARK_PYTHON``), on the driver's host for planning
and on the executors for reading: their Python must have rocketmq-tiered installed. Registering
the source checks that Python on the driver (:func:`check_worker_python`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from datetime import UTC
from datetime import datetime
from types import FrameType
from typing import Any
from typing import Final

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSource
from pyspark.sql.datasource import DataSourceReader
from pyspark.sql.datasource import EqualTo
from pyspark.sql.datasource import Filter
from pyspark.sql.datasource import GreaterThan
from pyspark.sql.datasource import GreaterThanOrEqual
from pyspark.sql.datasource import In
from pyspark.sql.datasource import InputPartition
from pyspark.sql.datasource import LessThan
from pyspark.sql.datasource import LessThanOrEqual
from pyspark.sql.types import StructType
from tiered.jobs.tier_batch import COLUMNS
from tiered.jobs.tier_batch import SCHEMA_DDL
from tiered.jobs.tier_batch import arrow_schema
from tiered.jobs.tier_read import PartitionReader
from tiered.jobs.tier_scan import DEFAULT_READ_BYTES
from tiered.jobs.tier_scan import DEFAULT_SPLIT_BYTES
from tiered.jobs.tier_scan import FORMAT_NAME
from tiered.jobs.tier_scan import Bounds
from tiered.jobs.tier_scan import Options
from tiered.jobs.tier_scan import Partition
from tiered.jobs.tier_scan import Source
from tiered.jobs.tier_scan import load_sources
from tiered.jobs.tier_scan import plan
from tiered.providers import Provider

from tiered.config import TieredConfig
from tiered.errors import ConfigError
from tiered.errors import MissingDependencyError
from tiered.metadata import LONG_MAX

PUSHDOWN_CONF: Final = "spark.sql.python.filterPushdown.enabled"


class TierSource(DataSource):
    """The data source; register it once per session: ``spark.dataSource.register(TierSource)``."""

    @classmethod
    def name(cls) -> str:
        """The format name; on the driver, ``spark.dataSource.register`` asks for it just before
        it hands the class to Spark with the session's worker Python, which is checked here."""
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context  # None in a Python worker and in Spark Connect
        if sc is not None:
            check_worker_python(sc)
        return FORMAT_NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        pushdown = Options(self.options).get("pushdown", "true").lower()
        if pushdown not in ("true", "false"):
            raise ConfigError(f"option pushdown={pushdown!r}: give true or false")
        pushing = pushdown == "true" and _spark_pushes_filters()
        kind = FilteringTierReader if pushing else TierReader
        return kind(self.options, schema)


_PUSHDOWN_WORKERS: Final = frozenset({"pyspark.sql.worker.data_source_pushdown_filters"})
"""PySpark's worker modules that call ``reader()`` to push filters into the reader."""


def _spark_pushes_filters() -> bool:
    """Whether this ``reader()`` call comes from PySpark's filter-pushdown worker.

    Spark runs that worker only with ``spark.sql.python.filterPushdown.enabled``; its planning
    worker, used otherwise, refuses a reader that has ``pushFilters``
    (``DATA_SOURCE_PUSHDOWN_DISABLED``). Both run in a Python worker without the session, so the
    setting shows only in who calls: a caller not recognised reads without pushdown (every row
    still right, Spark filters them).
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        spec = frame.f_globals.get("__spec__")  # a worker run as __main__ (python -m) has its name
        if (getattr(spec, "name", None) or frame.f_globals.get("__name__")) in _PUSHDOWN_WORKERS:
            return True
        frame = frame.f_back
    return False


_WORKER_PYTHONS: set[str] = set()
"""Worker Pythons found to import the source (each is checked once per driver process)."""

_PROBE: Final = "import tiered.jobs.tier_scan"
"""What a worker needs of rocketmq-tiered and its dependencies (pyspark it gets from Spark)."""


def check_worker_python(sc: Any) -> None:
    """Make sure the Python that Spark starts for the source's workers can import it.

    Spark starts ``sc.pythonExec`` (``PYSPARK_PYTHON``, else ``python3`` from the PATH), which
    often is not the Python that has rocketmq-tiered installed, and the workers then fail with
    only ``No module named 'tiered'``. That Python is tried here, from this working directory as
    the workers have it. With a local master and ``PYSPARK_PYTHON`` unset the session's workers
    are switched to this Python, with a warning; otherwise the error names the fix.

    Raises:
        MissingDependencyError: the worker Python cannot import the source.
    """
    python = str(sc.pythonExec)
    if python in _WORKER_PYTHONS or _imports_source(python):
        _WORKER_PYTHONS.add(python)
        return
    if str(sc.master).startswith("local") and "PYSPARK_PYTHON" not in os.environ:
        sc.pythonExec = sys.executable
        warnings.warn(
            f"Spark's Python workers would run {python!r}, which cannot import rocketmq-tiered: "
            f"{FORMAT_NAME} switched this session's workers to {sys.executable} (set "
            f"PYSPARK_PYTHON={sys.executable} before the session starts to choose it yourself)",
            RuntimeWarning,
            stacklevel=4,  # the caller of spark.dataSource.register
        )
        return
    raise MissingDependencyError(
        f"Spark's Python workers run {python!r}, which cannot import rocketmq-tiered, and the "
        f"{FORMAT_NAME} data source runs in them: start the session with "
        f"PYSPARK_PYTHON={sys.executable} in the environment (with spark-submit: --conf "
        "spark.pyspark.python=...), a Python that has rocketmq-tiered installed, here and on "
        "every executor"
    )


def _imports_source(python: str) -> bool:
    """Whether ``python`` (a name on the PATH or a path) imports the source's reading side."""
    path = shutil.which(python)
    if path is None:
        return False
    if os.path.abspath(path) == os.path.abspath(sys.executable):
        return True
    try:
        done = subprocess.run([path, "-c", _PROBE], capture_output=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:  # cannot tell: let Spark try it
        return True
    except OSError:
        return False
    return done.returncode == 0


class TierPartition(InputPartition):
    """A planned :class:`~tiered.jobs.tier_scan.Partition` as Spark carries it."""

    def __init__(self, part: Partition):
        super().__init__(part)


def _columns(schema: StructType) -> list[str]:
    """The schema's column names, checked against the table's columns and types."""
    known = dict(COLUMNS)
    names = []
    for f in schema.fields:
        if f.name not in known:
            raise ConfigError(
                f"column {f.name!r} is not a column of {FORMAT_NAME}: choose from "
                f"{', '.join(known)}"
            )
        expected = arrow_schema([f.name]).field(0).type
        given = arrow_schema_of(f)
        if given is not None and not given.equals(expected):
            raise ConfigError(
                f"column {f.name!r} is {known[f.name]} in {FORMAT_NAME}, not "
                f"{f.dataType.simpleString()}: fix the schema"
            )
        names.append(f.name)
    return names


def arrow_schema_of(f: Any) -> pa.DataType | None:
    """The Arrow type Spark uses for a schema field (``None`` if it has none)."""
    from pyspark.sql.pandas.types import to_arrow_type

    try:
        return to_arrow_type(f.dataType, timezone="UTC")
    except Exception:  # a type Arrow cannot carry: the column check names it
        return None


class TierReader(DataSourceReader):
    """Plans on the driver (metadata read once), reads on the executors."""

    def __init__(self, options: Mapping[str, str], schema: StructType):
        self.options = Options(options)
        self.columns = _columns(schema)
        self.bounds = Bounds.from_options(self.options)
        self.on_corrupt = self.options.get("onCorrupt", "fail")
        if self.on_corrupt not in ("fail", "skip"):
            raise ConfigError(f"option onCorrupt={self.on_corrupt!r}: give fail or skip")
        self.read_bytes = _size(self.options, "readBytes", DEFAULT_READ_BYTES)
        self.split_bytes = _size(self.options, "splitBytes", DEFAULT_SPLIT_BYTES)
        self.stats_dir = self.options.get("statsDir")
        self.sources: list[Source] = load_sources(self.options)

    def partitions(self) -> list[InputPartition]:
        parts = plan(self.sources, self.bounds, split_bytes=self.split_bytes)
        # executors need only the configurations: the partitions carry the segments
        self.sources = [s.without_document() for s in self.sources]
        return [TierPartition(p) for p in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part: Partition = partition.value
        provider = _provider(self.sources[part.queue.source])
        reader = PartitionReader(
            provider, self.columns, on_corrupt=self.on_corrupt, read_bytes=self.read_bytes
        )
        try:
            yield from reader.read(part)
            reader.write_stats(self.stats_dir, part.name)
        finally:
            reader.close()


_PROVIDERS: dict[tuple[str, str, TieredConfig], Provider] = {}
"""A Python worker's providers, one per backend configuration: Spark reuses a worker for many
tasks, and an object store's client, connections and listings are worth keeping."""


def _provider(source: Source) -> Provider:
    key = (source.cluster, source.broker, source.cfg)  # by value, the secret key included
    if key not in _PROVIDERS:
        _PROVIDERS[key] = source.provider(read_ahead=False)
    return _PROVIDERS[key]


def _size(options: Mapping[str, str], name: str, default: int) -> int:
    text = options.get(name)
    if text is None:
        return default
    if not text.isdigit() or int(text) < 4096:
        raise ConfigError(f"option {name}={text!r} must be a byte count >= 4096")
    return int(text)


class FilteringTierReader(TierReader):
    """:class:`TierReader` that also takes Spark's pushed filters (needs ``PUSHDOWN_CONF``)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 (Spark's name)
        for f in filters:
            self.bounds = _narrow(self.bounds, f)
        return filters  # Spark applies them all again: pushdown only prunes


def _column(f: Any) -> str | None:
    attr: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
    return attr[0] if len(attr) == 1 else None


def _micros(value: Any) -> int | None:
    """Epoch microseconds of a pushed timestamp value (``None`` if it is not one)."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int((value - datetime(1970, 1, 1, tzinfo=UTC)) // _MICRO)


_MICRO: Final = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)

_SETS: Final = {
    "topic": ("topics", str),
    "queueId": ("queue_ids", int),
    "broker": ("brokers", str),
    "cluster": ("clusters", str),
    "uniqKey": ("uniq_keys", str),
}


def _narrow(b: Bounds, f: Filter) -> Bounds:
    """``b`` tightened by one pushed filter (a filter the source cannot use leaves it as is)."""
    col = _column(f)
    if col in _SETS:
        name, kind = _SETS[col]
        values = (f.value,) if isinstance(f, EqualTo) else f.value if isinstance(f, In) else None
        if values is None or not all(isinstance(v, kind) for v in values):
            return b
        return b.narrow(**{name: values})
    if col == "queueOffset" and isinstance(getattr(f, "value", None), int):
        v = f.value  # type: ignore[attr-defined]
        limits = {
            EqualTo: {"q_lo": v, "q_hi": v + 1},
            GreaterThan: {"q_lo": v + 1},
            GreaterThanOrEqual: {"q_lo": v},
            LessThan: {"q_hi": v},
            LessThanOrEqual: {"q_hi": v + 1},
        }.get(type(f))
        return b.narrow(**limits) if limits else b
    if col == "storeTimestamp":
        micros = _micros(getattr(f, "value", None))
        if micros is None:
            return b
        lo, hi = micros // 1000, -(-micros // 1000)  # epoch ms at or before / at or after
        limits = {
            EqualTo: {"t_lo": hi, "t_hi": lo + 1},
            GreaterThan: {"t_lo": lo + 1},
            GreaterThanOrEqual: {"t_lo": hi},
            LessThan: {"t_hi": hi},
            LessThanOrEqual: {"t_hi": min(lo + 1, LONG_MAX)},
        }.get(type(f))
        return b.narrow(**limits) if limits else b
    return b


def register(spark: Any) -> None:
    """Register :class:`TierSource` with ``spark`` (``spark.dataSource.register``)."""
    spark.dataSource.register(TierSource)
