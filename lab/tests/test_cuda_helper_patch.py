"""Issue 43 item 3: mmcv patch 0016 (pytorch_cuda_helper.hpp includes the ATen headers its launchers use,
not <ATen/ATen.h>) entered the recipe after the CPU-built, GPU-tested flow: the whole sm_90 build with it
(lab/results/cpu-dev/proof-cpu-pair16/B, beside A without it, at the same time) and that very package's
whole test section on an H100 (lab/results/h100/perf-run10, which seeded it by sha256).

Here the chain of evidence is checked from the committed results: the build ran this very diff, both
recipes list it, the GPU run seeded the package that build made (same sha256) and its test section and
the installed ladder passed there, and B took less CPU than A.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.gpu_entry import built_files, check_pair_tested, diff_sha256

ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "recipes" / "mmcv" / "patches" / "0016-cuda-helper-fewer-aten-includes.patch"
PAIR = ROOT / "lab" / "results" / "cpu-dev" / "proof-cpu-pair16"
RUN = ROOT / "lab" / "results" / "h100" / "perf-run10"
KEY = "mmcv/0016-cuda-helper-fewer-aten-includes.patch"


def test_the_pair_built_this_very_diff_and_both_recipes_list_it():
    assert KEY in built_files(PAIR / "B")
    assert json.loads((PAIR / "B" / "proposed_diffs.json").read_text())["diff_sha256"][KEY] == diff_sha256(PATCH.read_text())
    for recipe in ("recipe.yaml", "meta.yaml"):
        text = (ROOT / "recipes" / "mmcv" / recipe).read_text()
        assert "patches/0015-precompile-cpp-helper.patch\n      - patches/0016-cuda-helper-fewer-aten-includes.patch" in text
    assert not (ROOT / "recipes" / "mmcv" / "proposed" / PATCH.name).exists()


def test_the_gpu_run_tested_the_package_b_built():
    check_pair_tested(PAIR, RUN)


def test_b_took_less_build_cpu_than_a():
    a, b = (json.loads((PAIR / side / "build_time_sm90.json").read_text()) for side in ("A", "B"))
    assert a["rc"] == 0 and b["rc"] == 0
    assert b["cpu_s"] / a["cpu_s"] < 0.9
