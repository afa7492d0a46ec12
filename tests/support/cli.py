"""Drive the `mmstack` CLI the way a user does: a subprocess, exit code and both streams."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def mmstack(*args: str, cwd: Path = ROOT, timeout: float = 300) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "mmstack.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"}, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr
