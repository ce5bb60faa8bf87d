"""Configuration: RocketMQ-style properties files, ``RMQ_TIERED_<key>`` overrides, a frozen model.

Keys and defaults are upstream's (``org.apache.rocketmq.tieredstore.MessageStoreConfig``, spec
section 11) plus the broker keys the sidecar reads and a few of its own. Files use the upstream
camelCase names; the model's Python names are snake_case with the unit spelled out. The broker's own
``broker.conf`` may be one of the files: a key the sidecar does not use is ignored only when it is a
known broker key (:mod:`tiered.config.broker_keys`); anything else is an error with a did-you-mean.

Precedence, lowest first: model defaults, files in the order given (later wins), environment
variables ``RMQ_TIERED_<key>``, explicit ``overrides``.
"""

from __future__ import annotations

from tiered.config.loader import load_config
from tiered.config.model import TieredConfig
from tiered.config.properties import parse_properties
from tiered.config.values import ENV_PREFIX
from tiered.config.values import LOG_FORMATS
from tiered.config.values import LOG_LEVELS
from tiered.config.values import PROVIDER_NAMES
from tiered.config.values import TLS_MODES
from tiered.config.values import BrokerRole
from tiered.config.values import DispatchStartPolicy
from tiered.config.values import MetricsDetail
from tiered.config.values import StorageLevel

__all__ = [
    "ENV_PREFIX",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "PROVIDER_NAMES",
    "TLS_MODES",
    "BrokerRole",
    "DispatchStartPolicy",
    "MetricsDetail",
    "StorageLevel",
    "TieredConfig",
    "load_config",
    "parse_properties",
]
