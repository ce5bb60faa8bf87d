"""Work begun on a thread of its own, waited for later: a system call or a kernel call that runs
without the interpreter lock while the caller goes on."""

from __future__ import annotations

import threading
from collections.abc import Callable


def in_background(work: Callable[[], object], name: str = "background") -> Callable[[], None]:
    """``work`` begun on a thread of its own (a system call that waits for the disk, without the
    interpreter lock); the function returned waits for it and raises what it raised."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as e:  # handed to the caller
            failed.append(e)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def wait() -> None:
        thread.join()
        if failed:
            raise failed[0]

    return wait
