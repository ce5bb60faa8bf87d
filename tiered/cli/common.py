"""What every command shares: the error-to-one-line group, JSON lines, rich console."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import sys
from collections.abc import Collection
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any
from typing import NoReturn

import click

from tiered import metrics
from tiered.errors import TieredStoreError

EXIT_DATA_ERROR = 1
EXIT_USER_ERROR = 2

if TYPE_CHECKING:
    from rich.console import Console


class LazyConsole:
    """rich's ``Console``, made on first use: importing rich is a good share of the start-up of a
    one-shot command that prints JSON only. Attributes are the console's; :attr:`rich` is the
    console itself, for rich's own constructors (``Progress(console=...)``). A printed line is
    never broken by the console (``soft_wrap``): a terminal wraps it, and in a pipe or a log a
    long path stays on one line for ``grep``."""

    def __init__(self) -> None:
        self._console: Console | None = None

    @property
    def rich(self) -> Console:
        """The console itself."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False, soft_wrap=True)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rich, name)


console = LazyConsole()

commitlog_file_size_option = click.option(
    "--commitlog-file-size",
    type=int,
    default=1 << 30,
    show_default=True,
    help="mappedFileSizeCommitLog, bytes.",
)
"""``--commitlog-file-size`` of the commands that write or read a broker store's files."""

verbose_option = click.option(
    "-v",
    "--verbose",
    count=True,
    help="Log at INFO (-v) or DEBUG (-vv) level (default: WARNING, or tieredLogLevel if set).",
)
"""``-v``/``-vv`` of the one-shot commands (``verbosity`` turns the count into a level)."""


class Group(click.Group):
    """A click group that turns our errors (and OS errors on named files) into one-line messages.

    ``lazy`` maps command names to ``module:attribute``; a module is imported when its command
    is looked up. ``unserved`` names the commands whose process never serves ``/metrics``: when
    the group runs as the console script (:attr:`console_script`, set by
    :func:`tiered.cli.entry`), looking one up makes this process record no metrics
    (:func:`tiered.metrics.discard`; prometheus_client is then not loaded for them)."""

    def __init__(
        self,
        *args: Any,
        lazy: dict[str, str] | None = None,
        unserved: frozenset[str] = frozenset(),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        self.unserved = unserved
        self.console_script = False
        """This process is the command's own, not a program that called the group (a test)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            if self.console_script and cmd_name in self.unserved:
                metrics.discard()
            module, _, attribute = self.lazy[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if command.name != cmd_name:
                raise RuntimeError(f"{self.lazy[cmd_name]} is command {command.name!r}")
            self.add_command(command)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TieredStoreError as e:
            fail(str(e))
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as e:
            fail(f"{e.strerror}: {e.filename}")


def fail(message: str, code: int = EXIT_USER_ERROR) -> NoReturn:
    """Print ``error: message`` to stderr and exit with ``code``."""
    click.secho(f"error: {message}", fg="red", err=True)
    sys.exit(code)


def warn(message: str) -> None:
    """Print ``warning: message`` to stderr."""
    click.secho(f"warning: {message}", fg="yellow", err=True)


def emit_json(obj: dict[str, Any]) -> None:
    """One JSON object per line on stdout."""
    click.echo(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))


BLOCK_ROWS = 1000
"""Rows :class:`Rows` aligns and prints at once."""

_ESCAPES = {**{c: f"\\x{c:02x}" for c in (*range(32), 127)}, 9: "\\t", 10: "\\n", 13: "\\r"}


class Rows:
    """A table printed as its rows come, for the commands that list thousands of them (every
    queue, every message of a commitlog file): the header and a rule, then the rows in blocks of
    ``block``, columns two spaces apart, those named in ``right`` right-aligned, the last column
    unpadded. A column is as wide as its widest cell so far (in terminal cells: a wide
    character counts two), so a later block may shift a column right; nothing is held but one
    block, and no layout engine measures each cell many times over. Control characters in a
    cell are shown escaped (a row is one line)."""

    def __init__(
        self, headers: Sequence[str], *, right: Collection[str] = (), block: int = BLOCK_ROWS
    ) -> None:
        self.headers = list(headers)
        self._right = [name in right for name in self.headers[:-1]]
        self._widths = [cells_of(name) for name in self.headers]
        self._block: list[list[str]] = []
        self._size = block
        self._started = False

    def add(self, *cells: str) -> None:
        """One row, a cell per header."""
        if len(cells) != len(self.headers):
            raise ValueError(f"{len(cells)} cells for {len(self.headers)} columns")
        self._block.append([c if c.isprintable() else c.translate(_ESCAPES) for c in cells])
        if len(self._block) >= self._size:
            self.flush()

    def flush(self) -> None:
        """Print the rows added so far (the header and its rule before the first)."""
        block, self._block = self._block, []
        sizes = [[cells_of(cell) for cell in cells] for cells in block]
        if block:
            self._widths = [
                max(width, *column)
                for width, column in zip(self._widths, zip(*sizes, strict=True), strict=True)
            ]
        lines = [self._line(cells, n) for cells, n in zip(block, sizes, strict=True)]
        if not self._started:
            self._started = True
            rule = "\u2500" * (sum(self._widths) + 2 * (len(self._widths) - 1))
            lines[:0] = [self._line(self.headers, [cells_of(h) for h in self.headers]), rule]
        if lines:
            click.echo("\n".join(lines))

    def _line(self, cells: Sequence[str], sizes: Sequence[int]) -> str:
        """A row, each cell padded to its column's width (``sizes``: the cells' own widths)."""
        columns = zip(cells, sizes, self._widths, self._right, strict=False)  # (not the last)
        parts = [
            cell.rjust(width - size + len(cell)) if right else cell.ljust(width - size + len(cell))
            for cell, size, width, right in columns
        ]
        parts.append(cells[-1])
        return "  ".join(parts).rstrip()

    def __enter__(self) -> Rows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()


def cells_of(text: str) -> int:
    """The terminal cells ``text`` takes: its length, unless some character is wide."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def wide_console() -> Console:
    """The console, or a wide one when stdout is not a terminal (no folded columns in a pipe)."""
    from rich.console import Console

    return console.rich if console.is_terminal else Console(width=200, highlight=False)


MESSAGE_COLUMNS = ("msgId", "store time (UTC)", "size", "tags", "keys", "body")
"""The columns :func:`message_cells` fills, for the message tables of ``fetch`` and ``query``."""


def message_cells(data: bytes) -> list[str]:
    """The :data:`MESSAGE_COLUMNS` cells of one stored message (the body shortened to 32 bytes)."""
    from tiered.broker import message as msgcodec

    m = msgcodec.decode(data)
    body = m.decompressed_body()
    preview = body[:32].decode("utf-8", "replace") + ("…" if len(body) > 32 else "")
    when = dt.datetime.fromtimestamp(m.store_timestamp / 1000, dt.UTC)
    return [
        m.properties.get(msgcodec.PROPERTY_UNIQ_KEY) or m.offset_msg_id,
        when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
        str(m.total_size),
        m.tags or "",
        " ".join(m.keys),
        repr(preview),
    ]
