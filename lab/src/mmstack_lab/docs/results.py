"""The committed results in lab/results/ and the forms a page shows them in: a Table, a Value, a Plot.

A path is dotted keys and list indices into one JSON document ("ops", "median.total_s",
"levels.3.seconds"); a format is a str.format spec or a function of the value. A missing value
renders as "-", never as a guess. `RESULTS` is read at each call (tests point it at a copy).
A source under `tests/data/` is a committed fixture a real tool's run recorded (its command and
versions in its header), read from the repository as it is.

A JSON result is a `Doc`: a JSON object whose values are whatever JSON holds (typed `Any`, as
`json.loads` types them: the table that reads a field is where its shape is known). Text results
(a tool's raw output) are read with `load_text`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mmstack_lab.paths import RESULTS, ROOT

MISSING = "-"

Format = str | Callable[[Any], str]
Doc = dict[str, Any]
# what a table's builder returns: (header, rows)
Body = tuple[list[str], Sequence[Sequence[object]]]


# -- reading results -------------------------------------------------------------------------------

FIXTURES = "tests/data/"


def _where(rel: str):
    return ROOT / rel if rel.startswith(FIXTURES) else RESULTS / rel


def load(rel: str) -> Doc:
    """A JSON result (every result file is one JSON object); ValueError where the file is not one."""
    doc = json.loads(_where(rel).read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"lab/results/{rel}: a result file holds one JSON object, this one holds a {type(doc).__name__}")
    return doc


def load_text(rel: str) -> str:
    """A text result (a tool's raw output, e.g. the H200 run's machine.txt)."""
    return (RESULTS / rel).read_text()


def get(doc: object, path: str) -> object:
    """Dotted keys and list indices; None where the path does not exist."""
    cur = doc
    for part in path.split(".") if path else []:
        if isinstance(cur, list) and part.lstrip("-").isdigit():
            idx = int(part)
            cur = cur[idx] if -len(cur) <= idx < len(cur) else None
        elif isinstance(cur, dict):
            cur = cur.get(part)
        else:
            return None
        if cur is None:
            return None
    return cur


def fmt(value: object, spec: Format) -> str:
    if value is None:
        return MISSING
    if callable(spec):
        return spec(value)
    return spec.format(value)


def cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass(frozen=True)
class Table:
    """One row per element of `rows` (a path into the first source) or, without it, one per source.

    `build` gets the JSON sources' documents in their order; a text source (not .json) is read to
    make sure it is there and is named in the Source line, not passed."""

    sources: list[str]
    columns: list[tuple[str, str, Format]] = field(default_factory=list)
    rows: str | None = None
    build: Callable[[list[Doc]], Body] | None = None

    def render(self) -> str:
        docs = [load(s) for s in self.sources if s.endswith(".json")]
        for s in self.sources:
            if not s.endswith(".json"):
                load_text(s)
        body: Sequence[Sequence[object]]
        if self.build is not None:
            header, body = self.build(docs)
        else:
            found = get(docs[0], self.rows) if self.rows else docs
            if not isinstance(found, list | None):
                raise ValueError(f"lab/results/{self.sources[0]}: {self.rows!r} is a {type(found).__name__}, not a list of rows")
            items = found or []
            header = [c[0] for c in self.columns]
            body = [[fmt(get(item, path), spec) for _, path, spec in self.columns] for item in items]
        where = ", ".join(f"`lab/results/{s}`" for s in dict.fromkeys(self.sources))
        return markdown(header, body) + f"\n\nSource: {where} (rendered by `mmstack_lab.docs.render_docs`)."


@dataclass(frozen=True)
class Value:
    source: str
    path: str = ""
    spec: Format = "{}"
    compute: Callable[[Doc], object] | None = None

    def render(self) -> str:
        doc = load(self.source)
        return fmt(self.compute(doc) if self.compute else get(doc, self.path), self.spec)


# -- pictures (mmstack_lab.docs.plots) ---------------------------------------------------------------

def plots_module():
    from mmstack_lab.docs import plots  # matplotlib: the test extra

    return plots


@dataclass(frozen=True)
class Plot:
    sources: list[str]
    draw: Callable[..., bytes]  # draw(title, *source paths)
    title: str

    def render(self) -> bytes:
        return self.draw(self.title, *(RESULTS / s for s in self.sources))
