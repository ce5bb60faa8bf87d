"""The access layer: what moves messages from the broker's store to the tier, and what reads
them back.

Offload:
- :mod:`.sidecar` -- one open sidecar (lock, metadata, flat files, dispatcher, index, expiry);
  :mod:`.daemon` runs it for ``rmq-tiered run``;
- :mod:`.dispatcher` -- rounds over every queue; :mod:`.offload_step` -- one queue's step in a
  round (plan, then execute); :mod:`.dispatch_state` -- per-queue counters and the status file;
- :mod:`.local_source` -- the broker's store as the dispatcher and the read path see it;
- :mod:`.expiry` -- deleting segments past their reserved time;
- :mod:`.metadata_rebuild` -- rebuilding lost metadata from the mirror or the backend listing;
- :mod:`.status_report` -- what ``status`` prints (read-only, beside a running sidecar).

Read:
- :mod:`.message_store` -- :class:`~.message_store.TieredMessageStore`, the read API every
  front end uses (HTTP, replay endpoint, CLI);
- :mod:`.read_route` -- which tier serves a read (``tieredStorageLevel``);
- :mod:`.fetcher` -- verified runs of messages from the flat files; :mod:`.read_cache` -- the
  read-ahead cache; :mod:`.read_unit` -- :class:`~.read_unit.Unit`, what every read returns;
- :mod:`.tag_filter`, :mod:`.topic_filter`, :mod:`.time_search`.

May import the container layer (``tiered.file``, ``tiered.index``, ``tiered.metadata``), the
driver layer (``tiered.providers``) and ``tiered.broker``; imported by the front ends
(``tiered.cli``, ``tiered.http``, ``tiered.remoting``) and never by a layer below.
"""
