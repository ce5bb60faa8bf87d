"""The broker's local store, read-only (spec sections 1-4): codecs and readers of its commitlog,
consumequeues, index files, checkpoint and config JSON, bulk header-field access for many units
at once (:mod:`.unit_fields`, :mod:`.coalesce`), one read-only file read (:mod:`.read_only`),
its page cache (:mod:`.page_cache`), and a
generator that writes a byte-exact store for tests and the demo (:mod:`.generator`).

The bottom of the stack beside ``tiered.providers``: imports nothing of the sidecar but
``tiered.errors`` and ``tiered.broker.javautil``; nothing here ever writes to a broker's directory.
"""
