"""The replay endpoint: RocketMQ's 4.x remoting protocol (TCP) in front of the access layer.

``rmq-tiered run`` answers name-server requests (routes that point back at the sidecar) and
read-only broker requests (pull with long polling, offsets, search by time, query by key, view by
id, replay groups' consumer offsets, orderly consumers' queue locks, and the read-only admin
requests of ``mqadmin``) on one port, so unmodified RocketMQ consumers and admin tools replay the
whole history with only ``namesrvAddr`` changed.

Modules, bottom up: :mod:`.codes` (request and response codes, flags), :mod:`.frame` (the frame
codec, JSON and ROCKETMQ headers), :mod:`.fields` (reading extFields), :mod:`.body` (bodies as
fastjson writes them), :mod:`.acl` (``plain_acl.yml`` accounts and request signatures),
:mod:`.groups` (heartbeats and the replay groups' offsets), :mod:`.locks` (orderly consumers'
queue locks), :mod:`.naming` (routes and cluster info), :mod:`.admin` (the ``mqadmin`` requests:
runtime info, topic lists and stats, consume stats, connections), :mod:`.handlers` (one function
per request code over :class:`~tiered.read.message_store.TieredMessageStore`), :mod:`.server`
(threaded TCP server: connection limit, idle timeout, long polling), :mod:`.client` (a small
blocking client for tests, benchmarks and scripts). Imports point down: the package uses the
access layer (``tiered.core``, ``tiered.index``) and nothing below it knows the protocol exists;
only the CLI imports it.
"""
