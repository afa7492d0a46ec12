"""Issue 24 item 1: recipe patch 0012 lets batched_nms with plain nms on CUDA run one nms over the
class-offset boxes up to 20,000 boxes, where mmcv 2.2.0 loops over the classes from 10,000 on (on
the H200 batched_nms of 10,000 boxes in 80 classes ran at 0.19x torchvision's speed, one mmcv nms of
the same boxes at 2.9x: recipe-run6/ops_full_sm90.json).

The changed branch runs on a CUDA device only, so the patch waited in recipes/mmcv/proposed/ until the
recipe's GPU build with it (PROPOSED=1 scripts/gpu-proof.sh, recipe-run9) had passed upstream's
tests, L4 and L5 and patch_ab.py had measured it on the H200. Here: it applies in the recipe's order
without fuzz, the diff in the recipe is the one that ran there, the run's results hold what let it
in; and with the e2e build's real mmcv (CPU kernels, the same algorithm as the CUDA ones), the two
paths the patch chooses between keep the same boxes at 12,000 boxes, and reversing the patch leaves
the CPU's choice as it is.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.gpu_entry import built_files, check_entered

from mmstack_lab.ops import patch_ab
from mmstack_lab.standin.offline import patched_sdist

ROOT = Path(__file__).resolve().parents[1]
PATCH = ROOT / "recipes" / "mmcv" / "patches" / "0012-batched-nms-cuda-one-pass-to-20k.patch"
RUN9 = ROOT / "lab" / "results" / "h200" / "recipe-run9"

PATHS = r"""
import json, torch
from mmcv.ops import batched_nms
g = torch.Generator().manual_seed(0)
n = 12000  # >= 10000: the CPU's default is the per-class loop, released and patched
xy = torch.rand(n, 2, generator=g) * 200  # crowded: nms drops about a third within each class
boxes = torch.cat([xy, xy + torch.rand(n, 2, generator=g) * 100 + 20], 1)
scores = torch.rand(n, generator=g)
idxs = torch.randint(0, 80, (n,), generator=g)
cfg = {"type": "nms", "iou_threshold": 0.5}
out = {}
for path, c in (("default", cfg), ("offset", {**cfg, "split_thr": 10 ** 9})):  # offset: one nms over all boxes
    dets, keep = batched_nms(boxes, scores, idxs, c)
    # kept index -> its det row; equal scores (float32 draws do tie) may come out in either order
    out[path] = {"kept": sorted(zip(keep.tolist(), dets.tolist())), "score_sorted": bool((dets[:, -1].diff() <= 0).all())}
print(json.dumps(out))
"""


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_0012_applies_in_the_recipes_order_without_fuzz(tmp_path):
    work = patched_sdist("mmcv", tmp_path)  # the recipe's patches, 0012 last
    text = (work / "mmcv" / "ops" / "nms.py").read_text()
    assert "split_thr = 20000 if boxes_for_nms.is_cuda and nms_op is nms else 10000" in text
    compile(text, "nms.py", "exec")
    for recipe in ("recipe.yaml", "meta.yaml"):
        assert f"patches/{PATCH.name}" in (ROOT / "recipes" / "mmcv" / recipe).read_text()
    args = patch_ab.header_args(PATCH)
    assert args[:2] == ["--ops", "batched_nms,nms"] and "tests/test_ops/test_nms.py" in args


def test_0012_entered_after_the_gpu_run_of_this_very_diff():
    """recipe-run9 built the recipe with 0012 (PROPOSED=1; proposed.txt: the file's sha256 then,
    proposed_diffs.json: its diff's), the sandbox tests and the installed ladder passed, and
    patch_ab.py's A/B (the same file) passed upstream's test_nms alike on both sides with batched_nms
    of 10,000 boxes in 80 classes far faster and the rows the patch does not reach unchanged."""
    doc = check_entered(RUN9, PATCH, upstream_file="tests/test_ops/test_nms.py")
    assert doc["patch_sha256"] == built_files(RUN9)["mmcv/" + PATCH.name]  # the build and the A/B ran the same file
    rows = {(r["op"], r["shape"]): r for r in doc["times"]}
    hit = rows[("batched_nms", "10000 boxes, 80 classes, iou 0.5")]
    assert hit["patched_over_released"] < 0.1 and hit["torchvision_over_patched"] > 2
    # 100,000 boxes: above 20,000 the patched default loops over the classes as released
    assert 0.9 < rows[("batched_nms", "100000 boxes, 80 classes, iou 0.5")]["patched_over_released"] < 1.1


@pytest.mark.slow
def test_the_offset_path_keeps_what_the_per_class_path_keeps(real_mmcv_python, tmp_path):
    over = patch_ab.overlay(PATCH, tmp_path / "overlay", real_mmcv_python)
    assert over.side == "released"  # the recipe's package carries 0012: the overlay reverses it
    sides = patch_ab.each_side(real_mmcv_python, over, PATHS, timeout=300)
    for doc in sides.values():
        assert doc["default"]["kept"] == doc["offset"]["kept"]  # the same boxes, each with the same det
        assert doc["default"]["score_sorted"] and doc["offset"]["score_sorted"]
        assert 4000 < len(doc["default"]["kept"]) < 11000  # nms did suppress, and kept plenty
    assert sides["released"] == sides["patched"]  # on the CPU the patched module chooses as released
