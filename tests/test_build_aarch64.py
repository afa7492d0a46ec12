"""`mmstack build --target-platform linux-aarch64`: the config's aarch64 rows, cross-compiled on
linux-64 as conda-forge does. Offline no channel holds linux-aarch64 packages or conda-forge's cross
compilers, so the real build cannot solve here: what a user sees then is one line naming the
environment, the subdir and every package missing. Tested with a real failing solve, rattler-build's
own, against a local channel (tests/data/conda-forge-subset: real conda-forge records, linux-64 and
noarch only)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.cli import mmstack

pytest.importorskip("rattler_build", reason="py-rattler-build is the optional 'build' extra")

from mmstack.builder import recipes
from mmstack.errors import BadInput
from mmstack.facts import gpus
from mmstack.variants import matrix as variants

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / variants.CONFIG_FILE
SUBSET = ROOT / "tests" / "data" / "conda-forge-subset" / "conda-forge"


def _row_variants(python: str, tag: str) -> list[str]:
    """`--variant KEY=VALUE` for every key of one aarch64 row, as the CI's build step passes them."""
    (row,) = [v for v in variants.load_matrix(gpus.load(), CONFIG, "linux-aarch64")
              if v.python == python and v.arch_tag == tag]
    return [arg for k, val in row.variant_keys().items() for arg in ("--variant", f"{k}={val}")]


def without_sources(tmp_path: Path) -> Path:
    """recipes/mmcv with its `source:` section cut: rattler-build fetches sources before it solves,
    and the solve is what is tested (offline, the tag archive cannot be fetched). Everything else,
    the requirements the solve is asked for included, is the recipe's own."""
    dest = tmp_path / "mmcv"
    shutil.copytree(ROOT / "recipes" / "mmcv", dest, ignore=shutil.ignore_patterns("output"))
    kept, cutting = [], False
    for line in (dest / "recipe.yaml").read_text().splitlines(keepends=True):
        if line.startswith("source:"):
            cutting = True
            continue
        if cutting and line[:1] not in (" ", "#", "\n"):
            cutting = False
        if not cutting:
            kept.append(line)
    (dest / "recipe.yaml").write_text("".join(kept))
    text = (dest / "recipe.yaml").read_text()
    assert "\nsource:" not in text and "\nrequirements:" in text
    return dest


def test_a_cross_build_that_cannot_solve_says_what_is_missing_in_one_line(tmp_path):
    recipe = without_sources(tmp_path)
    out = tmp_path / "channel"
    code, stdout, err = mmstack("build", "--all", "--recipe", str(recipe), "--target-platform", "linux-aarch64",
                                *_row_variants("3.11", "cpu"), "--source-channel", str(SUBSET),
                                "--channel", str(out), "--quiet", "--root", str(ROOT))
    assert code == 1, (stdout, err)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    line = errors[0]
    # the build machine's environment (linux-64) of a linux-aarch64 cross build, every package it lacks
    assert "cannot solve the build environment of a linux-aarch64 cross build" in line, line
    missing = line.split("no package for ", 1)[1].split(" in linux-64 or noarch of ", 1)[0].split(", ")
    assert {"gcc_linux-aarch64 14.*", "gxx_linux-aarch64 14.*", "sysroot_linux-aarch64 2.17.*",
            "cross-python_linux-aarch64", "pytorch 2.13.*"} <= set(missing), line
    assert "python 3.11.*" not in missing and "numpy 2.*" not in missing  # the subset has those for linux-64
    assert SUBSET.as_uri() in line and "mmstack-build-" not in line  # the channel given, not the engine's output dir
    assert "--source-channel conda-forge" in line
    assert "test sections skipped: a linux-aarch64 package cannot run on this linux-64 machine" in err
    assert not list(out.glob("*/*.conda"))  # nothing landed


def test_build_takes_only_the_platforms_the_matrix_has_rows_for():
    code, _, err = mmstack("build", "--all", "--recipe", "mmcv", "--target-platform", "osx-arm64")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: --target-platform:") and "linux-64 or linux-aarch64" in err and "Traceback" not in err


def test_aarch64_rows_serve_no_environment_so_env_is_refused_with_the_way_to_pick_rows():
    code, _, err = mmstack("build", "--env", "h100", "--recipe", "mmcv", "--target-platform", "linux-aarch64")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "no linux-aarch64 row serves an environment" in err and "--all, with --variant" in err


def test_run_build_renders_the_rows_of_the_target_platform():
    """The rendered variants run_build hands to py-rattler-build carry the target platform (the
    engine builds for the subdir the variant was rendered for)."""
    rendered = recipes.render(recipe_dir=ROOT / "recipes" / "mmcv", variant_config=CONFIG,
                              target_platform="linux-aarch64", select={"python": "3.12", "arch_tag": "sm90"})
    assert len(rendered) == 1
    doc = rendered[0].recipe.to_dict()
    build_reqs = json.dumps(doc["requirements"]["build"])
    assert "cuda-nvcc_linux-aarch64" in build_reqs and "cross-python_linux-aarch64" in build_reqs
    assert rendered[0].variant["target_platform"] == "linux-aarch64"
    with pytest.raises(BadInput):
        recipes.selection_for_env("gh200", CONFIG, target_platform="linux-aarch64")
