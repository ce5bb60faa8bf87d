"""``rmq-tiered dispatch --once [--flush]``: one offload pass, with a progress bar and a summary."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import click

from tiered import metrics
from tiered.cli.common import EXIT_DATA_ERROR
from tiered.cli.common import console
from tiered.cli.common import emit_json
from tiered.cli.common import fail
from tiered.cli.common import verbose_option
from tiered.cli.common import warn
from tiered.cli.config_option import config_option
from tiered.cli.config_option import load
from tiered.cli.config_option import setup_logging
from tiered.cli.config_option import verbosity
from tiered.core.sidecar import Sidecar
from tiered.offload.dispatch_state import PassReport
from tiered.providers import Provider
from tiered.providers import RequestCounts
from tiered.providers import WrappedProvider
from tiered.providers import build_provider
from tiered.providers import from_config


@click.command("dispatch")
@config_option
@click.option("--once", is_flag=True, help="Run one pass and exit (required; `run` keeps going).")
@click.option(
    "--flush",
    is_flag=True,
    help="Ignore the group-commit time/count/size thresholds: upload everything the local "
    "store holds.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@verbose_option
def dispatch(
    configs: tuple[Path, ...], once: bool, flush: bool, as_json: bool, quiet: bool, verbose: int
) -> None:
    """Offload what the local store holds beyond the tier, once, then print a summary."""
    if not once:
        fail("dispatch runs one pass: pass --once (use `rmq-tiered run` to keep offloading)")
    cfg = load(configs)
    setup_logging(cfg, verbose_level=verbosity(verbose), quiet=True)
    if metrics.discarded():  # the console script's own process: nothing would read them
        provider: Provider = WrappedProvider(from_config(cfg))  # the same calls, none recorded
    else:
        provider = build_provider(cfg)
    counts = RequestCounts()
    provider.add_request_listener(counts)
    requests = counts.counts
    with Sidecar(cfg, provider) as sidecar:
        dispatcher = sidecar.dispatcher
        if cfg.tiered_store_read_only:
            warn("tieredStoreReadOnly=true: this sidecar never writes the tier, nothing uploaded")
        elif not dispatcher.uploading:
            warn(
                f"brokerRole={cfg.broker_role} brokerId={cfg.broker_id}: standing by, nothing "
                "uploaded (only a master uploads; tieredStoreUploadOnSlave=true overrides)"
            )
        bar = not quiet and not as_json and dispatcher.uploading and not dispatcher.paused()
        total = dispatcher.backlog() if bar else 0  # (every queue's bounds: for the bar only)
        show = total > 0
        with _progress_bar(show, total) as advance:
            report = dispatcher.run_pass(flush=flush, on_progress=advance)
    _summary(report, requests, as_json)
    if report.errors:
        failed = "; ".join(f"{path}: {err}" for path, err in sorted(report.errors.items()))
        fail(f"{len(report.errors)} queues could not be offloaded: {failed}", EXIT_DATA_ERROR)


@contextlib.contextmanager
def _progress_bar(show: bool, total: int) -> Iterator[Callable[[int], None]]:
    """What advances a progress bar of ``total`` messages; a no-op when none is shown (rich is
    then not imported: it is a good share of the start-up of a one-shot ``dispatch --json``)."""
    if not show:
        yield lambda _: None
        return
    from rich.progress import BarColumn
    from rich.progress import MofNCompleteColumn
    from rich.progress import Progress
    from rich.progress import TextColumn
    from rich.progress import TimeRemainingColumn

    columns = (TextColumn("offloading"), BarColumn(), MofNCompleteColumn(), TextColumn("messages"))
    with Progress(*columns, TimeRemainingColumn(), console=console.rich, transient=True) as bar:
        task = bar.add_task("offload", total=total)
        yield lambda n: bar.advance(task, n)


def _summary(report: PassReport, requests: Counter[str], as_json: bool) -> None:
    gaps = sum(gap.messages for _, _, gap in report.gaps)
    if as_json:
        emit_json(
            {
                "role": report.role,
                "queues": len(report.queues),
                "messages": report.messages,
                "bytes": report.bytes,
                "requests": {"total": sum(requests.values()), **dict(sorted(requests.items()))},
                "rounds": report.rounds,
                "seconds": round(report.seconds, 3),
                "gapMessages": gaps,
                "failures": report.failures,
                "paused": report.paused,
            }
        )
        return
    from rich.table import Table

    table = Table(title=f"dispatch summary ({report.role})", show_header=False)
    mib_s = report.bytes / (1 << 20) / report.seconds if report.seconds > 0 else 0.0
    table.add_row("queues", str(len(report.queues)))
    table.add_row("messages", str(report.messages))
    table.add_row("bytes", f"{report.bytes} ({report.bytes / (1 << 20):.1f} MiB)")
    ops = ", ".join(f"{k} {v}" for k, v in sorted(requests.items()))
    table.add_row("requests", f"{sum(requests.values())} ({ops})" if ops else "0")
    table.add_row("rounds", str(report.rounds))
    table.add_row("seconds", f"{report.seconds:.2f} ({mib_s:.1f} MiB/s)")
    if gaps:
        table.add_row("gaps", f"{gaps} messages deleted locally before offload")
    if report.failures:
        table.add_row("failed steps", f"{report.failures} (retried)")
    if report.paused:
        table.add_row("uploads", "paused (`rmq-tiered resume` resumes them)")
    console.print(table)
