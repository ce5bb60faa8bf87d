"""Where the sidecar is assembled from its rooms.

- :mod:`.sidecar` -- one open sidecar (lock, metadata, flat files, dispatcher, index, expiry);
  :mod:`.daemon` runs it for ``rmq-tiered run``;
- :mod:`.metadata_rebuild` -- rebuilding lost metadata from the mirror or the backend listing;
- :mod:`.status_report` -- what ``status`` prints (read-only, beside a running sidecar);
- :mod:`.scrub` -- the tier checked against its metadata (``scrub``, read-only too; its report in
  :mod:`.scrub_report`, its unit and message checks in :mod:`.scrub_units`).

The offload is in ``tiered.offload``, the read path in ``tiered.read``, what both see of the
broker's store in ``tiered.source``. May import all of them and the layers below; imported by
the front ends (``tiered.cli``, ``tiered.http``, ``tiered.remoting``) and never by a room below.
"""
