"""Error paths as a CI step sees them (issue 22, items 6 and 7): `--json` answers with a JSON
error object on stdout and keeps the exit code; a bad option value names the option; piped
output never hard-wraps, so a grep for a whole message finds it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import mmstack


def _error_doc(out: str) -> dict:
    doc = json.loads(out)
    assert doc["ok"] is False
    return doc["error"]


def test_unknown_gpu_with_json_is_a_json_error(tmp_path):
    code, out, err = mmstack("gpus", "nope", "--json")
    assert code == 2
    error = _error_doc(out)
    assert error["kind"] == "BadInput" and error["exit_code"] == 2
    assert error["message"].startswith("unknown GPU 'nope'") and error["fix"]
    assert err.startswith("error: unknown GPU 'nope'"), "stderr keeps the one line"


def test_fatbin_of_a_text_file_with_json_is_a_json_error(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    code, out, _ = mmstack("fatbin", str(text), "--json")
    assert code == 2
    error = _error_doc(out)
    assert error["source"] == str(text) and "not an ELF object" in error["message"]


def test_build_that_cannot_reach_its_channel_with_json_is_a_json_error(tmp_path):
    pytest.importorskip("rattler_build", reason="build needs the 'build' extra")
    code, out, err = mmstack("build", "--env", "cpu", "--json", "--channel", str(tmp_path / "ch"),
                             "--source-channel", "https://127.0.0.1:9/unreachable", timeout=120)
    assert code == 1, err
    error = _error_doc(out)
    assert error["kind"] == "CheckFailed" and "cannot be reached" in error["message"]
    assert not (tmp_path / "ch").exists()


def test_without_json_stdout_stays_empty_on_error():
    code, out, err = mmstack("gpus", "nope")
    assert code == 2 and out == "" and err.startswith("error: ")


def test_a_bad_option_value_names_the_option():
    code, out, err = mmstack("verify", "--timeout", "0")
    assert code == 2 and out == ""
    assert "--timeout" in err and "Usage: mmstack verify" in err


def test_piped_output_does_not_wrap():
    # stdout is a pipe here; the reason is long (well over 160 columns) and must stay on one line
    code, out, _ = mmstack("arch", "check", "--gpu", "RTX 5090", "--arch-list", "9.0")
    assert code == 1
    why = [line for line in out.splitlines() if line.startswith("  why: ")]
    assert len(why) == 1 and len(why[0]) > 160
    assert '("no kernel image is available for execution on the device")' in why[0]


def test_piped_tables_do_not_wrap_their_cells():
    pytest.importorskip("rattler_build", reason="the full check renders recipes")
    code, out, _ = mmstack("check")
    rows = [line for line in out.splitlines() if line.startswith("│ recipes")]
    assert code == 0 and len(rows) == 1, "the recipes row is one line, however long its detail"
    from mmstack.facts.gpus import load
    from mmstack.variants import matrix as variants

    builds = len(variants.load_matrix(load(), Path(__file__).resolve().parents[1] / variants.CONFIG_FILE))
    assert f"run and tests of {builds} builds" in rows[0]
