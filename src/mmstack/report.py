"""Table and JSON output shared by every command."""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.table import Table

# Outside a terminal (CI logs, pipes) rich would wrap at 80 columns; tables read better wider.
_out = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 160)
_err = Console(stderr=True, soft_wrap=True)


def console() -> Console:
    return _out


def err_console() -> Console:
    return _err


def print_json(data: Any) -> None:
    """Machine-readable output for CI: stable keys, no colour."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def print_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
) -> None:
    table = Table(title=title, show_lines=False, header_style="bold")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    _out.print(table)


def status_style(status: str) -> str:
    return {
        "PASS": "[green]PASS[/]",
        "OK": "[green]OK[/]",
        "WARN": "[yellow]WARN[/]",
        "SKIP": "[cyan]SKIP[/]",
        "FAIL": "[red]FAIL[/]",
        "NOT RUN": "[dim]NOT RUN[/]",
    }.get(status, status)


def info(msg: str) -> None:
    _err.print(msg, highlight=False)


def error_line(msg: str) -> None:
    """The one-line error for bad input or failed checks (stderr, no traceback)."""
    _err.print(f"error: {msg}", highlight=False, markup=False)
