"""Issue 24 item 4: a compiler cache for the generated CI's rebuilds, through the real engine.

scripts/ccache-wrapper.sh writes a `ccache` that carries its settings (rattler-build keeps PATH
but drops CCACHE_*); the generated build workflow restores this variant's cache and puts the
wrapper first on PATH; mmstack_lab.build_cost.ccache_recipe measured a build and a rebuild of the recipe
through rattler-build with it (lab/results/cpu-dev/ccache_recipe.json). Here: the wrapper
execs what it is given with its settings (a real program, `env`, stands where ccache goes: CI has
no ccache), refuses bad input with exit 2, the workflow wires it where the build needs it, and
the committed measurement says the rebuild hit for every unit and packaged the same `_ext` but
for its GNU build-id.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = ROOT / "scripts" / "ccache-wrapper.sh"
RESULT = ROOT / "lab" / "results" / "cpu-dev" / "ccache_recipe.json"


def test_wrapper_execs_its_ccache_with_the_settings_a_cleared_environment_loses(tmp_path):
    out = subprocess.run(["bash", str(WRAPPER), str(tmp_path / "cache"), str(tmp_path), str(tmp_path / "bin"),
                          "/usr/bin/env"], capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(tmp_path / "bin") and (tmp_path / "cache").is_dir()
    env = subprocess.run([str(tmp_path / "bin" / "ccache")], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"}).stdout.splitlines()
    assert f"CCACHE_DIR={tmp_path / 'cache'}" in env and f"CCACHE_BASEDIR={tmp_path}" in env
    assert {"CCACHE_NOHASHDIR=1", "CCACHE_COMPILERCHECK=content",
            "CCACHE_IGNOREOPTIONS=-fdebug-prefix-map=* -ffile-prefix-map=*"} <= set(env)


@pytest.mark.parametrize("args", [[], ["c", "b", "w", "/nonexistent/ccache"], ["c'q", "b", "w", "/usr/bin/env"]],
                         ids=["no-arguments", "no-ccache", "quote-in-path"])
def test_wrapper_refuses_bad_input_with_one_line_and_exit_2(tmp_path, args):
    done = subprocess.run(["bash", str(WRAPPER), *args], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "ccache-wrapper.sh" in done.stderr
    assert not (tmp_path / "w").exists()


def test_generated_build_job_restores_the_variants_cache_and_puts_the_wrapper_on_path():
    job = yaml.safe_load((ROOT / ".github" / "workflows" / "build.yml").read_text())["jobs"]["build"]
    steps = job["steps"]
    names = [s.get("name") or s.get("uses") for s in steps]
    build = next(i for i, n in enumerate(names) if str(n).startswith("Build "))
    cache = next(i for i, s in enumerate(steps) if "mmstack-ccache" in str(s.get("with", {}).get("path", "")))
    wrap = next(i for i, s in enumerate(steps) if "ccache-wrapper.sh" in s.get("run", ""))
    assert cache < wrap < build
    with_ = steps[cache]["with"]
    assert with_["key"].startswith("ccache-${{ matrix.cache_key }}-") and with_["restore-keys"] == "ccache-${{ matrix.cache_key }}-"
    run = steps[wrap]["run"]
    assert '"$GITHUB_WORKSPACE"' in run and '>> "$GITHUB_PATH"' in run  # base dir above output/bld
    # only where the package itself is not restored from the cache, like the build
    assert steps[cache]["if"] == steps[wrap]["if"] == steps[build]["if"] == "steps.cache.outputs.cache-hit != 'true'"


def test_ccache_recipe_refuses_a_channel_that_is_not_one(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mmstack_lab.build_cost.ccache_recipe", "--channel", str(tmp_path),
                           "--ccache", "/usr/bin/env"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--channel" in done.stderr


def test_committed_measurement_rebuilt_every_unit_from_the_cache_with_the_same_ext():
    doc = json.loads(RESULT.read_text())
    assert "STAND-IN" in doc["stand_in"]
    cold, warm = doc["builds"]
    assert (cold["build"], warm["build"]) == ("cold", "warm")
    assert cold["ccache"]["cache_miss"] >= 70 and cold["ccache"].get("direct_cache_hit", 0) == 0
    assert warm["ccache"].get("cache_miss", 0) == 0 and doc["warm_all_hits"]
    assert warm["ccache"]["direct_cache_hit"] + warm["ccache"].get("preprocessed_cache_hit", 0) == cold["ccache"]["cache_miss"]
    # the packaged _ext is the cold one's in every byte but the 20 of its GNU build-id
    assert doc["warm_same_ext_but_build_id"]
    assert cold["ext"]["sha256_without_build_id"] == warm["ext"]["sha256_without_build_id"]
    assert doc["warm_same_ext"] == (cold["ext"]["sha256"] == warm["ext"]["sha256"])
    assert all(len(b["ext"]["build_id"]) == 40 for b in (cold, warm))
    assert doc["warm_over_cold_wall"] == round(warm["wall_s"] / cold["wall_s"], 3)
    assert "/tmp/" not in json.dumps(doc) and "/root/" not in json.dumps(doc)
