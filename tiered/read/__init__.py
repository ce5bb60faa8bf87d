"""Cold reads: what every front end (HTTP, the replay endpoint, the CLI, Spark) reads through.

- :mod:`.message_store` -- :class:`~.message_store.TieredMessageStore`, the read API;
- :mod:`.read_route` -- which tier serves a read (``tieredStorageLevel`` and its overrides);
- :mod:`.fetcher` -- verified runs of messages from the flat files; :mod:`.read_cache` -- the
  read-ahead cache; :mod:`.read_unit` -- :class:`~.read_unit.Unit`, what every read returns;
- :mod:`.tag_filter`, :mod:`.time_search` -- tag subscriptions and offsets by time.

May import ``tiered.source``, the container layer, the driver layer and ``tiered.broker``;
imported by ``tiered.core`` and the front ends, never by ``tiered.offload``.
"""
