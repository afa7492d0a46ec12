"""The lint and type gates (pixi's `lint` task runs the same ruff command); rules and reasons live in
pyproject.toml's [tool.ruff.lint] and [tool.mypy]."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
    # `python -m mypy` with this interpreter checks against the packages installed beside it.
    _tool("mypy")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), "src/mmstack"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
