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

from support.gpu_entry import built_files, diff_sha256

ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "recipes" / "mmcv" / "patches" / "0016-cuda-helper-fewer-aten-includes.patch"
PAIR = ROOT / "lab" / "results" / "cpu-dev" / "proof-cpu-pair16"
RUN = ROOT / "lab" / "results" / "h100" / "perf-run10"
KEY = "mmcv/0016-cuda-helper-fewer-aten-includes.patch"


def _shas(listing: Path) -> dict[str, str]:
    return {name: sha for sha, name in (line.split() for line in listing.read_text().splitlines())}


def test_the_pair_built_this_very_diff_and_both_recipes_list_it():
    assert KEY in built_files(PAIR / "B")
    assert json.loads((PAIR / "B" / "proposed_diffs.json").read_text())["diff_sha256"][KEY] == diff_sha256(PATCH.read_text())
    for recipe in ("recipe.yaml", "meta.yaml"):
        text = (ROOT / "recipes" / "mmcv" / recipe).read_text()
        assert "patches/0015-precompile-cpp-helper.patch\n      - patches/0016-cuda-helper-fewer-aten-includes.patch" in text
    assert not (ROOT / "recipes" / "mmcv" / "proposed" / PATCH.name).exists()


def test_the_gpu_run_tested_the_package_b_built():
    (mmcv,) = [p for p in _shas(PAIR / "B" / "packages.sha256") if p.startswith("mmcv-")]
    seeded = {s["file"]: s for s in json.loads((RUN / "seeded.json").read_text())}
    assert seeded[mmcv]["sha256"] == _shas(PAIR / "B" / "packages.sha256")[mmcv]
    assert seeded[mmcv]["from"] == "proposed"
    # A, the recipe without 0016, made a package of the same name with other bytes: the sha256 decides
    assert _shas(PAIR / "A" / "packages.sha256")[mmcv] != seeded[mmcv]["sha256"]
    status = (RUN / "STATUS").read_text()
    assert f"test {mmcv} rc=0" in status and "verify sm90 rc=0" in status
    doc = json.loads((RUN / "test_mmcv_cuda130_sm90.json").read_text())
    assert doc["passed"] is True
    (upstream,) = [t for t in doc["packages"][0]["test_results"] if t["kind"] == "upstream-tests"]
    assert upstream["counts"]["failed"] == 0 and upstream["counts"]["error"] == 0 and upstream["counts"]["passed"] > 200


def test_b_took_less_build_cpu_than_a():
    a, b = (json.loads((PAIR / side / "build_time_sm90.json").read_text()) for side in ("A", "B"))
    assert a["rc"] == 0 and b["rc"] == 0
    assert b["cpu_s"] / a["cpu_s"] < 0.9
