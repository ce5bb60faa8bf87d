"""The read-only HTTP API (FastAPI): :mod:`.app` (routes over a
:class:`~tiered.read.message_store.TieredMessageStore`), :mod:`.key_routes` (queries by key),
:mod:`.accounting` (request metrics), :mod:`.server` (uvicorn on a socket bound up front) and
:mod:`.service` (the app of ``rmq-tiered run`` with its health checks).

A front end: imports the access layer (``tiered.core``, ``tiered.index.service``) and below;
only ``tiered.cli`` imports it.
"""
