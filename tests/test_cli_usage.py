"""Usage errors, in a venv made exactly as README.md makes it: typer's usage line, exit 2, no traceback.

The dev environment hides what a README user meets (issue 22, item 1): there the test extra pulls
click in, so a handler that imports click works; in the README's venv click is not installed, and
typer >= 0.26 carries its own copy as `typer._click`. Only the README's venv tells the two apart.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib
from support.cli import ROOT

from mmstack_lab.standin.bootstrap import CACHE_ROOT

# The README's step 1, word for word (tests/test_cli_usage.py::test_readme_still_makes_the_venv_this_way).
README_INSTALL = "python3 -m venv .venv && .venv/bin/pip install -e '.[build,detect]'"


@pytest.fixture(scope="session")
def readme_venv() -> Iterator[Path]:
    """`python3 -m venv X && X/bin/pip install -e '.[build,detect]'`, once per test session, under
    the test cache (pip installs from the machine's configured index); removed afterwards."""
    python3 = shutil.which("python3")
    if python3 is None:
        pytest.skip("no python3 on PATH: the README's install starts with it")
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    where = Path(tempfile.mkdtemp(prefix="readme-venv-", dir=CACHE_ROOT))
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    try:
        venv = where / ".venv"
        subprocess.run([python3, "-m", "venv", str(venv)], check=True, env=env, timeout=300)
        pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-e", ".[build,detect]"], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=1200)
        assert pip.returncode == 0, f"the README's install failed:\n{pip.stderr[-3000:]}"
        yield venv
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _run(venv: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    proc = subprocess.run([str(venv / "bin" / "mmstack"), *args], cwd=ROOT, capture_output=True, text=True,
                          env={**env, "COLUMNS": "200"}, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def test_readme_still_makes_the_venv_this_way():
    assert README_INSTALL in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("args, usage", [
    (("gpus", "--jsn"), "Usage: mmstack gpus [OPTIONS]"),
    (("frobnicate",), "Usage: mmstack [OPTIONS] COMMAND [ARGS]..."),
    (("arch",), "Usage: mmstack arch [OPTIONS] COMMAND [ARGS]..."),
    (("arch", "chek"), "Usage: mmstack arch [OPTIONS] COMMAND [ARGS]..."),
    (("doctor", "extra"), "Usage: mmstack doctor [OPTIONS]"),
    (("lock", "check", "--jsn"), "Usage: mmstack lock check [OPTIONS]"),
])
def test_usage_error_is_usage_line_and_exit_2(readme_venv, args, usage):
    code, out, err = _run(readme_venv, *args)
    assert code == 2, (out, err)
    assert usage in out + err
    assert "Traceback" not in out + err and "No module named" not in out + err


def test_usage_error_names_what_is_wrong(readme_venv):
    _, _, err = _run(readme_venv, "gpus", "--jsn")
    assert "No such option: --jsn" in err
    _, _, err = _run(readme_venv, "arch", "chek")
    assert "No such command 'chek'" in err and "check" in err


def test_version(readme_venv):
    code, out, err = _run(readme_venv, "--version")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert code == 0, err
    assert out.strip() == f"mmstack {version}"


def test_a_command_still_runs_and_exits_with_its_code(readme_venv):
    code, out, err = _run(readme_venv, "gpus", "RTX 4090")
    assert code == 0, err
    assert re.search(r"8\.9", out)
    code, _, err = _run(readme_venv, "gpus", "no such gpu at all")
    assert code == 2 and err.startswith("error: ")


def test_python_dash_m_mmstack_exits_with_the_commands_code():
    """`python -m mmstack` is the CLI with its exit code: a failure there must not read as success."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "mmstack", "verify", "--levels", "L9"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "unknown level 'L9'" in proc.stderr, (proc.returncode, proc.stderr)
