"""The replay endpoint: RocketMQ's 4.x remoting protocol (TCP) in front of the access layer.

``rmq-tiered run`` answers name-server requests (routes that point back at the sidecar) and
read-only broker requests (pull with long polling, offsets, search by time, query by key, view by
id, replay groups' consumer offsets, orderly consumers' queue locks, and the read-only admin
requests of ``mqadmin``) on one port, so unmodified RocketMQ consumers and admin tools replay the
whole history with only ``namesrvAddr`` changed.

The modules go bottom up from :mod:`.codes` and :mod:`.frame` (the frame codec) to :mod:`.handlers`
(one function per request code) and :mod:`.server` (the TCP server). Imports point down: the package
uses the access layer (``tiered.core``, ``tiered.index``) and nothing below it knows the protocol
exists; only the CLI imports it.
"""
