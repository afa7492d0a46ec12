"""Issue 43 item 1: mmdet recipe patch 0008 (since mmdet build 4) makes the RPN's proposals for
the whole batch at once: RPNHead.predict_by_feat ranks each FPN level's scores, takes the top nms_pre
and decodes the boxes of every image together, and runs only the per-image post-processing (small
boxes, NMS, max_per_img) image by image, where the inherited method loops over images and levels.

It waited in recipes/mmdet/proposed/ until its GPU run: lab/results/h100/perf-run8 tested a package
built with it (and 0009) on the CPU machine (the recipe's whole mmdet test section passed on an
H100), and patch_ab compared its proposals on CUDA (60 of 60 bit-equal) and timed it in fresh
processes. Here: that run tested this very diff; it applies in the recipe's order without fuzz; with
the e2e build's real mmdet and mmcv (the installed package carries 0008; patch_ab.py's overlay
reverses it for the released side) the patched head takes the batched path (no per-image call)
except for a subclass with its own _predict_by_feat_single, and its proposals are the per-image
ones: mmstack_lab.detector.rpn_proposal_cases (patch_ab --same rpn_proposals, the comparison the
GPU's patchab stage ran on CUDA) over 60 seeded batches of 1-8 images. On the CPU the boxes and
labels are equal in every case and the scores bit for bit except their last bit in a few cases:
PyTorch's CPU sigmoid rounds the scalar remainder of its vectorized loop differently, and where an
element falls in that loop depends on the tensor's length (per image or per batch); the last test
pins that cause down.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.gpu_entry import check_tested

from mmstack_lab.detector import rpn_proposal_cases
from mmstack_lab.ops import patch_ab
from mmstack_lab.standin.offline import patched_sdist

ROOT = Path(__file__).resolve().parents[1]
PATCH = ROOT / "recipes" / "mmdet" / "patches" / "0008-rpn-proposals-batched.patch"
RUN = ROOT / "lab" / "results" / "h100" / "perf-run8"
TOUCHED = "mmdet/models/dense_heads/rpn_head.py"
CASES = 60


def test_header_says_what_why_status_and_how_to_time_it():
    head = PATCH.read_text().split("\n---\n", 1)[0]
    for key in ("What:", "Why:", "Status: in the recipe since mmdet build 4, after its GPU run", "Upstream:"):
        assert key in head, key
    assert patch_ab.header_args(PATCH) == ["--package", "mmdet", "--ops", "", "--detector", "8", "--detector-processes",
                                           "6", "--same", "rpn_proposals", "--cases", str(CASES)]
    assert patch_ab.SAME["rpn_proposals"] == rpn_proposal_cases.__name__


def test_0008_entered_after_the_gpu_run_of_this_very_diff():
    """perf-run8 seeded the CPU-built mmdet with 0008 and 0009; its whole test section passed on the
    H100; patch_ab, reversing 0008 from that package, found the proposals of 60 cases bit-equal on
    CUDA and mmdet faster with it in every one of six fresh-process pairs at batch 8."""
    doc = check_tested(RUN, PATCH, package_file="mmdet-3.3.0-mmcv22_pyh8259157_3.conda")
    same = doc["same"]["rpn_proposals"]
    assert doc["device"] == "cuda" and same["identical"] and same["cases"] == CASES
    (row,) = doc["detector_processes"]
    assert row["batch_size"] == 8 and len(row["pairs"]) == 6 and row["verdict"] == "patched faster"
    assert all(p["released_losses_finite"] and p["patched_losses_finite"] for p in row["pairs"])
    assert row["ratio_median_ci95"][0] > 1


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_applies_in_the_recipes_order_without_fuzz(tmp_path):
    work = patched_sdist("mmdet", tmp_path)  # the recipe's patches, 0008 among them, with --fuzz=0
    text = (work / TOUCHED).read_text()
    compile(text, TOUCHED, "exec")
    own = text.split("    def predict_by_feat(self,", 1)[1].split("    def _predict_by_feat_single(", 1)[0]
    # the batched path only where the per-image method is RPNHead's own; the inherited loop otherwise
    assert "type(self)._predict_by_feat_single is not\n                RPNHead._predict_by_feat_single" in own
    assert own.count("return super().predict_by_feat(") == 2
    # one sort and one gather a level for the batch; the post-processing per image as before
    assert "scores.sort(\n                    dim=1, descending=True)" in own
    assert "self._bbox_post_process(" in own and "for img_id, img_meta in enumerate(batch_img_metas)" in own


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_patched_proposals_are_the_per_image_ones(real_mmcv_python, tmp_path):
    over = patch_ab.overlay(PATCH, tmp_path / "overlay", real_mmcv_python, package="mmdet")
    assert over.side == "released"  # the installed mmdet is the recipe's, which carries 0008
    result = patch_ab.same(real_mmcv_python, over, "cpu", ["rpn_proposals"], CASES)["rpn_proposals"]
    assert "error" not in result, result.get("error")
    rel, pat = result["summary"]["released"], result["summary"]["patched"]
    # the cases reach what changed: every config, ties, images clipped each to its own shape
    assert rel["settings"] == pat["settings"] == {s: CASES // len(rpn_proposal_cases.SETTINGS)
                                                  for s in rpn_proposal_cases.SETTINGS}
    assert rel["ties"] >= 10 and rel["clipped_per_image"] >= 20 and rel["images"] > 2 * CASES
    assert rel["errors"] == pat["errors"] == 0 and rel["amp"] == 0  # float16 under autocast: CUDA cases only
    # released: image by image, which is its own per-image reference in every case
    assert rel["per_image_calls"] == rel["images"] and rel["equals_per_image"] == CASES
    # patched: no per-image call, the same boxes and labels everywhere, scores at most a last bit apart
    assert pat["per_image_calls"] == 0
    assert pat["boxes_equal_per_image"] == CASES and pat["max_score_ulps"] <= 1
    assert pat["equals_per_image"] >= CASES - 5
    # across the two interpreters a case differs exactly where the patched side's differs from its reference
    assert result["n_differing"] == CASES - pat["equals_per_image"]
    # a subclass with its own _predict_by_feat_single keeps the per-image loop
    assert pat["subclass_per_image_calls"] == pat["subclass_images"] == rel["subclass_per_image_calls"] > 0


def test_the_cpu_sigmoid_rounds_by_position():
    """Why a score may move by its last bit on the CPU: the same logits through torch.sigmoid, alone
    and inside a longer tensor at another offset, differ in a few elements by exactly one ulp (the
    vectorized body and the scalar remainder of the CPU kernel)."""
    import torch

    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("this torch runs its CPU kernels without vector instructions here")
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(0)) * 3
    whole = x.sigmoid()
    ulps = []
    for offset in range(64):
        part = x[offset:offset + 1_000].clone().sigmoid()
        diff = (part.view(torch.int32).long() - whole[offset:offset + 1_000].view(torch.int32).long()).abs()
        ulps += diff[diff > 0].tolist()
    assert ulps and set(ulps) == {1}
