"""The lint and type gates (pixi's `lint` task runs the same ruff command); rules and reasons live in
pyproject.toml's [tool.ruff.lint] and [tool.mypy]."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    exe = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(exe).is_file():
        pytest.skip(f"{name} is not installed (the 'test' extra brings it)")
    return exe


def test_ruff_finds_nothing():
    proc = subprocess.run([_tool("ruff"), "check", "--no-cache", "src", "tests", "lab", "scripts"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_mypy_finds_nothing(tmp_path):
    # `python -m mypy` with this interpreter checks against the packages installed beside it; with no
    # paths it checks [tool.mypy]'s `files`: src/mmstack and the lab (lab/src/mmstack_lab).
    _tool("mypy")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # every .py file under `files` but those `exclude` names was in the run (the lab's too)
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    excluded = [re.compile(x) for x in config.get("exclude", [])]
    expected = [p for d in config["files"] for p in (ROOT / d).rglob("*.py")
                if not any(x.search(p.relative_to(ROOT).as_posix()) for x in excluded)]
    assert "lab/src/mmstack_lab" in config["files"]
    checked = re.search(r"(?:checked|found in) (\d+) source files", proc.stdout)  # "Success: no issues found in N ..."
    assert checked and int(checked[1]) == len(expected), proc.stdout[-2000:]
