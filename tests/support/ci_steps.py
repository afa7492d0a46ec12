"""The generated build workflow's shell steps, run here in job order against the local engine.

`.github/workflows/build.yml` is what CI runs; its build, noarch and test jobs call scripts/
(`mmstack build --no-test`, `mmstack test`). This reads the committed workflow, takes one job's
`run:` steps that call scripts/, fills `${{ matrix.KEY }}` from one matrix entry, and runs each
with bash from the repository root, as a runner would. What differs from a runner is only the
environment the steps read (scripts/lib.sh): the source channel (a stand-in for conda-forge), the
recipes (offline copies), the output and report directories; and steps gated on a GPU or on the
runner (`if:` naming steps.gpu or runner.environment) are left out where there is none.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "build.yml"
_MATRIX = re.compile(r"\$\{\{\s*matrix\.(\w+)\s*\}\}")


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def matrix_entry(doc: dict, key: str) -> dict:
    (entry,) = [e for e in doc["jobs"]["build"]["strategy"]["matrix"]["include"] if e["key"] == key]
    return entry


def script_steps(doc: dict, job: str, entry: dict | None = None, *, gpu: bool = False) -> list[str]:
    """The job's `run:` steps that call scripts/, in order, with the matrix values filled in."""
    out = []
    for step in doc["jobs"][job]["steps"]:
        run = step.get("run", "")
        if not run.strip().startswith("scripts/"):
            continue
        gate = str(step.get("if", ""))
        if ("steps.gpu" in gate and not gpu) or "runner.environment" in gate:
            continue
        if entry is not None:
            run = _MATRIX.sub(lambda m: str(entry[m.group(1)]), run)
        elif _MATRIX.search(run):
            raise ValueError(f"{job}: a step names the matrix but no entry was given: {run}")
        out.append(" ".join(run.split()))  # a folded `>-` block is one command line
    return out


def run_steps(steps: list[str], *, env: dict[str, str], log=print, timeout: float = 3600) -> None:
    """Each step with bash from the repository root; the first failing one raises with its output."""
    for step in steps:
        log(f"ci step: {step}")
        proc = subprocess.run(["bash", "-c", step], cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"ci step failed (exit {proc.returncode}): {step}\n--- stderr (tail)\n"
                               + proc.stderr[-4000:] + "\n--- stdout (tail)\n" + proc.stdout[-2000:])
