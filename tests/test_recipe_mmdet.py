"""recipes/mmdet: rendered by py-rattler-build, kept in step with meta.yaml and its patch."""

from __future__ import annotations

import re
import sys
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
    from rattler_build import (
        JinjaConfig,
        PlatformConfig,
        RenderConfig,
        Stage0Recipe,
        VariantConfig,
    )

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
    # "mmcv22_" tells it from conda-forge's unpatched mmdet 3.3.0; pixi.toml pins on it.
    assert re.fullmatch(r"mmcv22_pyh[0-9a-f]{7}_4", rendered["build"]["string"])
    source, upstream = rendered["source"]
    assert source["url"].startswith("https://files.pythonhosted.org/")
    assert source["url"].endswith("/mmdet-3.3.0.tar.gz")
    assert re.fullmatch(r"[0-9a-f]{64}", source["sha256"])
    assert source["patches"] == [
        "patches/0001-admit-mmcv-2.2.patch",
        "patches/0002-build-without-torch.patch",
        "patches/0003-randperm-on-the-gallerys-device.patch",
        "patches/0004-sparse-priors-on-the-indices-device.patch",
        "patches/0005-max-iou-assigner-on-the-device.patch",
        "patches/0006-rpn-targets-and-loss-without-host-reads.patch",
        "patches/0007-roi-targets-batched.patch",
        "patches/0008-rpn-proposals-batched.patch",
        "patches/0009-anchor-targets-batched.patch",
    ]
    assert all((RECIPE_DIR / p).is_file() for p in source["patches"])
    # the second source only brings upstream's tests/ (tag v3.3.0's commit), unpatched
    assert upstream == {"git": "https://github.com/open-mmlab/mmdetection.git",
                        "rev": "44ebd17b145c2372c4b700bfb9cb20dbd28ab64a", "target_directory": "upstream"}
    # A noarch package built from pure-Python sources: no pytorch, no compilers in the build.
    assert rendered["requirements"]["host"] == ["python 3.10.*", "pip", "setuptools", "wheel"]  # python_min
    assert "build" not in rendered["requirements"]
    assert (RECIPE_DIR / rendered["about"]["license_file"][0]).is_file()


def test_run_requirements_admit_this_projects_mmcv_and_nothing_newer(rendered):
    run = rendered["requirements"]["run"]
    assert "mmcv >=2.0.0rc4,<2.3.0" in run
    # recipes/mmengine's build: conda-forge's cannot load the checkpoints it writes on torch >= 2.6
    assert "mmengine >=0.7.1,<1.0.0 safeload_*" in run
    # requirements/runtime.txt of mmdet 3.3.0, under conda-forge's names.
    for name in ("numpy", "pycocotools", "scipy", "shapely", "six", "terminaltables", "tqdm",
                 "matplotlib-base"):
        assert name in run
    # imported at module level (mmdet.models: torch; mmdet.datasets.transforms: cv2, PIL), as
    # conda-forge's mmdet lists them; the bare names leave the build to mmcv's pins.
    for name in ("pytorch", "py-opencv", "pillow", "addict", "rich"):
        assert name in run
    assert "torchvision" not in [dep.split()[0] for dep in run]


# top-level module -> conda-forge package
CONDA_NAME = {"torch": "pytorch", "cv2": "py-opencv", "PIL": "pillow", "matplotlib": "matplotlib-base"}


def test_every_module_level_import_of_mmdet_is_a_run_requirement(rendered):
    """What a fresh prefix with only mmdet's run requirements must hold: every third-party module
    that a module of the sdist's mmdet/ (not the .mim tools) imports at module level."""
    import ast
    import tarfile

    from mmstack_lab.standin import offline

    try:
        sdist = offline.cached_sdist("mmdet")
    except OSError as exc:
        pytest.skip(f"PyPI unreachable for the mmdet sdist: {exc}")
    imported: dict[str, str] = {}
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if not (member.isfile() and member.name.endswith(".py") and parts[1:2] == ["mmdet"]) or ".mim" in parts:
                continue
            tree = ast.parse(tar.extractfile(member).read())
            for node in tree.body:
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "mmdet":
                        imported.setdefault(top, member.name)
    assert {"torch", "cv2", "mmcv", "mmengine", "numpy"} <= set(imported)  # the scan sees them
    run = {dep.split()[0] for dep in rendered["requirements"]["run"]}
    missing = {CONDA_NAME.get(m, m): where for m, where in imported.items() if CONDA_NAME.get(m, m) not in run}
    assert not missing, f"imported at module level but not a run requirement: {missing}"


def test_pip_check_runs(rendered):
    (python,) = [t["python"] for t in rendered["tests"] if "python" in t]
    assert python.get("pip_check", True) is True


def test_every_patch_has_what_why_upstream():
    patches = sorted((RECIPE_DIR / "patches").glob("*.patch"))
    assert [p.name[:5] for p in patches] == [f"{i:04d}-" for i in range(1, len(patches) + 1)]
    for patch in patches:
        header = patch.read_text().partition("\ndiff --git ")[0]
        for needle in ("What:", "Why", "Upstream:"):
            assert needle in header, f"{patch.name} lacks {needle!r}"


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
    for config in ("faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py",
                   "dcn/faster-rcnn_r50-dconv-c3-c5_fpn_1x_coco.py",
                   "dcnv2/faster-rcnn_r50-mdconv-c3-c5_fpn_1x_coco.py"):
        assert any(f.endswith(config) for f in files), config
    scripts = [line for t in tests if "script" in t
               for line in ([t["script"]] if isinstance(t["script"], str) else t["script"])]
    assert any("mmstack.verify.train_detector" in s for s in scripts)
    assert any("mmstack verify --levels L6 --model faster-rcnn --timeout 900" in s for s in scripts)  # the checkpoint loop


def test_meta_yaml_matches_recipe_yaml(rendered):
    meta = (RECIPE_DIR / "meta.yaml").read_text()
    source, upstream = rendered["source"]
    assert f"git_url: {upstream['git']}\n" in meta and f"git_rev: {upstream['rev']}\n" in meta
    assert source["sha256"] in meta
    assert source["url"].replace("3.3.0", "{{ version }}") in meta
    assert '{% set version = "3.3.0" %}' in meta
    for dep in rendered["requirements"]["run"]:
        if dep.startswith("python "):
            continue
        assert f"    - {dep}\n" in meta, dep
    for patch in source["patches"]:
        assert patch in meta
    assert "noarch: python" in meta
    assert "string: mmcv22_py{{ PKG_HASH }}_{{ build_number }}" in meta


# ---- the real build (slow: rattler-build, the PyPI sdist, the bootstrap channel) -------------

@pytest.mark.slow
def test_recipe_builds_without_pytorch_and_carries_the_patch_and_configs(tmp_path):
    """Build with rattler-build from the real sdist; host has python/pip/setuptools/wheel only.

    The recipe's own tests (import mmdet.models, L5) need mmcv, pycocotools, scipy... which the
    bootstrap channel does not carry, so they are skipped here; tests/test_verify_train_detector.py runs
    the same L5 step in the development environment.
    """
    import json
    import subprocess

    from rattler_build import (
        JinjaConfig,
        PlatformConfig,
        RenderConfig,
        Stage0Recipe,
        ToolConfiguration,
        VariantConfig,
    )

    from mmstack_lab.standin import bootstrap, offline

    try:  # built on python_min (3.10), as CI's noarch job builds it: that Python's stand-in channel
        boot = bootstrap.bootstrap_channel(python=bootstrap.python_min_python(), log=lambda msg: None)
    except bootstrap.BootstrapUnavailable as exc:
        pytest.skip(f"no bootstrap channel for python_min on this machine: {exc}")
    try:
        recipe_file = offline.offline_recipe_for("mmdet", RECIPE_DIR, tmp_path / "mmdet") / "recipe.yaml"
    except OSError as exc:
        pytest.skip(f"PyPI unreachable for the mmdet sdist: {exc}")

    platform = PlatformConfig(target_platform="linux-64")
    (variant,) = Stage0Recipe.from_file(recipe_file).render(
        VariantConfig.from_conda_build_config(ROOT / "conda_build_config.yaml",
                                              JinjaConfig(platform=platform)),
        RenderConfig(platform=platform),
    )
    result = variant.run_build(tool_config=ToolConfiguration(test_strategy="skip"),
                               output_dir=tmp_path / "out", channels=[boot.as_uri()])
    (pkg,) = [Path(p) for p in result.packages]
    assert pkg.parent.name == "noarch" and pkg.name.startswith("mmdet-3.3.0-mmcv22_pyh")

    unpacked = tmp_path / "unpacked"
    subprocess.run([sys.executable, "-m", "zipfile", "-e", str(pkg), str(unpacked)], check=True)
    for part in unpacked.glob("*.tar.zst"):
        subprocess.run(["tar", "--zstd", "-xf", str(part), "-C", str(unpacked)], check=True)
    index = json.loads((unpacked / "info" / "index.json").read_text())
    assert "mmcv >=2.0.0rc4,<2.3.0" in index["depends"]
    site = unpacked / "site-packages" / "mmdet"
    assert "mmcv_maximum_version = '2.3.0'" in (site / "__init__.py").read_text()
    for config in ("faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py",
                   "dcnv2/faster-rcnn_r50-mdconv-c3-c5_fpn_1x_coco.py"):
        assert (site / ".mim" / "configs" / config).is_file()
    metadata = next(unpacked.glob("site-packages/mmdet-3.3.0.dist-info/METADATA")).read_text()
    assert 'mmcv<2.3.0,>=2.0.0rc4; extra == "mim"' in metadata
