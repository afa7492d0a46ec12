"""Issue 43 items 2 and 3: mmcv 0017 (batched_nms makes its dets once) and 0018 (the .cu units with their
own torch includes include what they use) were built into the recipe's sm_90 package together
(lab/results/cpu-dev/proof-cpu-pair18/B, beside A without them, at the same time), and that very package
passed its whole test section on an H100 (lab/results/h100/perf-run12, which seeded it by sha256); then
both entered the recipe.

Here the chain of evidence is checked from the committed results: the build ran these very diffs (the
headers changed after), both recipes list them after 0016, the GPU run seeded the package B made and its
test section, with the test files of the changed launchers, and the installed ladder passed there, and B
took less CPU than A.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.gpu_entry import built_files, check_pair_tested, diff_sha256

ROOT = Path(__file__).resolve().parents[2]
PAIR = ROOT / "lab" / "results" / "cpu-dev" / "proof-cpu-pair18"
RUN = ROOT / "lab" / "results" / "h100" / "perf-run12"
PATCHES = {"mmcv/0017-batched-nms-dets-once.patch": ["tests/test_ops/test_nms.py"],
           "mmcv/0018-own-torch-cuda-units-fewer-includes.patch": [
               f"tests/test_ops/test_{n}.py" for n in ("spconv", "upfirdn2d", "bias_act", "filtered_lrelu", "psa_mask",
                                                       "scatter_points", "fused_bias_leakyrelu", "ms_deformable_attn")]}


def _patch(key: str) -> Path:
    package, name = key.split("/")
    for folder in ("proposed", "patches"):  # where it waits, or the recipe once it entered
        if (ROOT / "recipes" / package / folder / name).is_file():
            return ROOT / "recipes" / package / folder / name
    raise AssertionError(f"{key} is in neither recipes/{package}/proposed nor patches")


def test_b_built_these_very_diffs():
    diffs = json.loads((PAIR / "B" / "proposed_diffs.json").read_text())["diff_sha256"]
    for key in PATCHES:
        assert key in built_files(PAIR / "B")
        assert diffs[key] == diff_sha256(_patch(key).read_text()), f"{key} changed since the pair was built"
    assert not (PAIR / "A" / "proposed.txt").exists()  # A is the recipe as it was


def test_both_recipes_list_them_after_0016_and_none_waits_in_proposed():
    listed = "".join(f"      - patches/{key.split('/')[1]}\n" for key in PATCHES)
    for recipe in ("recipe.yaml", "meta.yaml"):
        text = (ROOT / "recipes" / "mmcv" / recipe).read_text()
        assert "      - patches/0016-cuda-helper-fewer-aten-includes.patch\n" + listed in text, recipe
    for key in PATCHES:
        assert _patch(key).parent.name == "patches", key


def test_the_gpu_run_tested_the_package_b_built_and_the_changed_launchers_tests_passed():
    upstream = check_pair_tested(PAIR, RUN)
    for files in PATCHES.values():
        for f in files:
            assert upstream["by_file"][f].get("passed", 0) > 0 and not upstream["by_file"][f].get("failed"), f


def test_b_took_less_build_cpu_than_a():
    a, b = (json.loads((PAIR / side / "build_time_sm90.json").read_text()) for side in ("A", "B"))
    assert a["rc"] == 0 and b["rc"] == 0
    assert b["cpu_s"] / a["cpu_s"] < 0.9


def test_the_compiled_nms_alone_outruns_torchvision_at_100_boxes():
    """item 2's accounting: the work torchvision's nms does (kept indices), mmcv's compiled op does faster;
    what mmcv.ops.nms adds is its API's dets and its host checks."""
    rows = {(r["op"], r["shape"]): r for r in json.loads((RUN / "ops_nms_sm90.json").read_text())["ops"]}
    for n in (100, 1000):
        alone, nms = rows[("nms_indices", f"{n} boxes, iou 0.5")], rows[("nms", f"{n} boxes, iou 0.5")]
        assert alone["ratio_tv_over_mmcv"] > 1.0 and alone["mmcv_us"] < nms["mmcv_us"]
