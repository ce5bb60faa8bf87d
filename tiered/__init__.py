"""rocketmq-tiered: tiered-storage offload sidecar for Apache RocketMQ brokers."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__version__ = "0.1.0"


class _SourceTreeFinder:
    """Finds ``tiered.providers`` and ``tiered.jobs`` in a source checkout's providers/ and jobs/,
    where the installed package has them (pyproject's package-dir); no other name."""

    def __init__(self, packages: dict[str, str]):
        self.rocketmq_tiered_packages = packages

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None, /
    ) -> ModuleSpec | None:
        folder = self.rocketmq_tiered_packages.get(fullname)
        if folder is None:
            return None
        from importlib.util import spec_from_file_location

        init = os.path.join(folder, "__init__.py")
        return spec_from_file_location(fullname, init, submodule_search_locations=[folder])


def _map_source_tree() -> None:
    """Imported from a source checkout (its root first on ``sys.path``, as for ``python -m``
    there, which is how Spark starts its Python workers), find the subpackages the checkout keeps
    beside ``tiered/`` as the installed package does. Installed (a wheel, the editable link tree:
    ``__file__`` is not resolved through its links) nothing changes."""
    here = os.path.dirname(__file__)
    root = os.path.dirname(here)
    if not os.path.isfile(os.path.join(root, "pyproject.toml")):
        return
    packages = {
        f"{__name__}.{sub}": os.path.join(root, sub)
        for sub in ("providers", "jobs")
        if os.path.isfile(os.path.join(root, sub, "__init__.py"))
        and not os.path.exists(os.path.join(here, sub))
    }
    mapped = (getattr(f, "rocketmq_tiered_packages", None) for f in sys.meta_path)
    if packages and packages not in mapped:  # imported again (reload): one finder is enough
        sys.meta_path.append(_SourceTreeFinder(packages))


_map_source_tree()
