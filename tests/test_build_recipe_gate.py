"""`mmstack check --strict` fails a broken mmcv recipe (issue 22, item 2): a patch that does not
exist or does not apply to the sdist, run requirements or tests cut away or out of step with
conda-build's render of meta.yaml."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.cli import ROOT, mmstack

from mmstack.builder import recipe_gate
from mmstack.builder.recipes import check_recipes
from mmstack.errors import CheckFailed, MmstackError
from mmstack_lab.standin.offline import cached_sdist

pytest.importorskip("rattler_build", reason="the recipes stage renders with py-rattler-build")

RECIPE = ROOT / "recipes" / "mmcv" / "recipe.yaml"
LAST_PATCH = "      - patches/0008-nms-gather-keep-per-word.patch\n"
N_PATCHES = len(list((ROOT / "recipes" / "mmcv" / "patches").glob("0*.patch")))


def _tree(tmp_path: Path, recipe_text: str | None = None) -> Path:
    """What `mmstack check --root` reads, copied; recipes/mmcv/recipe.yaml replaced by `recipe_text`."""
    root = tmp_path / "repo"
    for name in ("recipes", "envs", ".github"):
        shutil.copytree(ROOT / name, root / name)
    for name in ("conda_build_config.yaml", "pixi.toml"):
        shutil.copy2(ROOT / name, root / name)
    shutil.copytree(ROOT / "tests" / "data" / "conda_build_render", root / "tests" / "data" / "conda_build_render")
    if recipe_text is not None:
        (root / "recipes" / "mmcv" / "recipe.yaml").write_text(recipe_text)
    return root


def _strict(root: Path) -> tuple[int, dict]:
    code, out, err = mmstack("check", "--strict", "--json", "--root", str(root))
    assert out, err
    data = json.loads(out)
    return code, {c["check"]: c for c in data["checks"]}


def _lines(n: int) -> str:
    return "".join(RECIPE.read_text().splitlines(keepends=True)[:n])


def test_the_recipe_as_committed_passes_and_says_what_it_checked(tmp_path, monkeypatch):
    monkeypatch.setenv(recipe_gate.SOURCE_DIRS_ENV, str(cached_sdist("mmcv").parent))
    detail = check_recipes(ROOT)
    assert f"{N_PATCHES} patches apply to mmcv-2.2.0.tar.gz" in detail
    assert "run and tests of 60 builds match meta.yaml's" in detail


def test_without_a_local_sdist_the_detail_says_the_patches_were_not_applied(monkeypatch, tmp_path):
    monkeypatch.setenv(recipe_gate.SOURCE_DIRS_ENV, str(tmp_path))
    detail = check_recipes(ROOT)
    assert f"{N_PATCHES} patches exist (not applied: no local copy of mmcv-2.2.0.tar.gz" in detail
    assert "patches apply" not in detail


def test_first_71_lines_fail_strict(tmp_path):
    code, checks = _strict(_tree(tmp_path, _lines(71)))
    assert code != 0
    assert checks["recipes"]["status"] == "FAIL"


def test_no_run_requirements_and_no_tests_fail_strict(tmp_path):
    text = RECIPE.read_text()
    cut = text[:text.index("  run:\n")]  # renders: everything up to the run requirements
    code, checks = _strict(_tree(tmp_path, cut))
    assert code == 1
    assert checks["recipes"]["status"] == "FAIL"
    assert "has no run requirements" in checks["recipes"]["detail"]
    assert "requirements.run" in checks["recipes"]["detail"]


def test_a_patch_that_does_not_exist_fails_strict(tmp_path):
    text = RECIPE.read_text()
    assert text.count(LAST_PATCH) == 1
    code, checks = _strict(_tree(tmp_path, text.replace(LAST_PATCH, LAST_PATCH + "      - patches/0009-no-such.patch\n")))
    assert code == 1
    assert checks["recipes"]["status"] == "FAIL"
    assert "patch patches/0009-no-such.patch does not exist" in checks["recipes"]["detail"]


def test_a_patch_that_does_not_apply_to_the_sdist_fails(tmp_path, monkeypatch):
    root = _tree(tmp_path)
    bad = root / "recipes" / "mmcv" / "patches" / "0003-replace-np-float.patch"
    removed = "-                    dtype=np.float))\n"
    assert bad.read_text().count(removed) == 1
    bad.write_text(bad.read_text().replace(removed, "-                    dtype=np.float32))\n"))  # a line the sdist lacks
    monkeypatch.setenv(recipe_gate.SOURCE_DIRS_ENV, str(cached_sdist("mmcv").parent))
    with pytest.raises(CheckFailed, match=r"patch 0003-replace-np-float.patch does not apply to mmcv-2.2.0.tar.gz"):
        check_recipes(root)


def test_a_run_requirement_meta_yaml_has_missing_fails(tmp_path):
    text = RECIPE.read_text()
    assert text.count("    - yapf\n") == 1
    with pytest.raises(CheckFailed, match=r"lacks run requirement\(s\) yapf that meta.yaml has"):
        check_recipes(_tree(tmp_path, text.replace("    - yapf\n", "")))


def test_a_test_meta_yaml_runs_missing_fails(tmp_path):
    text = RECIPE.read_text()
    upstream = "tests/test_ops tests/test_cnn"
    assert upstream in text
    with pytest.raises(CheckFailed, match=r"tests lack what meta.yaml's test: command .*upstream_tests"):
        check_recipes(_tree(tmp_path, text.replace(upstream, "tests/test_cnn")))


def test_a_missing_fixture_still_requires_run_and_tests():
    with pytest.raises(MmstackError, match="has no tests"):
        recipe_gate.check_run_and_tests(RECIPE, [("cpu_py311_h0000000_0", {"requirements": {"run": ["python"]}})], None)
