"""verify/timings.py: the last run's seconds per level, the expectation `mmstack verify` shows."""

from __future__ import annotations

import json

from mmstack.verify import timings


def test_the_cache_dir_follows_the_env_var_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("MMSTACK_CACHE_DIR", str(tmp_path / "mine"))
    assert timings.cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("MMSTACK_CACHE_DIR", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert timings.cache_dir() == tmp_path / "xdg" / "mmstack"
    monkeypatch.delenv("MMSTACK_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert timings.cache_dir() == tmp_path / "home" / ".cache" / "mmstack"


def test_a_run_records_what_passed_or_skipped_and_keeps_a_failed_levels_last_good_time(tmp_path):
    key = timings.key(python="/env/bin/python", levels=("L1", "L4"), l4="complete")
    assert key == "/env/bin/python L1,L4 l4=complete"
    assert timings.expected(key, directory=tmp_path) == {}  # no file yet
    assert timings.record(key, [("L1", "PASS", 1.5), ("L4", "PASS", 70.25)], directory=tmp_path)
    assert timings.record(key, [("L1", "PASS", 1.2), ("L4", "FAIL", 300.0)], directory=tmp_path)
    assert timings.expected(key, directory=tmp_path) == {"L1": 1.2, "L4": 70.25}
    other = timings.key(python="/env/bin/python", levels=("L1", "L4"))  # L4 quick: another run, another time
    assert timings.expected(other, directory=tmp_path) == {}
    assert [p.name for p in tmp_path.iterdir()] == [timings.FILE]  # no temporary file left behind


def test_a_broken_cache_is_no_expectation_and_is_rewritten(tmp_path):
    (tmp_path / timings.FILE).write_text("{not json")
    assert timings.expected("k", directory=tmp_path) == {}
    (tmp_path / timings.FILE).write_text(json.dumps({"k": {"L1": "slow", "L2": True, "L3": 2}}))
    assert timings.expected("k", directory=tmp_path) == {"L3": 2.0}
    assert timings.record("k", [("L1", "SKIP", 0.5)], directory=tmp_path)
    assert timings.expected("k", directory=tmp_path) == {"L1": 0.5, "L3": 2.0}


def test_an_unwritable_cache_does_not_stop_the_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert timings.record("k", [("L1", "PASS", 1.0)], directory=blocker / "sub") is False
