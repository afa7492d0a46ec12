"""`mmstack check`: PASS only for a stage that ran, SKIP (with its reason) for one that did not,
`--strict` turns SKIP into a failure; table cells print as written (no rich markup)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.cli import ROOT, mmstack

from mmstack import report
from mmstack.commands.check_cmd import Skip, run_check
from mmstack.errors import CheckFailed

pytest.importorskip("rattler_build", reason="the full check renders recipes with py-rattler-build")


def _without_build_extra(*args: str) -> tuple[int, str, str]:
    """The CLI in an interpreter where the 'build' extra cannot be imported (as after a plain
    `pip install mmstack`): None in sys.modules makes `import rattler_build` raise ImportError."""
    code = ("import sys; sys.modules['rattler_build'] = None; sys.modules['rattler'] = None; "
            "from mmstack.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"}, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def test_full_check_passes_strict_on_this_repository():
    code, out, err = mmstack("check", "--strict", "--json")
    data = json.loads(out)
    assert code == 0, err
    assert [c["status"] for c in data["checks"]] == ["PASS"] * 5 and data["skipped"] == []


def test_missing_extra_is_skip_with_reason_not_pass():
    code, out, _ = _without_build_extra("check", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True
    status = {c["check"]: c for c in data["checks"]}
    assert status["facts"]["status"] == "PASS"
    for stage in ("variants", "recipes", "workflows", "locks"):
        assert status[stage]["status"] == "SKIP"
        assert "rattler_build" in status[stage]["detail"] and "pip install 'mmstack[build]'" in status[stage]["detail"]
    assert data["skipped"] == ["variants", "recipes", "workflows", "locks"]


def test_strict_turns_skip_into_failure():
    code, out, err = _without_build_extra("check", "--strict")
    assert code == 1
    assert "SKIP" in out and "a failure under --strict" in err
    # the fix keeps its brackets in the table (rich would eat `[build]` as markup)
    assert "pip install 'mmstack[build]'" in out


def _stages(*outcomes):
    def stage(outcome):
        def fn(root):
            if isinstance(outcome, Exception):
                raise outcome
            return outcome
        return fn
    return [(f"s{i}", stage(o), ()) for i, o in enumerate(outcomes)]


@pytest.mark.parametrize("outcomes, strict, rc, statuses", [
    (["ok", "ok"], True, 0, ["PASS", "PASS"]),
    (["ok", Skip("no GPU visible")], False, 0, ["PASS", "SKIP"]),
    (["ok", Skip("no GPU visible")], True, 1, ["PASS", "SKIP"]),
    ([ModuleNotFoundError("No module named 'x'", name="x"), "ok"], False, 0, ["SKIP", "PASS"]),
    ([CheckFailed("bad [rule]"), Skip("r")], False, 1, ["FAIL", "SKIP"]),
])
def test_stage_outcomes_and_exit_codes(capsys, outcomes, strict, rc, statuses):
    assert run_check(root=ROOT, as_json=True, strict=strict, stages=_stages(*outcomes)) == rc
    data = json.loads(capsys.readouterr().out)
    assert [c["status"] for c in data["checks"]] == statuses
    for c, o in zip(data["checks"], outcomes, strict=True):
        if isinstance(o, Skip):
            assert c["detail"] == o.reason
    if isinstance(outcomes[0], ModuleNotFoundError):
        assert "cannot import x" in data["checks"][0]["detail"]


def test_table_cells_are_data_not_markup(capsys):
    report.print_table(["fix", "rule"], [("pip install 'mmstack[build]'", "[manifest-drift]"),
                                         ("[red]not red[/]", report.status_style("FAIL"))])
    out = capsys.readouterr().out
    for text in ("pip install 'mmstack[build]'", "[manifest-drift]", "[red]not red[/]", "FAIL"):
        assert text in out


def test_status_keeps_its_colour_in_a_console_line():
    assert f"{report.status_style('FAIL')} x" == "[red]FAIL[/red] x"


def test_info_lines_are_data(capsys):
    report.info("install with: pip install 'mmstack[build]'")
    assert "pip install 'mmstack[build]'" in capsys.readouterr().err



def test_ci_runs_the_strict_check_before_the_tests():
    text = (ROOT / ".ci" / "run").read_text()
    assert "mmstack check --strict" in text
    assert text.index("mmstack check --strict") < text.index("python -m pytest")
