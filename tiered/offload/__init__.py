"""Offload: what moves messages from the broker's store into the tier, and takes them out again.

- :mod:`.dispatcher` -- passes and rounds over the queues that moved; :mod:`.offload_step` --
  one queue's step in a round (plan, then execute); :mod:`.dispatch_state` -- per-queue counters
  and the status file; :mod:`.pass_queues` and :mod:`.commitlog_feed` -- which queues a pass
  looks at, learnt from the commitlog's new bytes; :mod:`.pause` -- the operator's switch that
  pauses and resumes the uploads;
- :mod:`.expiry` -- deleting segments past their reserve time; :mod:`.topic_retire` -- releasing
  and removing the topics the broker deleted.

May import ``tiered.source``, the container layer (``tiered.file``, ``tiered.index``,
``tiered.metadata``), the driver layer (``tiered.providers``) and ``tiered.broker``; imported by
``tiered.core`` (where the sidecar is assembled) and the front ends, never by ``tiered.read``.
"""
