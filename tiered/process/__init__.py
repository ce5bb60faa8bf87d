"""What a sidecar process sets up for itself, whatever command it runs.

- :mod:`.allocator` -- the C allocator's settings for megabyte buffers;
- :mod:`.background` -- work begun on a thread of its own and waited for later;
- :mod:`.collector` -- the cyclic garbage collector paused while thousands of objects are made;
- :mod:`.native` -- the compiled kernel, ``tiered._kernel``, or the error that says how to build it;
- :mod:`.offload_priority` -- the CPU priority of the offload's own threads;
- :mod:`.logs` -- the log handler (text or JSON) and the fields of error lines;
- :mod:`.listen` -- the listening sockets of the HTTP API and the replay endpoint.

The bottom of the stack with ``tiered.errors``: imports nothing else of the sidecar, so every
room may import it.
"""
