"""The mmcv recipe rendered by rattler-build over a small matrix (tests/data/build_render/):
requirements, pins, the arch list handed to build.sh, build strings and tests per kind of row.
Fast and offline: rendering solves nothing.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("rattler_build", reason="py-rattler-build is the optional 'build' extra")

from mmstack.builder import recipes as build
from mmstack.variants import matrix as variants

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
CUDA_HEADERS = ["libcublas-dev", "libcusparse-dev", "libcusolver-dev"]
# the recipe's own build number; a row's effective number adds PRIORITY_STEP x its mmcv_priority (cpu 0, all 1, sm89 4)
BUILD_NUMBER = variants.recipe_build_number(ROOT / variants.CONFIG_FILE)


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
    ("cpu", rf"cpu_py311_h[0-9a-f]{{7}}_{BUILD_NUMBER}"),
    ("sm89", rf"cuda129_sm89_py311_h[0-9a-f]{{7}}_{4 * variants.PRIORITY_STEP + BUILD_NUMBER}"),
    ("all", rf"cuda130_all_py311_h[0-9a-f]{{7}}_{variants.PRIORITY_STEP + BUILD_NUMBER}"),
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
    assert "sysroot_linux-64 2.17.*" in req["build"]  # conda-forge's glibc 2.17 outside CUDA 13
    assert not [s for s in req["build"] + req["host"] + req["run"] if "cuda" in s.split()[0]]
    # conda-forge's idiom: host pytorch (its run_exports pin the minor), build type constrained
    assert "pytorch" in req["host"] and "pytorch * cpu*" in req["host"]
    assert "pytorch" not in _names(req["run"])
    assert req["run_constraints"] == ["pytorch * cpu*"]
    assert "__cuda" not in req["run"]


@pytest.mark.parametrize("tag, cuda, stdlib", [("sm89", "12.9", "2.17"), ("all", "13.0", "2.28")])
def test_cuda_rows_pin_cuda_and_a_cuda_pytorch(rendered, tag, cuda, stdlib):
    req = rendered[tag]["requirements"]
    assert f"cuda-nvcc_linux-64 {cuda}.*" in req["build"]  # compiler('cuda'), only here
    assert f"sysroot_linux-64 {stdlib}.*" in req["build"]
    assert f"cuda-version =={cuda}" in req["host"]
    assert {*CUDA_HEADERS, "cuda-cudart-dev"} <= set(req["host"])
    assert "libcurand-dev" not in req["host"]  # mmcv 2.2.0 includes no curand header
    assert "pytorch" in req["host"] and "pytorch * cuda*" in req["host"]
    assert req["run_constraints"] == ["pytorch * cuda*"]
    assert f"__cuda >={cuda.split('.')[0]}" in req["run"]  # cuda-version's floor, as a dependency
    assert sorted(req["ignore_run_exports"]["from_package"]) == sorted(CUDA_HEADERS)


def test_cep46_the_per_generation_row_pins_cuda_arch_and_needs_cuda_arch(rendered):
    """CEP 46 as nvidia-virtual-packages' README builds it: host `cuda-arch <its lowest arch>` (whose
    run-export needs `__cuda_arch` to reach it), the build number raised by 100 x mmcv_priority; and
    `__cuda_arch` itself in run, so a conda without the virtual package takes the fat build."""
    sm89 = rendered["sm89"]["requirements"]
    assert "cuda-arch ==8.9" in sm89["host"]
    # bounded by the next major (matrix.Variant.cuda_arch_spec derives the same): past it the SASS stops running
    assert "__cuda_arch >=8.9,<9" in sm89["run"]
    for tag in ("cpu", "all"):
        req = rendered[tag]["requirements"]
        assert not [s for s in req["host"] + req["run"] if "cuda-arch" in s or "__cuda_arch" in s], tag
    numbers = {tag: r["build"]["number"] for tag, r in rendered.items()}
    assert numbers["cpu"] < numbers["all"] < numbers["sm89"] == 4 * variants.PRIORITY_STEP + BUILD_NUMBER


@pytest.mark.parametrize("tag", ["cpu", "sm89", "all"])
def test_run_requirements_are_mmcvs_runtime_requirements(rendered, tag):
    run = _names(rendered[tag]["requirements"]["run"])
    # requirements/runtime.txt (regex is Windows-only), under conda-forge's names, and cv2
    for name in ["python", "addict", "mmengine", "numpy", "packaging", "pillow", "py-opencv", "pyyaml", "yapf"]:
        assert name in run
    host = _names(rendered[tag]["requirements"]["host"])
    # py-opencv in host: setup.py then adds no opencv-python to the metadata (pip check passes)
    assert {"python", "pip", "setuptools", "wheel", "numpy", "packaging", "py-opencv", "pytorch"} <= set(host)


@pytest.mark.parametrize("tag, arch_list", [
    ("cpu", "none"), ("sm89", "8.9+PTX"), ("all", "7.5;8.0;8.6;9.0;10.0;11.0;12.0+PTX"),
])
def test_the_arch_list_reaches_build_sh(rendered, tag, arch_list):
    script = rendered[tag]["build"]["script"]
    assert script["file"] == "build.sh"
    assert script["env"]["MMSTACK_ARCH_LIST"] == arch_list
    assert script["env"]["MMSTACK_ARCH_TAG"] == tag


def test_source_is_the_pypi_sdist_with_every_patch(rendered):
    patches = sorted(p.relative_to(MMCV).as_posix() for p in (MMCV / "patches").glob("*.patch"))
    assert len(patches) == 19, "recipes/mmcv/patches/ holds the numbered patches"
    for recipe in rendered.values():
        source, tests = recipe["source"]
        assert source["url"] == [SDIST_URL] or source["url"] == SDIST_URL
        assert source["sha256"] == SDIST_SHA256
        assert [str(p) for p in source["patches"]] == patches
        # the second source only brings upstream's tests/ (the test section runs them), unpatched
        assert tests["target_directory"] == "upstream" and not tests.get("patches")
        assert tests["sha256"] == "13b2bdab6e97799177dee568efdb2ae0bb48b1dc924a8b617416ee8a392e5348"
    assert (MMCV / "build.sh").is_file()


def test_licence_declares_the_nvidia_licensed_ops(rendered):
    for recipe in rendered.values():
        assert recipe["about"]["license"] == "Apache-2.0 AND LicenseRef-NVIDIA-License"
        assert recipe["about"]["license_file"] == ["LICENSE", "LICENSES.md"]


def test_tests_import_ops_pip_check_run_the_complete_ladder_and_the_fatbin(rendered):
    for tag, recipe in rendered.items():
        tests = recipe["tests"]
        python = [t["python"] for t in tests if "python" in t]
        assert python and {"mmcv", "mmcv.ops"} <= set(python[0]["imports"])
        assert python[0].get("pip_check", True) is True
        contents = [t["package_contents"] for t in tests if "package_contents" in t]
        assert contents and any("mmcv/_ext" in f for f in contents[0]["files"])
        scripts = [t for t in tests if "script" in t]
        assert all(t["requirements"]["run"][0] == "mmstack" for t in scripts)
        (ladder,) = [t for t in scripts if "mmstack verify" in str(t["script"])]
        assert ladder["requirements"]["run"] == ["mmstack", "torchvision"]
        text = "\n".join(ladder["script"])
        assert "mmstack verify --levels L1,L2,L3,L4 --l4 complete --json $gpu" in text
        assert 'if nvidia-smi -L >/dev/null 2>&1; then gpu="--expect-gpu"' in text
        fatbin = [t for t in scripts if "mmstack fatbin" in str(t["script"])]
        if tag == "cpu":
            assert fatbin == []
        else:
            assert fatbin[0]["script"]["env"]["MMSTACK_ARCH_LIST"] == recipe["variant"]["mmcv_arch_list"]


def test_the_offline_test_channel_drops_torchvision_and_nothing_else(monkeypatch):
    """lab/src/mmstack_lab/standin/bootstrap.py has no torchvision; MMSTACK_NO_TORCHVISION=1 (set by the e2e
    build) drops it from the ladder's test requirements without changing the package hash."""
    select = {"arch_tag": "cpu", "python": "3.11"}
    (plain,) = build.render(recipe_dir=MMCV, variant_config=CONFIG, select=select)
    monkeypatch.setenv("MMSTACK_NO_TORCHVISION", "1")
    (offline,) = build.render(recipe_dir=MMCV, variant_config=CONFIG, select=select)
    assert offline.recipe.build.string == plain.recipe.build.string
    runs = [t.get("requirements", {}).get("run") for t in offline.recipe.to_dict()["tests"]]
    assert ["mmstack"] in runs and not any("torchvision" in (r or []) for r in runs)


# ---- recipe.yaml (py-rattler-build) against meta.yaml (the real conda-build) ---------------

FIXTURE = Path(__file__).parent / "data" / "conda_build_render" / "render.json"


def _conda_build_fixture() -> dict:
    from support.fixtures import load_current

    return load_current(FIXTURE, how=" (conda-build installed)")


def _key(variant: dict) -> tuple:
    return (variant["python"], variant.get("pytorch"), variant["cuda_compiler_version"], variant["arch_tag"])


def _with_variant_pins(specs: list[str], variant: dict) -> list[str]:
    """A bare name that is a variant key gets the variant's pin: conda-build writes it into the
    render; rattler-build applies the same `name X.*` when it resolves the environment."""
    return [f"{s} {variant[s]}.*" if s in variant and " " not in s else s for s in specs]


def test_rattler_build_and_the_real_conda_build_render_every_variant_alike():
    """The whole matrix: recipe.yaml through py-rattler-build against meta.yaml through the real
    conda-build (tests/data/conda_build_render/render.json, its header says how it was made)."""
    doc = _conda_build_fixture()
    theirs = {_key(v["variant"]): v for v in doc["variants"]}
    ours = {}
    for v in build.render(recipe_dir=MMCV, variant_config=ROOT / "conda_build_config.yaml"):
        variant = {k: str(val) for k, val in v.variant.items()}
        variant.setdefault("arch_tag", "cpu")
        ours[_key(variant)] = (variant, v.recipe.to_dict())
    assert len(theirs) == len(doc["variants"]) == 60
    assert sorted(ours) == sorted(theirs)
    mask = re.compile(r"_h[0-9a-f]{7}_")  # each engine hashes the variant its own way
    for key, (variant, r) in ours.items():
        cb = theirs[key]
        assert {k: variant[k] for k in cb["variant"]} == cb["variant"], key
        assert (r["package"]["name"], r["package"]["version"]) == (cb["name"], cb["version"]), key
        assert mask.sub("_h#_", r["build"]["string"]) == mask.sub("_h#_", cb["build_string"]), key
        assert r["build"]["number"] == cb["build_number"], key
        req = r["requirements"]
        assert _with_variant_pins(req["build"], variant) == cb["requirements"]["build"], key
        assert _with_variant_pins(req["host"], variant) == cb["requirements"]["host"], key
        assert req["run"] == cb["requirements"]["run"], key
        assert req.get("run_constraints", []) == cb["requirements"]["run_constrained"], key
        assert req.get("ignore_run_exports", {}).get("from_package", []) == cb["ignore_run_exports_from"], key
        env = r["build"]["script"]["env"]
        assert [f"{k}={env[k]}" for k in ("MMSTACK_ARCH_LIST", "MMSTACK_ARCH_TAG", "MMCV_WITH_OPS")] == \
            cb["script_env"], key
        # tests: the same imports, requirements and commands (pip check is a flag in recipe.yaml)
        tests = r["tests"]
        (python,) = [t["python"] for t in tests if "python" in t]
        assert python["imports"] == cb["test_imports"], key
        requires = {d for t in tests for d in t.get("requirements", {}).get("run", [])}
        assert requires | ({"pip"} if python.get("pip_check", True) else set()) == set(cb["test_requires"]), key
        assert "pip check" in cb["test_commands"]
        ladder = next(t["script"] for t in tests if "mmstack verify" in str(t.get("script")))
        assert all(line in cb["test_commands"] for line in ladder), key
        fatbin = any("mmstack fatbin --expect" in str(t.get("script")) for t in tests)
        assert fatbin == any("mmstack fatbin --expect" in c for c in cb["test_commands"]) == \
            (variant["cuda_compiler_version"] != "None"), key
        assert r["about"]["license"] == cb["license"] and r["about"]["license_file"] == cb["license_file"], key


def test_the_fixture_says_how_it_was_made():
    doc = _conda_build_fixture()
    assert doc["generated_by"].endswith("tests/data/conda_build_render/make_fixture.py")
    assert "bypass_env_check=True, finalize=False" in doc["call"]
    assert doc["conda_build"] and doc["conda"]
    assert (FIXTURE.parent / "make_fixture.py").is_file()


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
    # every dependency, those with a marker too: a noarch package cannot carry `python_version < '3.11'`,
    # and python_min is 3.10, where mmstack reads TOML with tomli
    for dep in project["dependencies"]:
        assert re.split(r"[<>=;\[ ]", dep)[0] in run, dep
    assert "tomli>=2; python_version < '3.11'" in project["dependencies"]
    (python_min,) = [d for d in recipe["requirements"]["host"] if d.startswith("python ")]
    assert python_min == "python 3.10.*" and "python >=3.10" in recipe["requirements"]["run"]
    assert project["requires-python"] == ">=3.10"


NOARCH = {"mmstack": "pyh", "mmengine": "safeload_pyh", "mmdet": "mmcv22_pyh"}  # recipe -> its build string prefix


@pytest.mark.parametrize("name", sorted(NOARCH))
def test_the_noarch_recipes_build_and_test_on_the_matrix_oldest_python(name):
    """issue 42: python_min (conda-forge's CFEP-25) defaults to the oldest Python of the matrix, for
    which mmcv has builds, in both formats: host `python <min>.*`, run `python >=<min>`, tests on
    `<min>.*`. A Python 3.10 environment then takes our mmengine, mmdet and mmstack beside our mmcv.
    The lock tests' fake channel (mmstack_lab.standin.fake_channel) models the packages so."""
    from mmstack_lab.standin import fake_channel

    oldest = min(re.findall(r'^  - "(3\.\d+)"$', (ROOT / "conda_build_config.yaml").read_text().split("\npython:\n")[1]
                            .split("\n\n")[0], re.M), key=lambda v: tuple(map(int, v.split("."))))
    assert oldest == "3.10"
    (v,) = build.render(recipe_dir=ROOT / "recipes" / name, variant_config=ROOT / "conda_build_config.yaml")
    recipe = v.recipe.to_dict()
    assert f"python {oldest}.*" in recipe["requirements"]["host"]
    assert f"python >={oldest}" in recipe["requirements"]["run"]
    (versions,) = [t["python"]["python_version"] for t in recipe["tests"] if "python" in t]
    assert versions == [f"{oldest}.*", "*"]  # the oldest and the newest (conda-smithy's lint hint)
    meta = ROOT / "recipes" / name / "meta.yaml"
    if meta.is_file():  # conda-build's form (recipes/mmstack has none)
        text = meta.read_text()
        assert f'{{% set python_min = python_min | default("{oldest}") %}}' in text
        assert text.count("    - python {{ python_min }}.*\n") == 2  # host and test requires
        assert "    - python >={{ python_min }}\n" in text
    (fake,) = [p for p in fake_channel.standard_packages([]) if p.name == name and p.build == NOARCH[name]]
    assert fake.noarch == "python" and f"python >={oldest}" in fake.depends, fake
    # mmstack modelled whole (its run requirements are what a lock of pixi.toml pulls in), the
    # others by a subset of theirs
    fake_names, run_names = set(_names(fake.depends)), set(_names(recipe["requirements"]["run"]))
    assert fake_names == run_names if name == "mmstack" else fake_names <= run_names, (fake.depends, run_names)


NOARCH_FIXTURE = FIXTURE.with_name("render_noarch.json")


@pytest.mark.parametrize("name", ["mmengine", "mmdet"])
def test_the_real_conda_build_renders_the_noarch_meta_yaml_on_python_min_as_rattler_build_does(name):
    """issue 42: each noarch meta.yaml through the real conda-build (render_noarch.json, its
    make_fixture.py --noarch) against recipe.yaml through py-rattler-build: one build, on the same
    python_min (host `python 3.10.*`, run `python >=3.10`, tests on 3.10), the same run requirements."""
    from support.fixtures import load_current

    assert NOARCH_FIXTURE.is_file(), (f"{NOARCH_FIXTURE.relative_to(ROOT)} is not recorded: make it with "
                                      "`CONDARC=/dev/null python tests/data/conda_build_render/make_fixture.py --noarch` "
                                      "(conda-build installed)")
    doc = load_current(NOARCH_FIXTURE, how=" (conda-build installed)")
    assert doc["generated_by"].endswith("make_fixture.py --noarch") and doc["conda_build"]
    (cb,) = doc["recipes"][name]  # python_min pins python: conda-build loops over no Python
    (v,) = build.render(recipe_dir=ROOT / "recipes" / name, variant_config=ROOT / "conda_build_config.yaml")
    r = v.recipe.to_dict()
    # each engine hashes its own way; and conda-build's unfinalized render fills `py{{ PKG_HASH }}`
    # with its placeholder 1234567 (environ.py: PKG_HASH is a hash only once the metadata is final,
    # and only `h{{ PKG_HASH }}` is filled in by build_id), where a build writes pyh<7 hex>
    mask = re.compile(r"py(h[0-9a-f]{7}|1234567)_")
    assert (cb["name"], cb["version"], cb["noarch"]) == (r["package"]["name"], r["package"]["version"], "python")
    assert re.fullmatch(r"(safeload|mmcv22)_py1234567_\d+", cb["build_string"]), cb["build_string"]
    assert re.fullmatch(r"(safeload|mmcv22)_pyh[0-9a-f]{7}_\d+", r["build"]["string"]), r["build"]["string"]
    assert mask.sub("pyh#_", cb["build_string"]) == mask.sub("pyh#_", r["build"]["string"])
    assert cb["build_number"] == r["build"]["number"]
    assert cb["requirements"]["host"] == r["requirements"]["host"] and "python 3.10.*" in cb["requirements"]["host"]
    assert cb["requirements"]["run"] == r["requirements"]["run"] and "python >=3.10" in cb["requirements"]["run"]
    assert cb["requirements"]["build"] == r["requirements"].get("build", [])
    (python,) = [t["python"] for t in r["tests"] if "python" in t]
    assert "python 3.10.*" in cb["test_requires"] and python["python_version"][0] == "3.10.*"
    assert set(python["imports"]) <= set(cb["test_imports"])


def test_check_recipes_passes_on_the_repository():
    from mmstack.builder.recipes import check_recipes

    note = check_recipes(ROOT)
    assert "mmcv: 60 (one per variant, build strings match" in note and "mmdet: 1" in note
    assert "meta.yaml: 60 per conda-build 26.7.1 (same build strings)" in note


def test_check_recipes_fails_when_meta_yaml_drifts_from_its_recorded_conda_build_render(tmp_path):
    from mmstack.builder.recipes import CONDA_BUILD_RENDER, check_recipes
    from mmstack.errors import CheckFailed

    shutil.copytree(ROOT / "recipes", tmp_path / "recipes", ignore=shutil.ignore_patterns("output"))
    shutil.copy(ROOT / "conda_build_config.yaml", tmp_path)
    (tmp_path / CONDA_BUILD_RENDER).parent.mkdir(parents=True)
    shutil.copy(FIXTURE, tmp_path / CONDA_BUILD_RENDER)
    check_recipes(tmp_path)  # the copy is consistent
    meta = tmp_path / "recipes" / "mmcv" / "meta.yaml"
    meta.write_text(meta.read_text().replace("    - yapf\n", "    - yapf >=0.40\n"))
    with pytest.raises(CheckFailed) as err:
        check_recipes(tmp_path)
    assert "recipes/mmcv/meta.yaml changed since conda-build's render was recorded" in err.value.one_line()
    assert "make_fixture.py" in err.value.one_line()


def test_check_recipes_names_the_recipe_when_build_strings_collide(tmp_path):
    """A build string that forgets the arch tag makes the per-generation builds of one CUDA
    indistinguishable: `mmstack check` must fail naming the recipe."""
    from mmstack.builder.recipes import check_recipes
    from mmstack.errors import CheckFailed

    shutil.copytree(ROOT / "recipes", tmp_path / "recipes", ignore=shutil.ignore_patterns("output"))
    shutil.copy(ROOT / "conda_build_config.yaml", tmp_path)
    recipe = tmp_path / "recipes" / "mmcv" / "recipe.yaml"
    text = recipe.read_text()
    assert 'version_to_buildstring ~ "_" ~ arch_tag' in text
    recipe.write_text(text.replace('version_to_buildstring ~ "_" ~ arch_tag', 'version_to_buildstring'))
    with pytest.raises(CheckFailed) as err:
        check_recipes(tmp_path)
    assert "recipes/mmcv/recipe.yaml" in err.value.one_line() and "expected 1" in err.value.one_line()


# ---- build.sh: a fat build takes pytorch's arch list, or stops -----------------------------

FAT_12_9 = "5.0;6.0;7.0;7.5;8.0;8.6;9.0;10.0;12.0+PTX"


def _build_sh(tmp_path, **env):
    """build.sh up to its variant checks: PYTHON=false makes it stop at the first python call after."""
    base = {"PATH": "/usr/bin:/bin", "CONDA_BUILD": "1", "cuda_compiler_version": "12.9",
            "MMSTACK_ARCH_TAG": "all", "MMSTACK_ARCH_LIST": FAT_12_9, "PYTHON": "false", "SRC_DIR": str(tmp_path)}
    env = {k: v for k, v in {**base, **env}.items() if v is not None}
    return subprocess.run(["bash", str(MMCV / "build.sh")], env=env, capture_output=True, text=True, timeout=60)


def test_fat_build_takes_pytorchs_arch_list(tmp_path):
    run = _build_sh(tmp_path, CF_TORCH_CUDA_ARCH_LIST=FAT_12_9)
    assert f"TORCH_CUDA_ARCH_LIST={FAT_12_9}" in run.stdout + run.stderr
    assert "ERROR" not in run.stderr


def test_fat_build_stops_when_pytorchs_arch_list_differs_from_the_matrix_row(tmp_path):
    run = _build_sh(tmp_path, CF_TORCH_CUDA_ARCH_LIST="7.5;8.0;8.6;9.0;10.0;11.0;12.0+PTX")
    assert run.returncode == 1
    assert "pytorch was built for CF_TORCH_CUDA_ARCH_LIST='7.5;8.0;8.6;9.0;10.0;11.0;12.0+PTX'" in run.stderr
    assert "mmcv_arch_list row" in run.stderr and "TORCH_CUDA_ARCH_LIST=" not in run.stdout


def test_fat_build_stops_without_pytorchs_activation(tmp_path):
    run = _build_sh(tmp_path, CF_TORCH_CUDA_ARCH_LIST=None)
    assert run.returncode == 1 and "CF_TORCH_CUDA_ARCH_LIST is not set" in run.stderr


def test_single_generation_build_keeps_its_own_arch_list(tmp_path):
    """sm89 is a per-generation row: pytorch's fat list must not replace it."""
    run = _build_sh(tmp_path, MMSTACK_ARCH_TAG="sm89", MMSTACK_ARCH_LIST="8.9", CF_TORCH_CUDA_ARCH_LIST=FAT_12_9)
    assert "TORCH_CUDA_ARCH_LIST=8.9" in run.stdout + run.stderr and "ERROR" not in run.stderr


def _fake_nvcc(tmp_path, release: str) -> Path:
    """An nvcc that prints what a real one of `release` prints for --version (build.sh reads its major)."""
    bindir = tmp_path / f"cuda-{release}" / "bin"
    bindir.mkdir(parents=True)
    nvcc = bindir / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                    f"echo 'Cuda compilation tools, release {release}, V{release}.88'\n")
    nvcc.chmod(0o755)
    return bindir.parent


def _nvcc_flags(run) -> str:
    """The flags build.sh exports, from its `set -x` trace (`+ export 'NVCC_APPEND_FLAGS= ...'`)."""
    line = next(x for x in run.stderr.splitlines() if x.startswith("+ export") and "NVCC_APPEND_FLAGS=" in x)
    return line.split("NVCC_APPEND_FLAGS=", 1)[1].rstrip("'")


@pytest.mark.parametrize("release", ["12.9", "13.0"])
def test_fatbin_size_mode_only_where_it_adds_no_driver_floor(tmp_path, release):
    """build.sh adds nvcc's --compress-mode=size to -Xfatbin -compress-all for a CUDA major whose
    facts say such fatbins need no driver above the major's minor-version floor (13: 580), and not
    where they would (12: 550.54.14 against 525.60.13); the nvcc torch runs (CUDA_HOME's) decides."""
    from mmstack.facts import gpus

    major = gpus.load()
    row = next(m for m in major.cuda_major if m.major == int(release.split(".")[0]))
    assert row.fatbin_size_mode_driver and row.fatbin_size_mode_source
    no_new_floor = gpus.version_key(row.fatbin_size_mode_driver) <= gpus.version_key(row.minor_compat_driver)
    run = _build_sh(tmp_path, CF_TORCH_CUDA_ARCH_LIST=FAT_12_9, cuda_compiler_version=release,
                    CUDA_HOME=str(_fake_nvcc(tmp_path, release)))
    flags = _nvcc_flags(run)
    assert "-Xfatbin -compress-all" in flags and "ERROR" not in run.stderr
    assert ("--compress-mode=size" in flags) == no_new_floor
    assert no_new_floor == (release == "13.0")  # what the facts say today


@pytest.mark.skipif(not shutil.which("nvcc"), reason="no nvcc on PATH")
def test_build_sh_reads_the_real_nvcc_on_path(tmp_path):
    """The real nvcc's --version (this machine's, 13.0 on the development and CI machines) parses."""
    nvcc = shutil.which("nvcc")
    release = re.search(r"release (\d+)\.(\d+)", subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout)
    run = _build_sh(tmp_path, CF_TORCH_CUDA_ARCH_LIST=FAT_12_9, PATH=f"{Path(nvcc).parent}:/usr/bin:/bin")
    assert f"+ nvcc_major={release.group(1)}" in run.stderr
    assert ("--compress-mode=size" in _nvcc_flags(run)) == (int(release.group(1)) >= 13)


def test_without_an_nvcc_to_ask_the_fatbin_keeps_compress_all_alone(tmp_path):
    run = _build_sh(tmp_path, CF_TORCH_CUDA_ARCH_LIST=FAT_12_9)
    assert _nvcc_flags(run).split() == ["-Xfatbin", "-compress-all"]


def test_the_compiler_pin_reaches_the_build_requirements_of_both_engines():
    """issue 21 item 5: conda-forge's gcc 14 (zipped with CUDA in conda_build_config.yaml) is what
    every row's build environment asks for, in rattler-build's render and in the real
    conda-build's (the fixture); an override (the CPU e2e build's stand-in gcc) replaces it."""
    want = {"gcc_linux-64 14.*", "gxx_linux-64 14.*"}
    rendered = build.render(recipe_dir=MMCV, variant_config=ROOT / "conda_build_config.yaml")
    assert len(rendered) == 60
    for v in rendered:
        assert want <= set(v.recipe.to_dict()["requirements"]["build"]), dict(v.variant)
    for v in _conda_build_fixture()["variants"]:
        assert want <= set(v["requirements"]["build"]), v["variant"]
    overridden = build.render(recipe_dir=MMCV, variant_config=ROOT / "conda_build_config.yaml",
                              overrides={"c_compiler_version": "12", "cxx_compiler_version": "12"})
    for v in overridden:
        build_reqs = set(v.recipe.to_dict()["requirements"]["build"])
        assert {"gcc_linux-64 12.*", "gxx_linux-64 12.*"} <= build_reqs and not want & build_reqs
