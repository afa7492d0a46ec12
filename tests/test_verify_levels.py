"""The ladder's levels are described in one place: README's table "What `mmstack verify` checks" is
verify/levels.py's TABLE, row for row (id and `checks`), so a level added, removed or reworded in
one place and not the other fails here."""

from __future__ import annotations

import re
from pathlib import Path

from mmstack.verify.levels import TABLE

README = Path(__file__).resolve().parents[1] / "README.md"
_ROW = re.compile(r"^\| (L\d) \| (.*) \|$", re.M)


def _ladder_rows(text: str) -> list[tuple[str, str]]:
    section = text.split("## What `mmstack verify` checks (the ladder)", 1)[1].split("\n## ", 1)[0]
    return _ROW.findall(section)


def test_readmes_ladder_table_is_the_levels_table():
    assert _ladder_rows(README.read_text()) == [(lv.id, lv.checks) for lv in TABLE]


def test_the_rule_bites_on_a_reworded_row():
    text = README.read_text().replace("| L1 | `import mmcv`: version and location |", "| L1 | `import mmcv` |")
    assert _ladder_rows(text) != [(lv.id, lv.checks) for lv in TABLE]
