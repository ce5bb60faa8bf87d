"""Test support shipped with the package (the runtime imports nothing from here): sample tiers
built by a real offload (:mod:`.sample_tier`), an independent checker of what a tier holds
(:mod:`.tier_check`, sharing no code with the offload path), what a key index must answer
(:mod:`.index_keys`), waiting on a started sidecar (:mod:`.processes`), Helm values sets
(:mod:`.helm_values`) and the types test fixtures share.
The provider conformance suite and the S3 test servers live beside the providers, in
``tiered.providers.testing``. May import any layer; nothing outside tests and benchmarks imports it.
"""

from __future__ import annotations

from collections.abc import Callable

from tiered.config import TieredConfig

ConfigFactory = Callable[..., TieredConfig]
"""A fixture that builds a sidecar configuration (the index tests' ``index_config``)."""

__all__ = ["ConfigFactory"]
