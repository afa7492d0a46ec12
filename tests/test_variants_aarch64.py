"""linux-aarch64 rows of conda_build_config.yaml (issue 42 item 3): selected by `# [aarch64]`
selectors, checked against src/mmstack/data/arm_hosts.toml, rendered by py-rattler-build for
--target-platform linux-aarch64 alike with the real conda-build's render
(tests/data/conda_build_render/render_linux-aarch64.json, its header says how it was made)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("rattler_build", reason="py-rattler-build is the optional 'build' extra")

from mmstack.builder import recipes as build
from mmstack.errors import BadInput
from mmstack.facts import gpus
from mmstack.variants import arm_hosts, matrix as variants

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "conda_build_config.yaml"
MMCV = ROOT / "recipes" / "mmcv"
FIXTURE = ROOT / "tests" / "data" / "conda_build_render" / "render_linux-aarch64.json"
PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")


@pytest.fixture(scope="module")
def facts():
    return gpus.load()


@pytest.fixture(scope="module")
def arm_matrix(facts):
    return variants.load_matrix(facts, CONFIG, "linux-aarch64")


def test_the_aarch64_rows_are_the_migration_targets_cpu_fat_and_two_generations(arm_matrix):
    assert len(arm_matrix) == 20
    assert {v.platform for v in arm_matrix} == {"linux-aarch64"} and {v.pytorch for v in arm_matrix} == {"2.13"}
    for py in PYTHONS:
        rows = {v.build_string_prefix: v for v in arm_matrix if v.python == py}
        assert sorted(rows) == ["cpu", "cuda130_all", "cuda130_sm100", "cuda130_sm90"]
        assert rows["cuda130_all"].arch_list == "7.5;8.0;8.6;8.7;9.0;10.0;11.0;12.0+PTX"
        assert (rows["cuda130_sm90"].arch_min, rows["cuda130_sm100"].arch_min) == ("9.0", "10.0")
    # keys (CI cache keys, job names) never collide with linux-64's
    assert all(v.key.endswith("-linux-aarch64") for v in arm_matrix)
    # no linux-64 generation environment takes an aarch64 build
    assert all(v.envs == () for v in arm_matrix)


def test_the_linux64_matrix_is_untouched_by_the_aarch64_rows(facts):
    matrix = variants.load_matrix(facts, CONFIG)
    assert len(matrix) == 60 and {v.platform for v in matrix} == {"linux-64"}
    assert not any(v.key.endswith("aarch64") for v in matrix)
    assert not any("8.7" in v.arch_list for v in matrix)  # the aarch64 fat list stays on aarch64


def test_the_aarch64_rows_agree_with_conda_forges_arm_builds_and_serve_every_arm_host(facts, arm_matrix):
    assert arm_hosts.problems(arm_matrix, facts) == []
    names = {h.gpu for h in arm_hosts.load().host}
    assert {"NVIDIA GH200", "NVIDIA GB200", "NVIDIA GB10", "Jetson T5000", "Jetson AGX Orin"} <= names


def test_a_fat_row_without_orin_or_a_host_without_a_row_is_reported(facts, arm_matrix):
    linux64_list = variants.load_matrix(facts, CONFIG)
    x86_fat = next(v for v in linux64_list if v.cuda == "13.0" and v.arch_tag == "all")
    bad = [dataclasses.replace(v, arch_list=x86_fat.arch_list) if v.arch_tag == "all" else v for v in arm_matrix]
    found = arm_hosts.problems(bad, facts)
    assert any("conda-forge's sbsa list for CUDA 13.0 is 7.5;8.0;8.6;8.7" in p for p in found), found
    # the solver's pick for Orin is that fat row (arm_hosts.serving_row), which then lacks 8.7
    assert any(p.startswith("Jetson AGX Orin (8.7): a solver takes cuda130_all") and "only PTX by JIT" in p
               for p in found), found
    # without sm90 GH200 takes the fat build's 9.0 SASS; without the fat row too, nothing installs there
    no_sm90 = [v for v in arm_matrix if v.arch_tag != "sm90"]
    assert not any(p.startswith("NVIDIA GH200") for p in arm_hosts.problems(no_sm90, facts))
    only_sm100 = [v for v in no_sm90 if v.arch_tag != "all"]
    assert any(p.startswith("NVIDIA GH200 (9.0): no linux-aarch64 CUDA row installs there")
               for p in arm_hosts.problems(only_sm100, facts))


def test_an_unknown_target_platform_is_refused_in_one_line(facts):
    with pytest.raises(BadInput) as err:
        variants.load_matrix(facts, CONFIG, "osx-arm64")
    assert "linux-aarch64" in err.value.fix
    with pytest.raises(BadInput):
        build.render(recipe_dir=MMCV, variant_config=CONFIG, target_platform="linux-ppc64le")


def _fixture() -> dict:
    from support.fixtures import load_current

    return load_current(FIXTURE, how=" (conda-build installed)")


def test_rattler_build_renders_the_aarch64_rows_as_the_real_conda_build_does():
    doc = _fixture()
    # cross-compiled the way conda-smithy sets a linux-aarch64 job up: build machine linux-64,
    # variant target_platform linux-aarch64 (not a build machine pretending to be aarch64)
    assert doc["target_platform"] == "linux-aarch64" and "variants={'target_platform': 'linux-aarch64'}" in doc["call"]
    assert doc["generated_by"].endswith("make_fixture.py --target-platform linux-aarch64") and doc["conda_build"]
    mask = re.compile(r"_h[0-9a-f]{7}_")
    theirs = {mask.sub("_h#_", v["build_string"]): v for v in doc["variants"]}
    rendered = build.render(recipe_dir=MMCV, variant_config=CONFIG, target_platform="linux-aarch64")
    ours = {mask.sub("_h#_", v.recipe.build.string): v for v in rendered}
    assert len(theirs) == len(doc["variants"]) == len(ours) == 20
    assert sorted(ours) == sorted(theirs)
    for key, v in ours.items():
        r, cb = v.recipe.to_dict(), theirs[key]
        variant = {k: str(val) for k, val in v.variant.items()}
        pins = [f"{s} {variant[s]}.*" if s in variant and " " not in s else s for s in r["requirements"]["build"]]
        assert pins == cb["requirements"]["build"], key
        assert r["requirements"]["run"] == cb["requirements"]["run"], key
        assert r["build"]["number"] == cb["build_number"], key
        # cross-compiled on linux-64 for linux-aarch64: conda-forge's aarch64 compilers
        assert {"gcc_linux-aarch64 14.*", "gxx_linux-aarch64 14.*"} <= set(pins), key
        cuda = variant["cuda_compiler_version"]
        assert (f"cuda-nvcc_linux-aarch64 {cuda}.*" in pins) == (cuda != "None"), key
        assert not any("linux-64" in s for s in pins), key
        # setup.py runs on the build machine: python, numpy and pytorch of the same build type there,
        # with cross-python pointing it at the aarch64 host prefix (conda-forge's torchvision does the same)
        kind = "cpu" if cuda == "None" else "cuda"
        assert {"cross-python_linux-aarch64", f"python {variant['python']}.*", f"pytorch * {kind}*"} <= set(pins), key


def test_mmstack_checks_recipes_renders_the_aarch64_rows_alike_with_both_engines():
    from mmstack.builder.recipes import check_recipes

    note = check_recipes(ROOT)
    assert "mmcv for linux-aarch64: 20 (meta.yaml: 20 per conda-build 26.7.1 (same build strings))" in note
    assert "mmcv: 60 (one per variant" in note  # linux-64's rows as before


def test_mmstack_check_fails_when_the_aarch64_fat_row_drops_orin(tmp_path):
    import shutil

    from mmstack.builder.recipes import check_recipes
    from mmstack.errors import CheckFailed

    shutil.copytree(ROOT / "recipes", tmp_path / "recipes", ignore=shutil.ignore_patterns("output"))
    text = CONFIG.read_text()
    aarch64_fat = '  - "7.5;8.0;8.6;8.7;9.0;10.0;11.0;12.0+PTX"  # [aarch64]'
    assert text.count(aarch64_fat) == 1
    (tmp_path / CONFIG.name).write_text(text.replace(aarch64_fat, aarch64_fat.replace("8.7;", "")))
    with pytest.raises(CheckFailed) as err:
        check_recipes(tmp_path)
    assert "py310-cuda130_all-pytorch2.13-linux-aarch64: the fat row holds" in err.value.one_line()
    assert "arm_hosts.toml" in err.value.one_line()


def test_mmstack_matrix_lists_the_aarch64_rows_with_their_hosts_and_their_estimated_ci_cost():
    from support.cli import mmstack

    code, out, err = mmstack("matrix", "--target-platform", "linux-aarch64", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 20 and {r["target_platform"] for r in rows} == {"linux-aarch64"}, err
    code, out, _ = mmstack("matrix", "--target-platform", "linux-aarch64")
    assert code == 0 and "20 variants" in out and "for linux-aarch64" in out
    assert "NVIDIA GB200, NVIDIA GB300" in out and "Jetson AGX Orin" in out
    # CI cross-compiles them (build.yml's build_aarch64 jobs): in the release total, labelled as an estimate
    from mmstack.variants import ci_cost

    arm = ci_cost.release_cost(variants.load_matrix(gpus.load(), CONFIG, "linux-aarch64"))
    assert f"about {arm.rows_hours:.1f} CPU-hours per release, an estimate" in out
    assert "no linux-aarch64 build has been timed" in out
    linux64 = ci_cost.release_cost(variants.load_matrix(gpus.load(), CONFIG))
    total = linux64.hours + arm.rows_hours  # the noarch packages once
    code, out, _ = mmstack("matrix")
    line = " ".join(out.split())
    assert code == 0 and f"CI build cost per release: {total:.1f} CPU-hours for {linux64.variants + 20} variants" in line
    assert f"linux-64 {linux64.hours:.1f} for {linux64.variants} variants" in line
    assert (f"linux-aarch64 {arm.rows_hours:.1f} for 20 variants, an estimate at linux-64's measured CPU-s per kind "
            "(cross-compiled; no linux-aarch64 build has been timed)") in line
    code, _, err = mmstack("matrix", "--target-platform", "osx-arm64")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "linux-aarch64" in err
