"""Table and JSON output shared by every command."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# Outside a terminal (CI logs, pipes, files) nothing wraps: a line is whole however long, so a grep
# for "no kernel image is available" finds it. rich would wrap at 80 columns there, so the width is
# one no line reaches (tables take the width their cells need, not the console's). In a terminal,
# rich fits the window.
UNWRAPPED_WIDTH = 100_000
_out = Console(soft_wrap=not sys.stdout.isatty(), width=None if sys.stdout.isatty() else UNWRAPPED_WIDTH)
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
    """Every cell is data: printed as written, never parsed as rich markup (so "pip install
    'mmstack[build]'" keeps its brackets). Only a `Text` (e.g. from `status_style`) carries style."""
    table = Table(title=None if title is None else Text(title), show_lines=False, header_style="bold")
    for col in columns:
        table.add_column(Text(col), overflow="fold")
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    _out.print(table)


def _cell(value: Any) -> Text:
    if isinstance(value, Text):
        return value
    return Text("" if value is None else str(value))


class _Status(Text):
    """A styled status word; in an f-string it formats as its markup, so console lines keep the colour."""

    def __format__(self, spec: str) -> str:
        return format(self.markup, spec)


_STATUS_STYLES = {"PASS": "green", "OK": "green", "WARN": "yellow", "SKIP": "cyan", "FAIL": "red", "NOT RUN": "dim"}


def status_style(status: str) -> Text:
    return _Status(status, style=_STATUS_STYLES.get(status, ""))


def info(msg: str) -> None:
    """A progress or hint line on stderr; data, so no markup."""
    _err.print(msg, highlight=False, markup=False)


def error_line(msg: str) -> None:
    """The one-line error for bad input or failed checks (stderr, no traceback)."""
    _err.print(f"error: {msg}", highlight=False, markup=False)


# A recipe test's result, as one line in rattler-build's log: `mmstack build` picks these lines up
# (builder/recipes.py) and puts them in its summary and --json.
RESULT_MARK = "mmstack-result "


def result_line(kind: str, doc: dict) -> str:
    return RESULT_MARK + json.dumps({"kind": kind, **doc}, separators=(",", ":"), sort_keys=True)


def parse_result_line(text: str) -> dict | None:
    """The document of a `result_line`, wherever it sits in a log line; None for other lines."""
    at = text.find(RESULT_MARK)
    if at < 0:
        return None
    try:
        doc = json.loads(text[at + len(RESULT_MARK):].strip())
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "kind" in doc else None
