"""recipes/mmdet: rendered by py-rattler-build, kept in step with meta.yaml and its patch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

rattler_build = pytest.importorskip(
    "rattler_build", reason="py-rattler-build is the 'build' extra"
)

ROOT = Path(__file__).resolve().parents[1]
RECIPE_DIR = ROOT / "recipes" / "mmdet"
PATCH = RECIPE_DIR / "patches" / "0001-admit-mmcv-2.2.patch"


@pytest.fixture(scope="module")
def rendered() -> dict:
    from rattler_build import JinjaConfig, PlatformConfig, RenderConfig, Stage0Recipe, VariantConfig

    platform = PlatformConfig(target_platform="linux-64")
    recipe = Stage0Recipe.from_file(RECIPE_DIR / "recipe.yaml")
    variants = VariantConfig.from_conda_build_config(
        ROOT / "conda_build_config.yaml", JinjaConfig(platform=platform)
    )
    outputs = recipe.render(variants, RenderConfig(platform=platform))
    # noarch: python uses none of the matrix's keys, so the whole matrix collapses to one build.
    assert len(outputs) == 1, [o.variant for o in outputs]
    return outputs[0].recipe.to_dict()


def test_one_noarch_python_package_from_the_pypi_sdist(rendered):
    assert rendered["package"] == {"name": "mmdet", "version": "3.3.0"}
    assert rendered["build"]["noarch"] == "python"
    assert rendered["build"]["string"].startswith("pyh")
    (source,) = rendered["source"]
    assert source["url"].startswith("https://files.pythonhosted.org/")
    assert source["url"].endswith("/mmdet-3.3.0.tar.gz")
    assert re.fullmatch(r"[0-9a-f]{64}", source["sha256"])
    assert source["patches"] == ["patches/0001-admit-mmcv-2.2.patch"]
    assert all((RECIPE_DIR / p).is_file() for p in source["patches"])
    assert (RECIPE_DIR / rendered["about"]["license_file"][0]).is_file()


def test_run_requirements_admit_this_projects_mmcv_and_nothing_newer(rendered):
    run = rendered["requirements"]["run"]
    assert "mmcv >=2.0.0rc4,<2.3.0" in run
    assert "mmengine >=0.7.1,<1.0.0" in run
    # requirements/runtime.txt of mmdet 3.3.0, under conda-forge's names.
    for name in ("numpy", "pycocotools", "scipy", "shapely", "six", "terminaltables", "tqdm",
                 "matplotlib-base"):
        assert name in run
    assert not any(dep.split()[0] in {"pytorch", "torch", "torchvision"} for dep in run)


def test_patch_has_its_header_and_matches_the_run_requirement(rendered):
    text = PATCH.read_text()
    header, _, diff = text.partition("\ndiff --git ")
    for needle in ("What:", "Why it is safe:", "Upstream:", "open-mmlab/mmcv#3096",
                   "open-mmlab/mmdetection#11680"):
        assert needle in header
    assert "+mmcv_maximum_version = '2.3.0'" in diff
    assert "-mmcv_maximum_version = '2.2.0'" in diff
    assert "+mmcv>=2.0.0rc4,<2.3.0" in diff
    # The import-time assertion and the solver must agree on the upper bound.
    cap = re.search(r"\+mmcv_maximum_version = '([\d.]+)'", diff).group(1)
    assert f"mmcv >=2.0.0rc4,<{cap}" in rendered["requirements"]["run"]


def test_recipe_tests_import_mmdet_check_configs_and_run_l5(rendered):
    tests = rendered["tests"]
    imports = next(t["python"]["imports"] for t in tests if "python" in t)
    assert {"mmdet", "mmdet.models"} <= set(imports)
    files = next(t["package_contents"]["files"] for t in tests if "package_contents" in t)
    assert any(f.endswith("dcnv2/faster-rcnn_r50-mdconv-c3-c5_fpn_1x_coco.py") or
               f.endswith("dcn/faster-rcnn_r50-dconv-c3-c5_fpn_1x_coco.py") for f in files)
    scripts = [t["script"] for t in tests if "script" in t]
    assert any("mmstack.train_detector" in s for s in scripts)


def test_meta_yaml_matches_recipe_yaml(rendered):
    meta = (RECIPE_DIR / "meta.yaml").read_text()
    (source,) = rendered["source"]
    assert source["sha256"] in meta
    assert source["url"].replace("3.3.0", "{{ version }}") in meta
    assert '{% set version = "3.3.0" %}' in meta
    for dep in rendered["requirements"]["run"]:
        if dep.startswith("python "):
            continue
        assert f"    - {dep}\n" in meta, dep
    assert "patches/0001-admit-mmcv-2.2.patch" in meta
    assert "noarch: python" in meta
