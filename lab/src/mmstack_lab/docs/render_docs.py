"""Render the numbers in docs/*.md and in the run READMEs of lab/results/ from the committed results there.

    python -m mmstack_lab.docs.render_docs           # rewrite the generated parts of every page
    python -m mmstack_lab.docs.render_docs --check   # exit 1 naming each page that differs (tests/test_docs.py)

docs/ holds the user's pages by topic, each with the current numbers (docs/performance.md: the newest
run of each build, package, op and detector); lab/results/<machine>/<run>/README.md holds what that
run found, in the order the runs happened. Both are pages here: the same markers work in either.
A page marks what is generated; everything between the markers is replaced, nothing else is touched:

    <!-- results:NAME -->            a table (TABLES[NAME]), followed by its source line
    <!-- /results:NAME -->
    <!-- value:NAME -->12.3<!-- /value -->   one number in prose (VALUES[NAME])

Pictures: docs/img/NAME.png is PLOTS[NAME] drawn from its results (mmstack_lab.docs.plots, matplotlib);
a page links it as img/NAME.png (a run README: ../../../../docs/img/NAME.png). --check compares the
pixels a committed picture shows with what its results draw; writing rewrites a picture only when
its pixels differ.

What each marker shows is defined in mmstack_lab.docs.tables (its docstring: adding a result);
mmstack_lab.docs.results reads the files and holds the forms (Table, Value, Plot).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from mmstack_lab.docs import results
from mmstack_lab.docs.results import load, plots_module
from mmstack_lab.docs.tables import PLOTS, TABLES, VALUES
from mmstack_lab.paths import ROOT

DOCS = ROOT / "docs"


# -- pictures -----------------------------------------------------------------------------------------

def picture(name: str, root: Path = DOCS) -> Path:
    return root / "img" / f"{name}.png"


def stale_pictures(root: Path = DOCS) -> list[Path]:
    """Pictures missing or showing other pixels than their results draw."""
    plots = plots_module()
    bad = []
    for name, plot in PLOTS.items():
        path = picture(name, root)
        if not path.is_file() or plots.pixels(path.read_bytes()) != plots.pixels(plot.render()):
            bad.append(path)
    return bad


def write_pictures(root: Path = DOCS) -> list[Path]:
    written = []
    for path in stale_pictures(root):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(PLOTS[path.stem].render())
        written.append(path)
    return written


# -- rendering the docs ---------------------------------------------------------------------------

_TABLE = re.compile(r"(<!-- results:(?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)\n?(<!-- /results:(?P=name) -->)", re.S)
_VALUE = re.compile(r"(<!-- value:(?P<name>[a-z0-9-]+) -->)(?P<body>.*?)(<!-- /value -->)")


class UnknownMarker(ValueError):
    pass


def render_text(text: str, where: str = "doc") -> str:
    def table(m: re.Match) -> str:
        name = m["name"]
        if name not in TABLES:
            raise UnknownMarker(f"{where}: <!-- results:{name} --> names no table in mmstack_lab.docs.render_docs")
        return m.group(1) + TABLES[name].render() + "\n" + m.group(4)

    def value(m: re.Match) -> str:
        name = m["name"]
        if name not in VALUES:
            raise UnknownMarker(f"{where}: <!-- value:{name} --> names no value in mmstack_lab.docs.render_docs")
        return m.group(1) + VALUES[name].render() + m.group(4)

    return _VALUE.sub(value, _TABLE.sub(table, text))


def _gpus_md() -> str:
    from mmstack_lab.arch import package_coverage  # the facts-derived coverage tables

    return package_coverage.render(load("cpu-dev/package_coverage.json"))


# Docs generated whole (no hand-written prose between markers): file name -> its render.
WHOLE: dict[str, Callable[[], str]] = {"gpus.md": _gpus_md}


def history() -> list[Path]:
    """The run READMEs under lab/results: what each run found, in its own words and rendered tables."""
    return sorted(results.RESULTS.glob("**/README.md"))


def docs(root: Path = DOCS) -> list[Path]:
    """The pages rendered: root's *.md, and for docs/ the run READMEs of lab/results too."""
    return sorted(root.glob("*.md")) + (history() if root == DOCS else [])


def rendered(path: Path) -> str:
    """What `path` should hold: its whole render, or its text with the marked parts rendered."""
    if path.name in WHOLE and path.parent == DOCS:
        return WHOLE[path.name]()
    return render_text(path.read_text(), str(path))


def stale(root: Path = DOCS) -> list[Path]:
    """The docs whose generated parts differ from what the results give (and, for docs/, its pictures)."""
    bad = [p for p in docs(root) if rendered(p) != p.read_text()]
    return bad + (stale_pictures(root) if root == DOCS else [])


def unused(root: Path = DOCS) -> list[str]:
    """Tables, values and pictures defined here that no page (docs/*.md, a run README) shows."""
    text = "".join(p.read_text() for p in docs(root))
    return ([n for n in TABLES if f"<!-- results:{n} -->" not in text]
            + [n for n in VALUES if f"<!-- value:{n} -->" not in text]
            + [n for n in PLOTS if f"img/{n}.png)" not in text])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a doc differs from the render")
    args = ap.parse_args(argv)
    try:
        if args.check:
            bad = stale()
            for p in bad:
                print(f"{p.relative_to(ROOT)}: differs from lab/results (fix: python -m mmstack_lab.docs.render_docs)",
                      file=sys.stderr)
            return 1 if bad else 0
        for p in write_pictures():
            print(f"{p.relative_to(ROOT)}: drawn")
        for p in docs():
            text = p.read_text()
            new = rendered(p)
            if new != text:
                p.write_text(new)
                print(f"{p.relative_to(ROOT)}: rendered")
        return 0
    except UnknownMarker as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
