"""The real conda-build built meta.yaml's CPU variant (tests/data/conda_build_build/, its header says
how): the package must agree with rattler-build's build of recipe.yaml where a user can tell
(depends, constrains, run_exports, build string, the files that get installed), and every
difference the fixture records must be one docs/conda-forge.md lists and explains. Fast: reads
the fixture, builds nothing; stale when meta.yaml, recipe.yaml, build.sh, a patch or the matrix
changed since it was made.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
from support.fixtures import load_current

from mmstack.variants import matrix

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "conda_build_build" / "comparison.json"
DOC = ROOT / "docs" / "conda-forge.md"
SECTION = "## conda-build builds meta.yaml"
# the recipe's build number (the CPU row adds nothing to it)
BUILD_NUMBER = matrix.recipe_build_number(ROOT / matrix.CONFIG_FILE)
MACHINE_PATH = re.compile(r"/root/|/home/[A-Za-z0-9._-]+/|~/\.cache|/tmp/[A-Za-z0-9._-]")


@pytest.fixture(scope="module")
def doc() -> dict:
    return load_current(FIXTURE, how=" (conda-build installed, the e2e channel cached)")


@pytest.fixture(scope="module")
def documented() -> set[str]:
    """The code spans of docs/conda-forge.md's section on the conda-build build."""
    text = DOC.read_text()
    assert SECTION in text, f"{DOC.relative_to(ROOT)} has no '{SECTION}' section"
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([^`\n]+)`", body))


def test_the_fixture_is_current_and_names_its_command_and_versions(doc):
    inputs = set(doc["inputs_sha256"])
    assert {"recipes/mmcv/meta.yaml", "recipes/mmcv/recipe.yaml", "recipes/mmcv/build.sh",
            "conda_build_config.yaml"} <= inputs
    patches = {p.relative_to(ROOT).as_posix() for p in (ROOT / "recipes" / "mmcv" / "patches").glob("*.patch")}
    assert patches and patches <= inputs
    assert doc["generated_by"].endswith("tests/data/conda_build_build/make_fixture.py STANDIN CHANNEL")
    assert doc["command"].startswith("conda-build RECIPE -m conda_build_config.yaml")
    assert doc["env"]["CONDA_SOLVER"] == "classic" and doc["conda_build"] and doc["conda"]
    assert "STAND-IN" in doc["stand_in"]
    assert doc["build_seconds"] > 0


def test_the_fixture_records_no_machine_path():
    lines = [line for line in FIXTURE.read_text().splitlines() if MACHINE_PATH.search(line)]
    assert lines == []


def test_conda_build_ran_the_test_section_and_it_passed(doc):
    cb = doc["tests"]["conda_build"]
    assert cb["tests_passed"] is True
    assert set(cb["imports"]) == {"mmcv", "mmcv.ops"} and cb["pip_check"] is True
    assert len(cb["commands"]) == 4, cb["commands"]  # pip check, test -f _ext, the ladder, upstream's tests
    assert {cb["verify_levels"].get(k) for k in ("L1", "L3", "L4")} == {"PASS"}, cb["verify_levels"]
    up, theirs = cb["upstream"], doc["tests"]["rattler_build"]["upstream"]
    assert up["path"] == "tests/test_ops tests/test_cnn" and up["failed"] == 0 and up["passed"] >= 50
    # the same upstream tests on the same stand-in packages: the same outcome from either package
    assert (up["passed"], up["failed"], up["skipped"]) == (theirs["passed"], theirs["failed"], theirs["skipped"])


def test_what_a_user_installs_agrees(doc):
    cb, rb = doc["index"]["conda_build"], doc["index"]["rattler_build"]
    for key in ("name", "version", "build", "build_number", "subdir", "license"):
        assert cb[key] == rb[key], key
    assert cb["build"] == f"cpu_py311_h#_{BUILD_NUMBER}"  # the CPU row: priority 0, the recipe's own number
    # conda-build pins a bare `python` run requirement to the host's minor; rattler-build leaves it
    # bare (python_abi, python's run-export, pins it in both): the rest is the same list
    assert "python >=3.11,<3.12.0a0" in cb["depends"] and "python" in rb["depends"]
    assert "python_abi 3.11.* *_cp311" in cb["depends"] and "python_abi 3.11.* *_cp311" in rb["depends"]
    assert sorted(d for d in cb["depends"] if not d.startswith("python ")) == \
        sorted(d for d in rb["depends"] if d != "python")
    assert sorted(cb.get("constrains", [])) == sorted(rb.get("constrains", [])) == ["pytorch * cpu*"]
    assert doc["run_exports"]["conda_build"] == doc["run_exports"]["rattler_build"]
    for side in ("conda_build", "rattler_build"):
        assert doc["packages"][side]["ext_size"], f"{side}'s package has no mmcv/_ext*.so"
    files = doc["files"]
    # the same installed files but for conda-build's extra .pyc and rattler-build's packaged test files
    assert set(files["only_conda_build"]) == {"*.pyc"}, files["only_conda_build"]
    assert all(k.startswith("etc/conda/test-files/mmcv/") for k in files["only_rattler_build"]), files
    assert files["common"] >= 600 and files["common"] + files["only_conda_build"]["*.pyc"] == files["conda_build"]


def _differences(doc: dict) -> list[str]:
    """Every difference the fixture records, each as the span docs/conda-forge.md must hold for it."""
    out = []
    for section, prefix in (("index", "index.json"), ("about", "about.json")):
        cb, rb = doc[section]["conda_build"], doc[section]["rattler_build"]
        out += [f"{prefix}: {k}" for k in sorted(set(cb) | set(rb)) if cb.get(k) != rb.get(k)]
    cb, rb = set(doc["info"]["conda_build"]), set(doc["info"]["rattler_build"])
    out += [f"info: {b}" for b in sorted(cb ^ rb)]
    out += [f"paths.json: {k}" for k in doc["files"]["common_but_different"]]
    return out


def test_every_recorded_difference_is_documented(doc, documented):
    missing = [d for d in _differences(doc) if d not in documented]
    assert missing == [], f"undocumented in {DOC.name} '{SECTION}': {missing}"
    patterns = sorted(s.removeprefix("files: ") for s in documented if s.startswith("files: "))
    paths = [*doc["files"]["only_conda_build"], *doc["files"]["only_rattler_build"]]
    unexplained = [p for p in paths if not any(fnmatch.fnmatchcase(p, pat) for pat in patterns)]
    assert unexplained == [], f"files only one engine packs, not in {DOC.name}: {unexplained[:20]}"


def test_the_docs_list_no_difference_the_fixture_does_not_have(doc, documented):
    recorded = set(_differences(doc))
    stale = [s for s in documented if s.split(": ", 1)[0] in ("index.json", "about.json", "info", "paths.json")
             and s not in recorded]
    assert stale == [], stale
    paths = [*doc["files"]["only_conda_build"], *doc["files"]["only_rattler_build"]]
    unused = [s for s in documented if s.startswith("files: ")
              and not any(fnmatch.fnmatchcase(p, s.removeprefix("files: ")) for p in paths)]
    assert unused == [], unused
