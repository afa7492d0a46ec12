"""The mmcv recipe rendered by rattler-build over a small matrix (tests/data/build_render/):
requirements, pins, the arch list handed to build.sh, build strings and tests per kind of row.
Fast and offline: rendering solves nothing.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

pytest.importorskip("rattler_build", reason="py-rattler-build is the optional 'build' extra")

from mmstack import build, variants  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
MMCV = ROOT / "recipes" / "mmcv"
MMSTACK = ROOT / "recipes" / "mmstack"
CONFIG = Path(__file__).parent / "data" / "build_render" / "conda_build_config.yaml"
SDIST_SHA256 = "ac479247e808d8802f89eadf04d4118de86bdfe81361ec5aed0cc1bf731c67c9"
SDIST_URL = ("https://files.pythonhosted.org/packages/e9/a2/57a733e7e84985a8a0e3101dfb8170fc9db92435c16afad253069ae3f9df/"
             "mmcv-2.2.0.tar.gz")
CUDA_HEADERS = ["libcublas-dev", "libcusparse-dev", "libcurand-dev", "libcusolver-dev"]


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict]:
    """arch tag ("cpu", "sm89", "all") -> the rendered recipe as a dict (plus its variant)."""
    out = {}
    for v in build.render(recipe_dir=MMCV, variant_config=CONFIG):
        recipe = v.recipe.to_dict()
        recipe["variant"] = dict(v.variant)
        out[v.variant.get("arch_tag", "cpu")] = recipe
    return out


def _names(specs) -> list[str]:
    return [str(s).split()[0] for s in specs]


def test_one_package_per_row(rendered):
    assert sorted(rendered) == ["all", "cpu", "sm89"]


@pytest.mark.parametrize("tag, pattern", [
    ("cpu", r"cpu_py311_h[0-9a-f]{7}_0"),
    ("sm89", r"cuda129_sm89_py311_h[0-9a-f]{7}_0"),
    ("all", r"cuda128_all_py311_h[0-9a-f]{7}_100"),
])
def test_build_strings_say_what_the_package_serves(rendered, tag, pattern):
    assert re.fullmatch(pattern, rendered[tag]["build"]["string"])


def test_build_string_hashes_differ_per_row(rendered):
    hashes = {r["build"]["string"].split("_h")[-1] for r in rendered.values()}
    assert len(hashes) == 3


def test_build_strings_agree_with_the_variant_matrix(rendered):
    """variants.py predicts the build string glob that environments and `conda install` select by."""
    for tag, recipe in rendered.items():
        v = recipe["variant"]
        cuda = None if v["cuda_compiler_version"] == "None" else v["cuda_compiler_version"]
        row = variants.Variant(v["python"], v["pytorch"], cuda, v["mmcv_arch_list"], v.get("arch_tag", "cpu"))
        assert fnmatch.fnmatch(recipe["build"]["string"], row.build_string_glob), tag


def test_cpu_row_has_no_cuda_anywhere(rendered):
    req = rendered["cpu"]["requirements"]
    assert _names(req["build"]) == ["gcc_linux-64", "sysroot_linux-64", "gxx_linux-64", "ninja"]
    assert "sysroot_linux-64 2.28.*" in req["build"]
    assert not [s for s in req["build"] + req["host"] + req["run"] if "cuda" in s.split()[0]]
    assert "pytorch 2.13.* cpu*" in req["host"] and "pytorch 2.13.* cpu*" in req["run"]
    assert "__cuda" not in req["run"]


@pytest.mark.parametrize("tag, cuda, tag_prefix", [("sm89", "12.9", "cuda129"), ("all", "12.8", "cuda128")])
def test_cuda_rows_pin_cuda_and_a_matching_pytorch(rendered, tag, cuda, tag_prefix):
    req = rendered[tag]["requirements"]
    assert f"cuda-nvcc_linux-64 {cuda}.*" in req["build"]  # compiler('cuda'), only here
    assert f"cuda-version =={cuda}" in req["host"]
    assert set(CUDA_HEADERS + ["cuda-cudart-dev"]) <= set(req["host"])
    # built against, and run with, a torch built for the same CUDA minor
    assert f"pytorch 2.13.* {tag_prefix}*" in req["host"]
    assert f"pytorch 2.13.* {tag_prefix}*" in req["run"]
    assert "__cuda" in req["run"]
    assert sorted(req["ignore_run_exports"]["from_package"]) == sorted(CUDA_HEADERS)


@pytest.mark.parametrize("tag", ["cpu", "sm89", "all"])
def test_run_requirements_are_mmcvs_runtime_requirements(rendered, tag):
    run = _names(rendered[tag]["requirements"]["run"])
    # requirements/runtime.txt (regex is Windows-only), under conda-forge's names
    for name in ["python", "pytorch", "addict", "mmengine", "numpy", "packaging", "pillow", "py-opencv", "pyyaml", "yapf"]:
        assert name in run
    host = _names(rendered[tag]["requirements"]["host"])
    assert {"python", "pip", "setuptools", "wheel", "packaging", "pytorch"} <= set(host)


@pytest.mark.parametrize("tag, arch_list", [
    ("cpu", "none"), ("sm89", "8.9"), ("all", "8.0;8.6;8.9;9.0;10.0;12.0+PTX"),
])
def test_the_arch_list_reaches_build_sh(rendered, tag, arch_list):
    script = rendered[tag]["build"]["script"]
    assert script["file"] == "build.sh"
    assert script["env"]["MMSTACK_ARCH_LIST"] == arch_list


def test_source_is_the_pypi_sdist_with_every_patch(rendered):
    patches = sorted(p.relative_to(MMCV).as_posix() for p in (MMCV / "patches").glob("*.patch"))
    assert patches, "recipes/mmcv/patches/ holds the numbered patches"
    for recipe in rendered.values():
        (source,) = recipe["source"]
        assert source["url"] == [SDIST_URL] or source["url"] == SDIST_URL
        assert source["sha256"] == SDIST_SHA256
        assert [str(p) for p in source["patches"]] == patches
    assert (MMCV / "build.sh").is_file()


def test_tests_import_ops_check_ext_run_the_ladder_and_the_fatbin(rendered):
    for tag, recipe in rendered.items():
        tests = recipe["tests"]
        python = [t["python"] for t in tests if "python" in t]
        assert python and {"mmcv", "mmcv.ops"} <= set(python[0]["imports"])
        contents = [t["package_contents"] for t in tests if "package_contents" in t]
        assert contents and any("mmcv/_ext" in f for f in contents[0]["files"])
        scripts = [t for t in tests if "script" in t]
        assert all(t["requirements"]["run"] == ["mmstack"] for t in scripts)
        text = [t["script"] if isinstance(t["script"], str) else t["script"]["content"] for t in scripts]
        assert any("mmstack verify --levels L1,L2,L3,L4 --json" in s for s in text)
        fatbin = [t for t in scripts if "mmstack fatbin" in str(t["script"])]
        if tag == "cpu":
            assert fatbin == []
        else:
            assert fatbin[0]["script"]["env"]["MMSTACK_ARCH_LIST"] == recipe["variant"]["mmcv_arch_list"]


def _render_meta_yaml(variant: dict) -> dict:
    """meta.yaml the way conda-build reads it: drop lines whose `# [selector]` is false, render the
    Jinja with the variant, parse the YAML. compiler()/stdlib() resolve as rattler-build does."""
    jinja2 = pytest.importorskip("jinja2")
    yaml = pytest.importorskip("ruamel.yaml")
    cuda = variant["cuda_compiler_version"]
    names = {"linux": True, "linux64": True, "osx": False, "win": False, "unix": True,
             "cuda_compiler_version": cuda, "build_platform": "linux-64", "target_platform": "linux-64"}
    lines = []
    for line in (MMCV / "meta.yaml").read_text().splitlines():
        m = re.search(r"#\s*\[(.+)\]\s*$", line)
        if m and not eval(m.group(1), {}, names):  # noqa: S307 - selectors are Python expressions
            continue
        lines.append(line)
    compilers = {"c": "gcc_linux-64", "cxx": "gxx_linux-64", "cuda": f"cuda-nvcc_linux-64 {cuda}.*"}
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    text = env.from_string("\n".join(lines)).render(
        compiler=compilers.__getitem__, stdlib=lambda lang: "sysroot_linux-64 2.28.*",
        CONDA_PY=variant["python"].replace(".", ""), PKG_HASH="0000000", **variant)
    return yaml.YAML(typ="safe").load(text)


@pytest.mark.parametrize("tag", ["cpu", "sm89", "all"])
def test_meta_yaml_is_the_same_recipe(rendered, tag):
    """conda-build is not installable here; render meta.yaml its way and compare to recipe.yaml's."""
    ours = rendered[tag]
    variant = {"arch_tag": tag, **ours["variant"]}
    meta = _render_meta_yaml(variant)
    prefix, tail = ours["build"]["string"].rsplit("_h", 1)
    number = tail.rsplit("_", 1)[1]
    assert number == ("100" if tag == "all" else "0")  # the fat build wins a plain `conda install mmcv`
    assert meta["build"]["string"] == f"{prefix}_h0000000_{number}"
    assert meta["build"]["number"] == ours["build"]["number"] == int(number)
    for section in ("build", "host", "run"):
        assert [" ".join(str(s).split()) for s in meta["requirements"][section]] == ours["requirements"][section], section
    assert meta["build"]["script_env"][0] == f"MMSTACK_ARCH_LIST={variant['mmcv_arch_list']}"
    assert meta["build"].get("ignore_run_exports_from", []) == \
        ours["requirements"].get("ignore_run_exports", {}).get("from_package", [])
    (source,) = ours["source"]
    assert meta["source"]["url"] in (source["url"], [source["url"]], *source["url"])
    assert meta["source"]["sha256"] == source["sha256"]
    assert meta["source"]["patches"] == [str(p) for p in source["patches"]]
    assert {"mmcv", "mmcv.ops"} <= set(meta["test"]["imports"]) and meta["test"]["requires"] == ["mmstack"]
    commands = "\n".join(meta["test"]["commands"])
    assert "mmstack verify --levels L1,L2,L3,L4 --json" in commands
    assert ("mmstack fatbin" in commands) == (tag != "cpu")
    if tag != "cpu":
        assert f'mmstack fatbin --expect "{variant["mmcv_arch_list"]}"' in commands


def test_the_repository_matrix_renders_for_every_environment():
    """The real conda_build_config.yaml: each environment's rows render to their build strings."""
    config = ROOT / "conda_build_config.yaml"
    all_rows = build.render(recipe_dir=MMCV, variant_config=config)
    for env, glob in [("cpu", "cpu_py3*"), ("rtx4090", "cuda1*_sm89_py3*"), ("rtx5090", "cuda1*_sm120_py3*")]:
        wanted = build.selection_for_env(env, config)
        strings = [v.recipe.build.string for v in all_rows if any(build._matches(v.variant, w) for w in wanted)]
        assert strings and all(fnmatch.fnmatch(s, glob) for s in strings), (env, strings)


def test_mmstack_recipe_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (v,) = build.render(recipe_dir=MMSTACK, variant_config=CONFIG)
    recipe = v.recipe.to_dict()
    assert recipe["package"]["version"] == project["version"]
    assert recipe["build"]["noarch"] == "python"
    scripts = [f"{k} = {val}" for k, val in project["scripts"].items()]
    assert recipe["build"]["python"]["entry_points"] == scripts
    run = _names(recipe["requirements"]["run"])
    for dep in project["dependencies"]:
        name = re.split(r"[<>=;\[ ]", dep)[0]
        if "python_version < '3.11'" not in dep:  # python_min is 3.11: tomllib is in the stdlib
            assert name in run, dep


def test_check_recipes_passes_on_the_repository():
    from mmstack.build import check_recipes

    note = check_recipes(ROOT)
    assert "mmcv: 18 (one per variant, build strings match)" in note and "mmdet: 1" in note


def test_check_recipes_names_the_recipe_when_build_strings_collide(tmp_path):
    """A build string that forgets the arch tag makes the per-generation builds of one CUDA
    indistinguishable: `mmstack check` must fail naming the recipe."""
    import shutil

    from mmstack.build import check_recipes
    from mmstack.errors import CheckFailed

    shutil.copytree(ROOT / "recipes", tmp_path / "recipes", ignore=shutil.ignore_patterns("output"))
    shutil.copy(ROOT / "conda_build_config.yaml", tmp_path)
    recipe = tmp_path / "recipes" / "mmcv" / "recipe.yaml"
    text = recipe.read_text()
    assert 'torch_proc_type ~ "_" ~ arch_tag' in text
    recipe.write_text(text.replace('torch_proc_type ~ "_" ~ arch_tag', 'torch_proc_type'))
    with pytest.raises(CheckFailed) as err:
        check_recipes(tmp_path)
    assert "recipes/mmcv/recipe.yaml" in err.value.one_line() and "expected 1" in err.value.one_line()
