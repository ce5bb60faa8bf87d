"""Batch jobs of rocketmq-tiered (installs as ``tiered.jobs``), runnable in-process or on a cluster.

- :mod:`.compact_index` — the PySpark job that compacts SEALED tiered index files into the
  contiguous-slot format, byte-identical to upstream's compaction; in-process through
  ``compact_index_file(spark, input, output, slots=...)`` or as a file given to ``spark-submit``;
- :mod:`.session` — ``local_spark_session()``, the in-process ``local[*]`` session with settings
  that work on a small host.

Nothing in the container or driver layers imports this package; the CLI and the scheduler do,
lazily, because pyspark is an optional dependency (``pip install 'rocketmq-tiered[spark]'``).
"""
