"""The ``rmq-tiered`` command line.

Every command prints one clear line and exits non-zero on a user mistake (bad option, bad file,
corrupt input); a traceback only ever means a bug.
"""

from __future__ import annotations

import click

from tiered.cli.common import Group
from tiered.cli.compact_index import compact_index
from tiered.cli.demo import demo
from tiered.cli.dispatch import dispatch
from tiered.cli.explain import explain
from tiered.cli.fetch import fetch
from tiered.cli.gen_store import gen_store
from tiered.cli.inspect import inspect_group
from tiered.cli.query import query
from tiered.cli.recover import recover
from tiered.cli.run import run
from tiered.cli.status import status


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rocketmq-tiered", prog_name="rmq-tiered")
def main() -> None:
    """rocketmq-tiered: offload a RocketMQ broker's messages to tiered storage, read them back."""


main.add_command(inspect_group)
main.add_command(gen_store)
main.add_command(demo)
main.add_command(run)
main.add_command(dispatch)
main.add_command(status)
main.add_command(recover)
main.add_command(fetch)
main.add_command(explain)
main.add_command(query)
main.add_command(compact_index)
