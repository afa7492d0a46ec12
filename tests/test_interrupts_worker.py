"""`interrupts.in_process` runs a function in a child interpreter that imports what the parent
imports, also where mmstack is importable only through the parent's sys.path (the GPU proof and
`python -c` launchers put src/ on sys.path and drop PYTHONPATH so build scripts never see it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mmstack

SRC = Path(mmstack.__file__).resolve().parents[1]

# launched as the GPU proof launches mmstack: src/ through PYTHONPATH, dropped once started
PARENT = """
import os, sys
os.environ.pop("PYTHONPATH", None)
from mmstack.commands import interrupts
previous = interrupts.install()
try:
    child = interrupts.in_process(os.getpid)
    seen = interrupts.in_process(os.getenv, "PYTHONPATH", "unset")
finally:
    interrupts.restore(previous)
print(os.getpid(), child, seen)
"""


def test_the_worker_imports_through_the_parents_sys_path(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # an interpreter where mmstack is not installed: the base one behind the venv
    base = getattr(sys, "_base_executable", sys.executable)
    probe = subprocess.run([base, "-c", "import mmstack"], capture_output=True, text=True, env=env, cwd=tmp_path)
    python = base if probe.returncode != 0 else sys.executable
    done = subprocess.run([python, "-c", PARENT], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={**env, "PYTHONPATH": str(SRC)})
    assert done.returncode == 0, done.stderr
    parent, child, seen = done.stdout.split()
    assert parent != child, "in_process ran inline: install() did not take"
    assert seen == "unset", "the worker's environment (what build scripts inherit) is the parent's: no PYTHONPATH"
