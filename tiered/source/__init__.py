"""The broker's store as the offload and the read path both see it, one room below them.

- :mod:`.local_source` -- the broker's queues, offsets and messages (read-only, cached);
- :mod:`.topic_filter` -- which topics the sidecar offloads and serves (system topics,
  ``tieredStoreTopicInclude``/``Exclude``).

May import ``tiered.file``, ``tiered.broker`` and ``tiered.config``; imported by
``tiered.offload``, ``tiered.read`` and above.
"""
