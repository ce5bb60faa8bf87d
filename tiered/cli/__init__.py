"""The ``rmq-tiered`` command line.

Every command prints one clear line and exits non-zero on a user mistake (bad option, bad file,
corrupt input); a traceback only ever means a bug. A command's module is imported when the command
runs (or ``--help`` lists them all): ``dispatch`` does not pay for the HTTP app's imports.
"""

from __future__ import annotations

import gc
import os
import sys
import types

# numpy's OpenBLAS starts one thread per core when numpy is imported. Nothing here multiplies
# matrices, so those threads only cost CPU at every start, taken from the broker's node: one thread
# unless the operator says otherwise. It must be set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import click

from tiered.cli.common import Group
from tiered.process import allocator

COMMANDS = {
    "inspect": "tiered.cli.inspect:inspect_group",
    "gen-store": "tiered.cli.gen_store:gen_store",
    "demo": "tiered.cli.demo:demo",
    "run": "tiered.cli.run:run",
    "serve": "tiered.cli.serve:serve",
    "dispatch": "tiered.cli.dispatch:dispatch",
    "status": "tiered.cli.status:status",
    "pause": "tiered.cli.pause:pause",
    "resume": "tiered.cli.pause:resume",
    "recover": "tiered.cli.recover:recover",
    "scrub": "tiered.cli.scrub:scrub",
    "fetch": "tiered.cli.fetch:fetch",
    "explain": "tiered.cli.explain:explain",
    "query": "tiered.cli.query:query",
    "compact-index": "tiered.cli.compact_index:compact_index",
    "export": "tiered.cli.export:export",
}
SERVED = frozenset({"run", "serve"})
"""Commands whose process serves ``/metrics`` (and sets ``tieredMetricsDetail`` for it)."""
UNSERVED = frozenset(COMMANDS) - SERVED
"""Commands whose process serves no ``/metrics``: run as the console script, they record none
(a ``recover`` or ``scrub`` of 16,000 queues would otherwise make a latency histogram for every
queue's files that nothing ever reads: hundreds of MB)."""


@click.group(
    cls=Group,
    lazy=COMMANDS,
    unserved=UNSERVED,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="rocketmq-tiered", prog_name="rmq-tiered")
def main() -> None:
    """rocketmq-tiered: offload a RocketMQ broker's messages to tiered storage, read them back."""
    allocator.tune()
    if not gc.isenabled():  # started by entry(): the command's modules are loaded
        gc.freeze()
        gc.enable()


def entry() -> None:
    """The ``rmq-tiered`` console script: :func:`main`, with the cyclic collector off while the
    command's libraries load (numpy, pydantic, prometheus_client: it would run dozens of times over
    every object made so far, yet imports make almost no garbage). ``main`` then moves what the
    imports made out of the collector's reach for good (``gc.freeze``: a long ``run`` never
    traverses it again) and turns it back on.

    The process is the command's own: an :data:`UNSERVED` command records no metrics, and
    pydantic looks for no plugins unless the operator sets ``PYDANTIC_DISABLE_PLUGINS`` (the
    sidecar uses none; the search reads the entry points of every installed distribution)."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _no_plugin_search()
    gc.disable()
    main.console_script = True
    main()


def _no_plugin_search() -> None:
    """With ``PYDANTIC_DISABLE_PLUGINS=__all__`` (or ``1``, ``true``) pydantic's plugin loader
    finds no plugins, yet pydantic imports it at its first model, and with it
    ``importlib.metadata`` (zipfile, email, csv, tempfile, socket: about 4 % of a one-shot
    command's instructions) for a function that then returns nothing. Stand in for the loader
    with that function alone; any other setting keeps pydantic's own."""
    name = "pydantic.plugin._loader"
    off = os.environ.get("PYDANTIC_DISABLE_PLUGINS") in ("__all__", "1", "true")
    if not off or name in sys.modules:
        return
    loader = types.ModuleType(name, "pydantic's plugin loader with every plugin disabled")
    loader.get_plugins = tuple  # type: ignore[attr-defined]  # () as get_plugins() returns
    sys.modules[name] = loader
