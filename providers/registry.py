"""The provider registry: names, upstream Java class aliases, and third-party entry points.

Built-in providers are registered as ``module:Class`` strings and imported on first use, so boto3
is only imported when the s3 provider is asked for. Third-party packages add providers through
the entry-point group ``rocketmq_tiered.providers`` (name = provider name, value =
``package.module:ProviderClass``); they are read once, when a name is not found or the table is
listed. Nothing is replaced silently: ``register`` refuses a taken name unless ``replace=True``,
and an entry point whose name is taken is skipped with a warning naming both.
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
from typing import TYPE_CHECKING
from typing import Any
from typing import NamedTuple

from tiered.errors import ConfigError

from .base import Provider

if TYPE_CHECKING:
    from tiered.config import TieredConfig

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "rocketmq_tiered.providers"
_UPSTREAM = "org.apache.rocketmq.tieredstore.provider."
_NAME = re.compile(r"[a-z][a-z0-9_]*")

BUILTINS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "posix",
        "tiered.providers.posix:PosixProvider",
        (f"{_UPSTREAM}PosixFileSegment", f"{_UPSTREAM}posix.PosixFileSegment"),
    ),
    (
        "memory",
        "tiered.providers.memory:MemoryProvider",
        (f"{_UPSTREAM}MemoryFileSegment", f"{_UPSTREAM}memory.MemoryFileSegment"),
    ),
    ("s3", "tiered.providers.s3:S3Provider", ()),
    ("fsspec", "tiered.providers.fsspec:FsspecProvider", ()),
)
"""(name, ``module:Class``, upstream class-name aliases) of the providers shipped here: the one
table of their names."""
BUILTIN_NAMES: tuple[str, ...] = tuple(name for name, _, _ in BUILTINS)


def builtin_name(name: str) -> str | None:
    """The built-in provider ``name`` stands for (a name in any case, or an upstream Java class
    name), or None. The configuration checks its key with this without loading entry points."""
    for builtin, _, aliases in BUILTINS:
        if name.lower() == builtin or name in aliases:
            return builtin
    return None


class ProviderEntry(NamedTuple):
    """One row of the registry table."""

    name: str
    target: str
    aliases: tuple[str, ...]
    source: str


class ProviderRegistry:
    """A table of providers by name; thread-safe."""

    def __init__(self, *, builtins: bool = True, entry_point_group: str | None = ENTRY_POINT_GROUP):
        self._entries: dict[str, ProviderEntry] = {}
        self._classes: dict[str, type[Provider]] = {}
        self._aliases: dict[str, str] = {}
        self._group = entry_point_group
        self._entry_points_loaded = entry_point_group is None
        self._lock = threading.RLock()
        for name, target, aliases in BUILTINS if builtins else ():
            self.register(name, target, aliases=aliases, source="builtin")

    def register(
        self,
        name: str,
        target: type[Provider] | str,
        *,
        aliases: tuple[str, ...] = (),
        replace: bool = False,
        source: str = "registered",
    ) -> None:
        """Add a provider class (or its ``module:Class`` path) under ``name`` and ``aliases``.

        Raises:
            ConfigError: ``name`` is not lower-case ``[a-z][a-z0-9_]*``, or it or an alias is
                taken and ``replace`` is false.
        """
        if not _NAME.fullmatch(name):
            raise ConfigError(f"provider name {name!r} must match [a-z][a-z0-9_]*")
        text = target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}"
        with self._lock:
            for taken in (name, *aliases):
                owner = self._find(taken)
                if owner is not None and not replace:
                    raise ConfigError(
                        f"provider name {taken!r} is taken by {owner!r} "
                        f"({self._entries[owner].target}); pass replace=True to replace it"
                    )
            old = self._entries.get(name)
            for alias in old.aliases if old else ():
                self._aliases.pop(alias, None)
            self._entries[name] = ProviderEntry(name, text, tuple(aliases), source)
            self._classes.pop(name, None)
            if not isinstance(target, str):
                self._classes[name] = target
            for alias in aliases:
                self._aliases[alias] = name

    def canonical(self, name: str) -> str:
        """The registered name for a name or alias.

        Raises:
            ConfigError: nothing is registered under ``name``.
        """
        with self._lock:
            found = self._find(name)
            if found is None and not self._entry_points_loaded:
                self._load_entry_points()
                found = self._find(name)
        if found is None:
            raise ConfigError(
                f"tieredBackendServiceProvider={name!r} is not a provider; available: "
                f"{', '.join(self.names())} (third-party providers register under the "
                f"entry-point group {ENTRY_POINT_GROUP!r})"
            )
        return found

    def _find(self, name: str) -> str | None:
        if name in self._entries:
            return name
        return self._aliases.get(name)

    def resolve(self, name: str) -> type[Provider]:
        """The provider class for a name or alias, imported on first use.

        Raises:
            ConfigError: unknown name, or the target is not a Provider subclass.
            MissingDependencyError: the provider's optional dependency is missing.
        """
        canonical = self.canonical(name)
        with self._lock:
            cls = self._classes.get(canonical)
            if cls is None:
                cls = self._import(self._entries[canonical])
                self._classes[canonical] = cls
        return cls

    @staticmethod
    def _import(entry: ProviderEntry) -> type[Provider]:
        module_name, _, attr = entry.target.partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
        if not (isinstance(obj, type) and issubclass(obj, Provider)):
            raise ConfigError(f"provider {entry.name!r} ({entry.target}) is not a Provider class")
        return obj

    def create(self, name: str, **kwargs: Any) -> Provider:
        """A new provider of ``name`` built with ``kwargs`` (its constructor's parameters)."""
        return self.resolve(name)(**kwargs)

    def names(self) -> list[str]:
        """Every registered name, sorted (entry points included)."""
        return [entry.name for entry in self.table()]

    def table(self) -> list[ProviderEntry]:
        """Every entry, sorted by name (entry points included)."""
        with self._lock:
            if not self._entry_points_loaded:
                self._load_entry_points()
            return sorted(self._entries.values(), key=lambda e: e.name)

    def _load_entry_points(self) -> None:
        self._entry_points_loaded = True
        assert self._group is not None
        from importlib.metadata import entry_points  # only when a name is not built in

        for ep in sorted(entry_points(group=self._group), key=lambda e: e.name):
            dist = getattr(ep.dist, "name", "?")
            owner = self._find(ep.name)
            if owner is not None:
                log.warning(
                    "entry point %s=%s (from %s) not loaded: the name is taken by %s",
                    ep.name,
                    ep.value,
                    dist,
                    self._entries[owner].target,
                )
                continue
            try:
                self.register(ep.name, ep.value, source=f"entry point ({dist})")
            except ConfigError as e:
                log.warning(
                    "entry point %s=%s (from %s) not loaded: %s", ep.name, ep.value, dist, e
                )


registry = ProviderRegistry()
"""The process-wide registry."""


def provider_from_settings(name: str, **kwargs: Any) -> Provider:
    """A provider by name or alias, built with its constructor's keyword arguments."""
    return registry.create(name, **kwargs)


def from_config(cfg: TieredConfig, reg: ProviderRegistry | None = None) -> Provider:
    """The provider ``tieredBackendServiceProvider`` names, built by its class's
    ``from_config(cfg)`` (:meth:`Provider.from_config`: with no arguments unless the class
    says otherwise)."""
    reg = reg or registry
    name = reg.canonical(cfg.tiered_backend_service_provider)
    provider = reg.resolve(name).from_config(cfg)
    if not isinstance(provider, Provider):
        raise ConfigError(f"provider {name!r}.from_config returned {provider!r}, not a Provider")
    return provider


def build_provider(cfg: TieredConfig) -> Provider:
    """The configured provider (:func:`from_config`) wrapped for metrics and request accounting,
    and under the byte quotas when ``tieredUploadMaxBytesPerSecond`` or
    ``tieredReadMaxBytesPerSecond`` is set (outside the metrics: their latencies are the
    backend's, not the quota's wait), as every command of the sidecar uses it."""
    from .quota import QuotaProvider
    from .wrappers import MetricsProvider

    return QuotaProvider.wrap(MetricsProvider(from_config(cfg)), cfg)
