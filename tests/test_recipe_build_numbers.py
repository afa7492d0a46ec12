"""Each recipe's build number accounts for its patches: one version, so every patch that enters
changes the package's content and must raise the build number (conda-forge's rule; a channel that
ships new content under an old file name leaves `conda update` with nothing to take).

The convention, in both formats of each recipe: the build_number line's comment lists, per build
number, the patches that entered with it (`1: patches/0004; 2: 0005-0006`); a build 0 entry may be
left out when 0 is the recipe's first release with the patches below the first entry. The matrix
(variants.recipe_build_number) reads mmcv's base from recipe.yaml, the one place it is written.
The comment is bookkeeping; tests/data/recipe_builds.json records what each build number was made
from (the sources' sha256s and the listed patches' bytes), so new sources under an old number fail.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from mmstack.errors import BadInput
from mmstack.facts.gpus import load
from mmstack.variants import matrix as variants

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ("mmcv", "mmdet", "mmengine")
_YAML = re.compile(r"^  build_number: (\d+)(?:  # (.*))?$", re.M)
_META = re.compile(r"^\{% set build_number = (\d+) %\}(?:  \{# (.*) #\})?$", re.M)
_ENTRY = re.compile(r"(\d+): (?:patches/)?(\d{4})(?:-(\d{4}))?")
_PATCH = re.compile(r"^\s+- (patches/(\d{4})-\S+\.patch)$", re.M)  # (path, number) of each listed patch


def _number_and_history(text: str, pattern: re.Pattern) -> tuple[int, list[tuple[int, int, int]]]:
    found = pattern.findall(text)
    assert len(found) == 1, pattern.pattern
    number, comment = found[0]
    return int(number), [(int(b), int(lo), int(hi or lo)) for b, lo, hi in _ENTRY.findall(comment or "")]


@pytest.mark.parametrize("name", RECIPES)
def test_the_build_number_names_the_patches_each_build_added_up_to_the_last_listed(name):
    recipe = (ROOT / "recipes" / name / "recipe.yaml").read_text()
    meta = (ROOT / "recipes" / name / "meta.yaml").read_text()
    number, history = _number_and_history(recipe, _YAML)
    assert _number_and_history(meta, _META) == (number, history), "meta.yaml's build_number line differs from recipe.yaml's"
    listed = [int(n) for _, n in _PATCH.findall(recipe)]
    assert listed == sorted(listed) and listed == [int(n) for _, n in _PATCH.findall(meta)]
    assert history, f"{name}: the build_number line has no `N: patches/AAAA-BBBB` history"
    builds = [b for b, _, _ in history]
    assert builds == list(range(builds[0], number + 1)) and builds[0] in (0, 1), builds  # one entry per build, the last is this one
    ranges = [(lo, hi) for _, lo, hi in history]
    for (_, hi), (lo, _) in itertools.pairwise(ranges):
        assert lo == hi + 1, ranges  # contiguous: no patch entered without a build of its own
    assert ranges[-1][1] == listed[-1], f"{name}: patch {listed[-1]:04d} is listed, build {number}'s entry ends at {ranges[-1][1]:04d}: raise the build number"
    assert set(range(ranges[0][0], listed[-1] + 1)) <= set(listed)


def test_the_matrix_takes_mmcvs_base_from_the_recipe_and_renders_alike():
    """variants.Variant.build_number is recipe.yaml's base + 100 x mmcv_priority: the numbers
    `mmstack matrix` shows and the stand-in channels carry are the ones rattler-build renders."""
    pytest.importorskip("rattler_build", reason="py-rattler-build is the 'build' extra")
    from mmstack.builder import recipes as build

    base, _ = _number_and_history((ROOT / "recipes/mmcv/recipe.yaml").read_text(), _YAML)
    config = ROOT / variants.CONFIG_FILE
    assert variants.recipe_build_number(config) == base
    rows = {(v.python, v.pytorch, v.build_string_prefix): v.build_number for v in variants.load_matrix(load(), config)}
    rendered = {}
    for r in build.render(recipe_dir=ROOT / "recipes/mmcv", variant_config=config):
        v = {k: str(val) for k, val in r.variant.items()}
        rendered[(v["python"], v["pytorch"], r.recipe.to_dict()["build"]["string"].split("_py")[0])] = r.recipe.to_dict()["build"]["number"]
    assert rendered == rows
    assert min(rows.values()) == base


def test_a_recipe_without_one_build_number_line_is_bad_input(tmp_path):
    (tmp_path / "recipes/mmcv").mkdir(parents=True)
    (tmp_path / "recipes/mmcv/recipe.yaml").write_text("context:\n  name: mmcv\n")
    with pytest.raises(BadInput, match=r"context\.build_number"):
        variants.recipe_build_number(tmp_path / variants.CONFIG_FILE)
    assert variants.recipe_build_number(tmp_path / "elsewhere" / variants.CONFIG_FILE) == 0  # a config alone counts from 0


# The record of what each build was made from: the history comment is bookkeeping (a patch added by
# widening the last entry, `1: 0014-0019`, passes it); the record holds each (version, build number)
# to the sources it was built from, so new sources under an old number fail wherever they came from.
RECORD = ROOT / "tests" / "data" / "recipe_builds.json"
_VERSION = re.compile(r'^  version: "?([0-9][^"\s]*)"?$', re.M)
_SHA = re.compile(r"^\s+sha256: ([0-9a-f]{64})$", re.M)


def _sources_digest(recipe_dir: Path) -> tuple[str, int, str, str]:
    """(version, build number, the patches' range, sha256 over the sources' sha256s, each listed patch's
    name and bytes in the recipe's order, and how it is built: recipe.yaml's `build:` section and the
    script file it names): what a build of this number is made from."""
    text = (recipe_dir / "recipe.yaml").read_text()
    (version,) = _VERSION.findall(text)
    number, _ = _number_and_history(text, _YAML)
    h = hashlib.sha256()
    for sha in _SHA.findall(text):
        h.update(b"source\0" + sha.encode() + b"\0")
    patches = _PATCH.findall(text)
    for rel, _ in patches:
        h.update(rel.encode() + b"\0" + (recipe_dir / rel).read_bytes() + b"\0")
    build = yaml.safe_load(text)["build"]
    h.update(b"build\0" + json.dumps(build, sort_keys=True).encode() + b"\0")
    script = build.get("script")
    if isinstance(script, dict) and script.get("file"):
        h.update(b"script\0" + (recipe_dir / script["file"]).read_bytes() + b"\0")
    span = f"{patches[0][1]}-{patches[-1][1]}" if patches else "none"
    return version, number, span, h.hexdigest()


def _check_record(name: str, recipe_dir: Path, record: dict) -> None:
    version, number, span, digest = _sources_digest(recipe_dir)
    builds = record.get(name, {}).get(version, {})
    entry = f'"{number}": {{"patches": "{span}", "sha256": "{digest}"}}'
    assert str(number) in builds, (
        f"{RECORD.name}: {name} {version} build {number} is not recorded; once its package is made, add {entry}")
    assert builds[str(number)]["sha256"] == digest, (
        f"{name} {version}: the sources (their sha256s and patches {span}) or the build section/script differ "
        f"from what build {number} was "
        f"recorded with ({RECORD.name}): raise build_number in recipes/{name}/recipe.yaml and meta.yaml, "
        f"and record the new build as {entry}")
    assert number == max(map(int, builds)), f"{name} {version}: build {number} is older than one recorded"


@pytest.mark.parametrize("name", RECIPES)
def test_each_build_number_keeps_the_sources_it_was_recorded_with(name):
    _check_record(name, ROOT / "recipes" / name, json.loads(RECORD.read_text()))


def test_a_patch_added_under_the_last_build_number_fails_the_record(tmp_path):
    """The case the history comment cannot tell: the next patch entering with its build's entry widened
    (`1: 0014-0018` -> `1: 0014-0019`, `2: 0019` -> `2: 0019-0020`), an entered patch's bytes edited, and
    build.sh edited, the number kept."""
    record = json.loads(RECORD.read_text())
    _check_record("mmcv", ROOT / "recipes" / "mmcv", record)  # the real recipe passes
    _, number, _, _ = _sources_digest(ROOT / "recipes" / "mmcv")
    recipe = tmp_path / "mmcv"
    shutil.copytree(ROOT / "recipes" / "mmcv", recipe, ignore=shutil.ignore_patterns("proposed"))
    text = (recipe / "recipe.yaml").read_text()
    last, last_number = _PATCH.findall(text)[-1]
    nxt = f"{int(last_number) + 1:04d}"
    new = f"patches/{nxt}-a-new-fix.patch"
    (recipe / new).write_text("--- a/setup.py\n+++ b/setup.py\n")
    line = _YAML.search(text).group(0)
    # the last entry is a range (`1: 0014-0018`) or one patch (`2: 0019`): either way it now ends at nxt
    widened = (line.replace(f"-{last_number}", f"-{nxt}") if f"-{last_number}" in line
               else line.replace(f": {last_number}", f": {last_number}-{nxt}"))
    assert widened != line
    text = text.replace(f"- {last}\n", f"- {last}\n      - {new}\n", 1).replace(line, widened)
    (recipe / "recipe.yaml").write_text(text)
    with pytest.raises(AssertionError, match=r"raise build_number in recipes/mmcv/recipe\.yaml"):
        _check_record("mmcv", recipe, record)
    shutil.copytree(ROOT / "recipes" / "mmcv", tmp_path / "edited", ignore=shutil.ignore_patterns("proposed"))
    with (tmp_path / "edited" / last).open("a") as f:
        f.write("\n")
    with pytest.raises(AssertionError, match=f"differ from what build {number} was recorded with"):
        _check_record("mmcv", tmp_path / "edited", record)
    shutil.copytree(ROOT / "recipes" / "mmcv", tmp_path / "script", ignore=shutil.ignore_patterns("proposed"))
    with (tmp_path / "script" / "build.sh").open("a") as f:
        f.write("echo a new build step\n")
    with pytest.raises(AssertionError, match=f"differ from what build {number} was recorded with"):
        _check_record("mmcv", tmp_path / "script", record)
