"""The generated build.yml's linux-aarch64 jobs: each aarch64 row cross-compiled on CPU_RUNNER
(`--target-platform linux-aarch64`, tests skipped, the .conda uploaded as a linux-64 build's is),
tested on an Arm runner (the GPU runner mapped for its platform-qualified runner_key, else
vars.ARM_RUNNER, else GitHub's hosted ubuntu-24.04-arm, where the GPU levels skip and say so), and
published by the channel job in the linux-aarch64 subdir only when its test job passed. The
linux-64 jobs keep their shape (tests/test_ci_workflows.py, tests/test_build_e2e.py)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from support import ci_steps

pytest.importorskip("rattler_build", reason="py-rattler-build (the 'build' extra) reads conda_build_config.yaml")
yaml = pytest.importorskip("yaml", reason="PyYAML reads the generated workflow back")

from test_build_aarch64 import SUBSET, without_sources  # noqa: E402

from mmstack.ci import workflows  # noqa: E402
from mmstack.facts.gpus import load  # noqa: E402
from mmstack.variants import matrix as variants  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / variants.CONFIG_FILE
BUILD = ROOT / workflows.BUILD_FILE
ARM = "linux-aarch64"


@pytest.fixture(scope="module")
def doc():
    return yaml.safe_load(BUILD.read_text())


@pytest.fixture(scope="module")
def arm_matrix():
    return variants.load_matrix(load(), CONFIG, ARM)


def _steps(job: dict, *, uses: str = "", run: str = "") -> list[dict]:
    return [s for s in job["steps"] if (uses and s.get("uses", "").startswith(uses)) or (run and run in s.get("run", ""))]


def test_every_aarch64_row_gets_a_build_and_a_test_job(doc, arm_matrix):
    include = workflows.github_matrix(arm_matrix, config_path=CONFIG)["include"]
    assert len(include) == len(arm_matrix) == 20
    for job in ("build_aarch64", "test_aarch64"):
        assert doc["jobs"][job]["strategy"]["matrix"]["include"] == include, job
    assert all(e["key"].endswith(f"-{ARM}") and e["cache_key"].startswith(f"mmcv-{e['key']}-") for e in include)
    linux64 = doc["jobs"]["build"]["strategy"]["matrix"]["include"]
    assert not {e["key"] for e in include} & {e["key"] for e in linux64}
    assert not {e["cache_key"] for e in include} & {e["cache_key"] for e in linux64}


def test_runner_keys_are_platform_qualified_and_documented_in_the_header(doc, arm_matrix):
    arm_keys = {workflows.runner_key(v) for v in arm_matrix}
    linux64_keys = {e["runner_key"] for e in doc["jobs"]["build"]["strategy"]["matrix"]["include"]}
    assert arm_keys == {f"cpu-{ARM}", f"cuda130_sm90-{ARM}", f"cuda130_sm100-{ARM}", f"cuda130_all-{ARM}"}
    assert not arm_keys & linux64_keys  # cuda130_sm90 and cuda130_all are linux-64 prefixes too
    header = BUILD.read_text().split("\nname: build\n", 1)[0]
    for key in arm_keys:
        assert f'"{key}":' in header, key
    assert '"cuda130_sm90-linux-aarch64": NVIDIA GH200' in header
    assert '"cuda130_sm100-linux-aarch64": NVIDIA GB200, NVIDIA GB300' in header
    assert "ARM_RUNNER" in header and workflows.ARM_RUNNER in header
    names = [e["name"] for e in doc["jobs"]["test_aarch64"]["strategy"]["matrix"]["include"]]
    assert "py3.12 pytorch2.13 cuda13.0 sm90 linux-aarch64 (NVIDIA GH200)" in names
    assert "py3.12 pytorch2.13 cpu linux-aarch64 (any Arm host)" in names


def test_aarch64_builds_cross_compile_on_the_cpu_runner_with_tests_skipped(doc, arm_matrix):
    build = doc["jobs"]["build_aarch64"]
    assert build["needs"] == "matrix" and build["runs-on"] == doc["jobs"]["build"]["runs-on"]
    assert "GPU_RUNNERS" not in build["runs-on"] and "ARM_RUNNER" not in build["runs-on"]
    (step,) = _steps(build, run="scripts/build-variant.sh")
    run = " ".join(step["run"].split())
    assert run.startswith(f"scripts/build-variant.sh --target-platform {ARM} --variant ")
    for key in arm_matrix[0].variant_keys():
        assert f'--variant "{key}=${{{{ matrix.{key} }}}}"' in run
    assert "--no-test" in (ROOT / "scripts" / "build-variant.sh").read_text()  # the script skips the tests
    runs = " ".join(s.get("run", "") for s in build["steps"])
    assert not any(s in runs for s in ("gpu-probe", "ladder", "test-variant"))
    (cache, _ccache) = _steps(build, uses="actions/cache@")
    assert cache["with"]["path"] == f"output/{ARM}/mmcv-*.conda"
    (upload,) = _steps(build, uses="actions/upload-artifact@")
    assert upload["with"]["name"] == "build-${{ matrix.key }}"  # as the linux-64 build jobs name theirs
    assert upload["with"]["path"].split() == [f"output/{ARM}/mmcv-*.conda", "reports/build-mmcv.json"]


def test_aarch64_tests_run_on_an_arm_runner_gpu_where_mapped(doc):
    test = doc["jobs"]["test_aarch64"]
    assert test["needs"] == ["noarch", "build_aarch64"]
    assert test["runs-on"] == ("${{ fromJSON(vars.GPU_RUNNERS || '{}')[matrix.runner_key] || vars.ARM_RUNNER || "
                               "'ubuntu-24.04-arm' }}")
    assert "CPU_RUNNER" not in test["runs-on"]  # an x86 runner cannot run an aarch64 package
    assert test["env"]["MMSTACK_SUBDIR"] == ARM
    order = [s.get("run", s.get("uses", "")).split()[0] for s in test["steps"]]
    assert order.index("scripts/gpu-probe.sh") < order.index("scripts/test-variant.sh") < order.index("scripts/ladder.sh")
    (ladder,) = _steps(test, run="scripts/ladder.sh")
    assert ladder["if"] == "steps.gpu.outputs.present == 'true'"  # no GPU: the probe's summary says what to map
    (probe,) = _steps(test, run="scripts/gpu-probe.sh")
    assert probe["env"]["RUNNER_KEY"] == "${{ matrix.runner_key }}"
    (tested,) = _steps(test, uses="actions/upload-artifact@")
    assert tested["with"] == {"name": f"{ARM}-tested-${{{{ matrix.key }}}}", "path": f"output/{ARM}/mmcv-*.conda*",
                              "if-no-files-found": "error"}
    assert "if" not in tested  # only after every earlier step passed
    assert not tested["with"]["name"].startswith("tested-")  # the linux-64 download pattern must not take it


def test_the_channel_publishes_the_tested_aarch64_packages_in_their_subdir(doc):
    channel = doc["jobs"]["channel"]
    assert "test_aarch64" in channel["needs"] and "!cancelled()" in channel["if"]
    downloads = [s["with"] for s in _steps(channel, uses="actions/download-artifact@")]
    arm = [d for d in downloads if d.get("pattern") == f"{ARM}-tested-*"]
    assert arm == [{"pattern": f"{ARM}-tested-*", "path": f"channel/{ARM}", "merge-multiple": True}]
    steps = [s.get("run", "") for s in channel["steps"]]
    assert steps.index("mmstack channel index channel") > max(
        i for i, s in enumerate(channel["steps"]) if s.get("uses", "").startswith("actions/download-artifact@"))


def test_each_aarch64_jobs_overrides_select_exactly_its_variant(arm_matrix):
    """What each aarch64 job passes as `--variant KEY=VALUE`, rendered for linux-aarch64 as rattler-build does."""
    from rattler_build import JinjaConfig, PlatformConfig, RenderConfig, Stage0Recipe, VariantConfig

    platform = PlatformConfig(target_platform=ARM, host_platform=ARM, build_platform="linux-64")
    base = VariantConfig.from_conda_build_config(str(CONFIG), JinjaConfig(platform=platform))
    recipe = Stage0Recipe.from_file(ROOT / "recipes" / "mmcv" / "recipe.yaml")
    for v, job in zip(arm_matrix, workflows.github_matrix(arm_matrix, config_path=CONFIG)["include"], strict=True):
        rendered = recipe.render(base.merge(VariantConfig({k: [job[k]] for k in v.variant_keys()})),
                                 RenderConfig(platform=platform))
        strings = [r.recipe.build.string for r in rendered]
        assert len(strings) == 1 and strings[0].startswith(f"{v.build_string_prefix}_py{v.python.replace('.', '')}_h"), job["key"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What the scripts read (scripts/lib.sh), and this interpreter's mmstack first on PATH."""
    return {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "MMSTACK_OUTPUT": str(tmp_path / "output"), "MMSTACK_REPORTS": str(tmp_path / "reports"), **extra}


def test_the_aarch64_build_step_offline_fails_in_one_line_naming_what_is_missing(tmp_path, doc):
    """The build job's own step for the aarch64 CPU row, run as a runner runs it (the recipe without
    its sources: the solve is what is tested; tests/test_build_aarch64.py), against a local channel
    that, like every channel here, holds linux-64 and noarch only: rattler-build's real solve fails."""
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    without_sources(recipes)
    (entry,) = [e for e in doc["jobs"]["build_aarch64"]["strategy"]["matrix"]["include"]
                if e["runner_key"] == f"cpu-{ARM}" and e["python"] == "3.11"]
    (step,) = ci_steps.script_steps(doc, "build_aarch64", entry)
    with pytest.raises(RuntimeError) as failed:
        ci_steps.run_steps([step], env=_env(tmp_path, MMSTACK_RECIPES=str(recipes), MMSTACK_SOURCE_CHANNEL=str(SUBSET)),
                           log=lambda _msg: None, timeout=600)
    text = str(failed.value)
    assert "(exit 1)" in text
    errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in text, text
    assert re.search(r"cannot solve the build environment of a linux-aarch64 cross build: no package for .*"
                     r"gcc_linux-aarch64 14\.\*.* in linux-64 or noarch of file://", errors[0]), errors[0]
    assert not list((tmp_path / "output").glob("*/*.conda"))


def test_the_test_step_takes_the_package_of_its_subdir(tmp_path, doc):
    """test-variant.sh tests $OUTPUT/$MMSTACK_SUBDIR/mmcv-*.conda: in an aarch64 test job (env
    MMSTACK_SUBDIR=linux-aarch64) that subdir; a linux-64 job sets nothing and keeps linux-64."""
    out = tmp_path / "output"
    for sub in ("noarch", ARM):
        (out / sub).mkdir(parents=True)
    (entry,) = [e for e in doc["jobs"]["test_aarch64"]["strategy"]["matrix"]["include"]
                if e["runner_key"] == f"cpu-{ARM}" and e["python"] == "3.12"]
    steps = [s for s in ci_steps.script_steps(doc, "test_aarch64", entry) if "test-variant.sh" in s]
    subdir = doc["jobs"]["test_aarch64"]["env"]["MMSTACK_SUBDIR"]
    with pytest.raises(RuntimeError) as failed:
        ci_steps.run_steps(steps, env=_env(tmp_path, MMSTACK_SUBDIR=subdir), log=lambda _msg: None, timeout=300)
    assert f"{out}/{ARM}/mmcv-*.conda does not exist" in str(failed.value), str(failed.value)[-2000:]


def test_the_release_total_counts_the_aarch64_rows_once_as_an_estimate(arm_matrix):
    """CI builds the aarch64 rows, so a release's CPU-hours include them: at linux-64's measured CPU-s
    per kind (labelled an estimate), the noarch packages counted once; a platform without rows adds nothing."""
    from mmstack.variants import ci_cost

    linux64 = variants.load_matrix(load(), CONFIG)
    total = ci_cost.release_total(linux64, {ARM: arm_matrix, "linux-ppc64le": []})
    costs = ci_cost.load_costs()
    rows = sum(costs.seconds(ci_cost.kind_of(v)) for v in arm_matrix) / 3600
    assert list(total.estimated) == [ARM]
    assert total.hours == pytest.approx(ci_cost.release_cost(linux64).hours + rows)
    assert total.variants == len(linux64) + len(arm_matrix)
    doc = total.as_dict()
    assert doc[ARM]["cpu_hours"] == round(rows, 1) and "no linux-aarch64 build has been timed" in doc[ARM]["estimate"]
    assert doc["linux-64"] == ci_cost.release_cost(linux64).as_dict()


def test_the_channel_page_says_an_aarch64_package_is_for_no_linux64_generation(tmp_path):
    """The channel job's page (`mmstack channel page`) over a channel holding both subdirs: a
    linux-aarch64 mmcv is not predicted to run in the linux-64 generation environments (an x86 H100
    cannot install it), its cells say why; the linux-64 build of the same row is judged by its fatbin."""
    from mmstack.builder import page
    from mmstack_lab.standin import fake_channel

    pkgs = [fake_channel.Pkg("mmcv", "2.2.0", "cuda130_sm90_py311", subdir=sub, depends=("python >=3.11",))
            for sub in ("linux-64", ARM)]
    pkgs.append(fake_channel.Pkg("mmstack", "0.1.0", "pyh", subdir="noarch", noarch="python"))
    channel = fake_channel.build_channel(tmp_path / "channel", pkgs)
    data = page.page_data(channel, load(), solve_channels=None)
    rows = {r["subdir"]: r for r in data["packages"]}
    envs = {g.env for g in load().generation if g.is_gpu}
    assert set(rows["linux-64"]["cells"]) == set(rows[ARM]["cells"]) == envs
    assert all(c["why"] != f"a {ARM} build; the {env} environment is linux-64" for env, c in rows["linux-64"]["cells"].items())
    for env, cell in rows[ARM]["cells"].items():
        assert (cell["state"], cell["why"]) == ("no", f"a {ARM} build; the {env} environment is linux-64"), env
    assert "cells" not in rows["noarch"]
    html = page.render(data)  # the page's table takes the row as any other
    assert f'data-env="h100" data-state="no"><b>no</b><small>a {ARM} build; the h100 environment is linux-64' in html
