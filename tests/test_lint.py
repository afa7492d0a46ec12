"""The lint gate (pixi's `lint` task runs the same command)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).is_file():
        pytest.skip("ruff is not installed (the 'test' extra brings it)")
    proc = subprocess.run([ruff, "check", "--no-cache", "src", "tests", "benchmarks"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
