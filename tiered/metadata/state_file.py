"""The sidecar's small JSON state files: one way to write, read and lose them.

Six files hold state of the sidecar's own (not upstream's): the orphan log
(``config/tieredOrphanObjects.json``), the dispatcher's status file (``status/dispatcher.json``),
the key index's progress (``tiered_index_file/progress.json``), the replay groups' offsets
(``config/replayConsumerOffset.json``), their POP state (``config/replayPopState.json``) and the
pause switch (``config/tieredUploadsPaused.json``). Each is ``{"version": N, ...}`` and goes
through a :class:`JsonStateFile`:

* written atomically (:class:`~tiered.metadata.atomic.AtomicFile`: temp file, rename, the previous
  version kept as ``.bak``; fsync'd unless the owner says the file may lag after a power loss);
* read through the owner's one parse function, after the version check;
* a file that does not parse -- truncated, binary, not an object, wrong types, a missing field,
  another version -- is never fatal: the ``.bak`` is used when it parses, otherwise both are moved
  aside (``{name}.corrupt-{ms}``, never deleted), one warning names them and what is lost, and the
  owner starts empty. Each owner's docstring says what "empty" costs (history, re-work), never data.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from typing import Generic
from typing import TypeVar

from .atomic import AtomicFile

__all__ = ["DAMAGE", "JsonStateFile"]

log = logging.getLogger(__name__)

T = TypeVar("T")
DAMAGE = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError)
"""What a parse function may raise on a damaged document (json's errors are ValueErrors)."""


class JsonStateFile(Generic[T]):
    """``path`` holding ``{"version": version, ...}``, parsed by ``parse`` (which raises one of
    :data:`DAMAGE` on a bad shape); ``loses`` says what a damaged file costs, for the warning."""

    def __init__(
        self, path: Path, version: int, parse: Callable[[dict[str, Any]], T], loses: str
    ) -> None:
        self.file = AtomicFile(Path(path))
        self.version = version
        self.parse = parse
        self.loses = loses

    @property
    def path(self) -> Path:
        return self.file.path

    def _read(self, path: Path) -> T:
        document = json.loads(path.read_bytes())
        if not isinstance(document, dict):
            raise TypeError(f"not a JSON object but {type(document).__name__}")
        if document.get("version") != self.version:
            raise ValueError(f"version {document.get('version')!r}, not {self.version}")
        return self.parse(document)

    def load(self, *, owner: bool = True) -> T | None:
        """The parsed state (from ``.bak`` when the file is damaged); None when there is none or
        both are damaged -- then the owner moves them aside with a warning; a reader beside it
        (``owner=False``, e.g. ``status``) changes nothing.

        Raises:
            OSError: a file exists but cannot be read (permissions): the operator must look.
        """
        if owner:
            self.file.drop_stale_temp()
        damaged: list[tuple[Path, str]] = []
        for candidate in (self.file.path, self.file.bak_path):
            try:
                state = self._read(candidate)
            except FileNotFoundError:
                continue
            except DAMAGE as e:
                damaged.append((candidate, f"{type(e).__name__}: {e}"))
                continue
            if damaged and owner:
                path, why = damaged[0]
                log.warning("%s is damaged (%s); read %s instead", path, why, candidate)
            return state
        if not owner:
            return None
        stamp = int(time.time() * 1000)
        for path, why in damaged:
            aside = AtomicFile.move_aside(path, stamp)
            log.warning("%s is damaged (%s): moved to %s; %s", path, why, aside, self.loses)
        return None

    def save(self, body: dict[str, Any], *, sync: bool = True) -> None:
        """Replace the file with ``{"version": ..., **body}`` (see the module docstring).

        Raises:
            OSError: the write failed; the file is still the previous version.
        """
        document = {"version": self.version, **body}
        self.file.write(json.dumps(document, separators=(",", ":")).encode("utf-8"), sync=sync)

    def save_listed(
        self, body: dict[str, Any], name: str, items: Iterable[Any], *, sync: bool = True,
        encoded: bool = False,
    ) -> None:  # fmt: skip
        """:meth:`save` of ``{**body, name: [*items]}``, each item encoded as it comes: a list of
        a dict per queue is never held whole (as Python objects it is many times its JSON);
        ``encoded``: the items are their JSON texts already."""
        encode = json.JSONEncoder(separators=(",", ":")).encode
        head = encode({"version": self.version, **body, name: []})  # (ends with "[]}")
        texts = items if encoded else (encode(item) for item in items)
        text = f"{head[:-2]}{','.join(texts)}]}}"
        self.file.write(text.encode("utf-8"), sync=sync)
