"""Concurrent writes of one atomic file (the index progress saver thread and a put both save the
fast progress copy): every write completes, none renames another's temporary file."""

from __future__ import annotations

import threading
from pathlib import Path

from tiered.metadata.atomic import AtomicFile


def test_concurrent_writes_of_one_file_all_complete(tmp_path: Path) -> None:
    target = AtomicFile(tmp_path / "progress.fast.json")
    errors: list[BaseException] = []

    def writer(tag: int) -> None:
        try:
            for i in range(200):
                target.write(f'{{"w":{tag},"i":{i}}}'.encode(), sync=False)
        except BaseException as e:  # collected for the assertion below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert target.path.read_bytes().endswith(b'"i":199}')
    assert not (tmp_path / "progress.fast.json.tmp").exists()
