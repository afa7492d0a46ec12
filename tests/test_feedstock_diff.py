"""issue 21 item 6: docs/conda-forge.md says what conda-forge's mmcv feedstock does differently.

tests/data/feedstock/ holds a copy of conda-forge/mmcv-recipe-feedstock at 29cb4f4 (recipe,
build script, linux-64 .ci_support configs; README.md there) and render.json, the real
conda-build's render of it (make_fixture.py says how). This test pairs each of its three
linux-64 builds with ours for the same Python and CUDA (the cpu and fat rows of
tests/data/conda_build_render/render.json, the real conda-build's render of our meta.yaml),
computes every requirement and build-environment difference, and fails on one that the
deviation tables of docs/conda-forge.md do not name.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.fixtures import load_current

ROOT = Path(__file__).resolve().parents[1]
FEED = ROOT / "tests" / "data" / "feedstock"
OURS = ROOT / "tests" / "data" / "conda_build_render" / "render.json"
DOC = ROOT / "docs" / "conda-forge.md"
SECTIONS = ("build", "host", "run", "run_constrained")
_EXPORT = re.compile(r"\bexport\s+([A-Z][A-Z0-9_]*)=|^\s*([A-Z][A-Z0-9_]*)=", re.M)
SHELL = {"IFS"}  # the shell's own, set around a `read`


def _assigned(script: Path) -> set[str]:
    code = "\n".join(line for line in script.read_text().splitlines() if not line.lstrip().startswith("#"))
    return {a or b for a, b in _EXPORT.findall(code)} - SHELL


def _pairs() -> list[tuple[dict, dict]]:
    ours = load_current(OURS)["variants"]
    # the feedstock builds one pytorch; ours two rows (conda-forge's pin and its migration target):
    # its builds pair with the target's, the row that has every build
    target = max({v["variant"]["pytorch"] for v in ours}, key=lambda t: tuple(int(x) for x in t.split(".")))
    ours = [v for v in ours if v["variant"]["pytorch"] == target]
    pairs = []
    for theirs in load_current(FEED / "render.json")["variants"]:
        cuda = theirs["variant"]["cuda_compiler_version"]
        (mine,) = [v for v in ours if v["variant"]["python"] == "3.12" and v["variant"]["cuda_compiler_version"] == cuda
                   and v["variant"]["arch_tag"] == ("cpu" if cuda == "None" else "all")]
        pairs.append((theirs, mine))
    return pairs


def _name(spec: str) -> str:
    return spec.split()[0].lower()


def _specs(render: dict, section: str) -> dict[str, list[str]]:
    """package -> its specs in the section (pytorch appears twice: a version and a build pin)."""
    out: dict[str, list[str]] = {}
    for s in render["requirements"][section]:
        out.setdefault(_name(s), []).append(" ".join(s.lower().split()))
    return {k: sorted(v) for k, v in out.items()}


def requirement_differences(theirs: dict, ours: dict) -> set[tuple[str, str, str]]:
    """(section, package, kind) for each package in one render's section and not the other's
    (kind "presence"), or in both with other specs (kind "pin")."""
    out = set()
    for section in SECTIONS:
        a, b = _specs(theirs, section), _specs(ours, section)
        out |= {(section, n, "presence") for n in a.keys() ^ b.keys()}
        out |= {(section, n, "pin") for n in a.keys() & b.keys() if a[n] != b[n]}
    return out


def _script_env_names(render: dict) -> set[str]:
    return {e.split("=", 1)[0] for e in render["script_env"]}


def build_env_differences() -> set[str]:
    """Variables one build sets (script_env or an assignment in its build script) and the other does not."""
    theirs = _assigned(FEED / "recipe" / "build_mmcv.sh")
    ours = _assigned(ROOT / "recipes" / "mmcv" / "build.sh")
    ours -= {"PYTHON", "SRC_DIR", "CPU_COUNT"}  # defaults for running build.sh outside conda, set by conda otherwise
    for t, o in _pairs():
        theirs |= _script_env_names(t)
        ours |= _script_env_names(o)
    return theirs ^ ours


def _deviation_rows() -> list[str]:
    text = DOC.read_text()
    body = text[text.index("## Deviations kept"):text.index("## Upstream's tests in the recipe")]
    return [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| what ")]


def _word(w: str) -> re.Pattern:
    return re.compile(rf"(?<![\w-]){re.escape(w)}(?![\w-])", re.I)


def _documented(name: str, *context: str) -> bool:
    """A deviation-table row names `name` and, where given, one of the `context` words."""
    return any(_word(name).search(row) and (not context or any(_word(c).search(row) for c in context))
               for row in _deviation_rows())


def test_every_requirement_difference_from_the_feedstock_is_in_the_deviation_tables():
    diffs = set()
    for theirs, ours in _pairs():
        diffs |= requirement_differences(theirs, ours)
    assert diffs, "the renders differ (python pin, pytorch pin, py-opencv...): the comparison found none"
    # a row names the package and the section it differs in (or "pin" where both have it)
    missing = sorted(f"{section}: {name} ({kind})" for section, name, kind in diffs
                     if not _documented(name, section, *(("pin",) if kind == "pin" else ())))
    assert not missing, f"differences from the feedstock that docs/conda-forge.md does not list: {missing}"


def test_every_build_environment_difference_from_the_feedstock_is_in_the_deviation_tables():
    diffs = build_env_differences()
    assert {"CMAKE_GENERATOR", "TORCH_DONT_CHECK_COMPILER_ABI"} <= diffs
    missing = sorted(n for n in diffs if not _documented(n))
    assert not missing, f"build variables set by only one of the recipes and not in docs/conda-forge.md: {missing}"


def test_the_pairs_are_the_same_builds():
    pairs = _pairs()
    assert len(pairs) == 3
    for theirs, ours in pairs:
        assert theirs["variant"]["cuda_compiler_version"] == ours["variant"]["cuda_compiler_version"]
        assert theirs["variant"]["c_stdlib_version"] == ours["variant"]["c_stdlib_version"]
        assert theirs["license"] == ours["license"]
        assert theirs["test_imports"][0] == ours["test_imports"][0] == "mmcv"


@pytest.mark.parametrize("doc_claim, theirs_has", [
    ("`psutil` in build", True), ("`typing_extensions` in run", True), ("`py-opencv` in run", False)])
def test_named_rows_match_the_feedstock_render(doc_claim, theirs_has):
    name, section = doc_claim.split("`")[1], doc_claim.rsplit(" ", 1)[1]
    assert any(row.startswith(f"| {doc_claim} ") for row in _deviation_rows())
    for theirs, _ in _pairs():
        assert (name.lower() in {_name(s) for s in theirs["requirements"][section]}) is theirs_has
