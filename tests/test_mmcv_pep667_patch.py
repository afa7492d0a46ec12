"""Issue 42 item 1: recipe patch 0013 makes mmcv 2.2.0's setup.py read its version on CPython 3.13.

setup.py's get_version() exec()s mmcv/version.py and reads `locals()['__version__']`; PEP 667 made
exec() without a namespace write to a snapshot of the frame's locals, so on 3.13 that read raises
KeyError before anything builds. Here, with the real sdist and the recipe's patches applied in
order, the real get_version() (the function's own source, taken from setup.py by its syntax tree so
the rest of setup.py, which wants torch, does not run) runs under pyenv's 3.10, 3.12 and 3.13:
without 0013 it fails on 3.13 only, with it every one of them reads 2.2.0.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mmstack_lab.standin.offline import patched_sdist

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ROOT / "recipes" / "mmcv" / "patches"
PATCH = PATCHES / "0013-get-version-without-locals.patch"
PYENV = Path("~/.pyenv/versions").expanduser()

GET_VERSION = r"""
import ast, json
tree = ast.parse(open("setup.py").read())
(fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_version"]
ns = {}
exec(compile(ast.Module([fn], []), "setup.py", "exec"), ns)
try:
    print(json.dumps({"version": ns["get_version"]()}))
except KeyError as exc:
    print(json.dumps({"error": f"KeyError: {exc}"}))
"""


def _python(minor: str) -> Path:
    found = sorted(PYENV.glob(f"{minor}.*/bin/python{minor}"))
    if not found:
        pytest.skip(f"no pyenv CPython {minor} under {PYENV}")
    return found[-1]


def _get_version(python: Path, src: Path) -> dict:
    proc = subprocess.run([str(python), "-I", "-c", GET_VERSION], cwd=src, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """The sdist with every recipe patch, and with every one but 0013 (the released setup.py's break)."""
    with_it = patched_sdist("mmcv", tmp_path_factory.mktemp("with"))
    without = tmp_path_factory.mktemp("without")
    from mmstack_lab.standin.offline import unpacked_sdist

    src = unpacked_sdist("mmcv", without)
    for p in sorted(PATCHES.glob("0*.patch")):
        if p != PATCH:
            subprocess.run(["patch", "-p1", "-s", "--fuzz=0", "-i", str(p)], cwd=src, check=True)
    return {"with": with_it, "without": src}


@pytest.mark.parametrize("minor", ["3.10", "3.12", "3.13"])
def test_get_version_reads_2_2_0_with_the_patch(sources, minor):
    assert _get_version(_python(minor), sources["with"]) == {"version": "2.2.0"}


@pytest.mark.parametrize(("minor", "breaks"), [("3.10", False), ("3.12", False), ("3.13", True)])
def test_the_released_get_version_breaks_on_3_13_only(sources, minor, breaks):
    got = _get_version(_python(minor), sources["without"])
    assert got == ({"error": "KeyError: '__version__'"} if breaks else {"version": "2.2.0"})


def test_the_patch_is_in_both_recipes_and_says_why():
    text = PATCH.read_text()
    header = text.split("diff --git", 1)[0] if "diff --git" in text else text.split("--- a/", 1)[0]
    for needle in ("PEP 667", "onedl-mmcv", "open-mmlab/mmengine#1673", "python-pillow/Pillow#8050"):
        assert needle in header, needle
    for recipe in ("recipe.yaml", "meta.yaml"):
        assert f"patches/{PATCH.name}" in (ROOT / "recipes" / "mmcv" / recipe).read_text(), recipe
