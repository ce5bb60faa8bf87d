"""An in-process Spark session with the settings that work on a small host (``local[*]``).

``local_spark_session`` is for the sidecar (``rmq-tiered compact-index`` and the scheduled
compaction inside ``rmq-tiered run``) and for tests; ``spark-submit`` builds its own session.
Spark allows one active session per process: a second call returns the first session, whatever
its arguments.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from tiered.errors import MissingDependencyError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"


def local_spark_session(
    master: str = DEFAULT_MASTER,
    *,
    app_name: str = "rmq-tiered",
    driver_memory: str = "2g",
    shuffle_partitions: int = 8,
) -> SparkSession:
    """Start (or return) the process's Spark session.

    Python workers run this interpreter (``PYSPARK_PYTHON``), so they import the same pyarrow and
    numpy; Spark binds to 127.0.0.1 unless ``SPARK_LOCAL_IP`` says otherwise; the UI and the
    console progress bar are off. ``driver_memory`` only applies to the first session of a
    process (the JVM starts once). With a ``local`` master shuffle compression is off (it only
    costs CPU when the shuffle never leaves the host).

    Raises:
        MissingDependencyError: pyspark is not installed.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise MissingDependencyError(
            "the index compaction job needs pyspark: pip install 'rocketmq-tiered[spark]' "
            "(and Java 17+ on PATH)"
        ) from e
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # workers start as `python -m pyspark.daemon`, which puts the working directory first on
    # sys.path: in a source checkout its tiered/ (without jobs/ and providers/) would shadow the
    # installed package the data source's executors import
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "262144")
        .config("spark.sql.python.filterPushdown.enabled", "true")  # the tier source prunes
        .config("spark.executorEnv.PYTHONSAFEPATH", "1")
    )
    if master.startswith("local"):  # one disk, no network: compressing shuffle blocks only costs
        builder = builder.config("spark.shuffle.compress", "false").config(
            "spark.shuffle.spill.compress", "false"
        )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
