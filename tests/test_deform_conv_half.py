"""Issue 24: recipe patch 0011 runs deform_conv's and modulated deform_conv's fp16 CUDA backward in
fp32 and rounds once, as recipe patch 0010 does for roi_align (mmcv 2.2.0's col2im adds every
sample's gradient with a 16-bit atomicAdd; on the H200 deform_conv2d's fp16 forward+backward was
0.61x torchvision's speed, recipe-run6).

The changed branch runs on a CUDA GPU only, so the patch waited in recipes/mmcv/proposed/ until the
recipe's GPU build with it (PROPOSED=1 scripts/gpu-proof.sh, recipe-run7) had passed upstream's
tests, L4 and L5 and patch_ab.py had measured it on the H200. Here: it applies in the recipe's
order without fuzz, the diff in the recipe is the one that ran there, the run's results hold what
let it in, and, in an overlay over the e2e build's real mmcv, reversing it leaves every CPU
gradient of both ops bit for bit.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.gpu_entry import built_files, check_entered

from mmstack_lab.ops import patch_ab
from mmstack_lab.standin.offline import patched_sdist

ROOT = Path(__file__).resolve().parents[1]
PATCH = ROOT / "recipes" / "mmcv" / "patches" / "0011-deform-conv-half-backward-in-float.patch"
RUN7 = ROOT / "lab" / "results" / "h200" / "recipe-run7"

GRADS = r"""
import json, torch
from mmcv.ops import deform_conv2d, modulated_deform_conv2d
torch.manual_seed(0)
x = torch.randn(2, 8, 12, 12, dtype=torch.float64, requires_grad=True)
off = (torch.randn(2, 18, 12, 12, dtype=torch.float64) * 2).requires_grad_(True)
mask = torch.rand(2, 9, 12, 12, dtype=torch.float64).requires_grad_(True)
w = torch.randn(4, 8, 3, 3, dtype=torch.float64, requires_grad=True)
b = torch.randn(4, dtype=torch.float64, requires_grad=True)
out = {}
for name, run, leaves in (("deform", lambda: deform_conv2d(x.float(), off.float(), w.float(), 1, 1), (x, off, w)),
                          ("modulated", lambda: modulated_deform_conv2d(x.float(), off.float(), mask.float(), w.float(),
                                                                         b.float(), 1, 1), (x, off, mask, w, b))):
    for t in leaves:
        t.grad = None
    run().square().sum().backward()
    out[name] = [t.grad.flatten().tolist() for t in leaves]
print(json.dumps(out))
"""


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_0011_applies_in_the_recipes_order_without_fuzz(tmp_path):
    work = patched_sdist("mmcv", tmp_path)  # the recipe's patches, 0011 last
    for name in ("deform_conv.py", "modulated_deform_conv.py"):
        text = (work / "mmcv" / "ops" / name).read_text()
        assert "half = " in text and "torch.half" in text
        compile(text, name, "exec")
    for recipe in ("recipe.yaml", "meta.yaml"):
        assert f"patches/{PATCH.name}" in (ROOT / "recipes" / "mmcv" / recipe).read_text()
    args = patch_ab.header_args(PATCH)
    assert args[:2] == ["--ops", "deform_conv2d,modulated_deform_conv2d"] and "tests/test_ops/test_deform_conv.py" in args


def test_0011_entered_after_the_gpu_run_of_this_very_diff():
    """recipe-run7 built the recipe with 0011 (PROPOSED=1; proposed.txt: the file's sha256 then,
    proposed_diffs.json: its diff's), the sandbox tests and the installed ladder passed, and
    patch_ab.py's A/B of both ops passed upstream's tests alike on both sides with fp16 faster and
    its gradient error smaller, fp32 untouched."""
    doc = check_entered(RUN7, PATCH, upstream_file="tests/test_ops/test_modulated_deform_conv.py")
    key = "mmcv/" + PATCH.name
    # the build ran the file of 2b10e95 (proposed.txt), the A/B the same diff with a longer patch_ab line
    evidence = json.loads((RUN7 / "proposed_diffs.json").read_text())
    assert built_files(RUN7)[key] != doc["patch_sha256"] == evidence["patch_ab_file_sha256"][key]
    rows = {(r["op"], r["dtype"], r["pass"]): r for r in doc["times"]}
    for op in ("deform_conv2d", "modulated_deform_conv2d"):
        assert rows[(op, "float16", "forward+backward")]["patched_over_released"] < 0.7
        assert 0.9 < rows[(op, "float32", "forward+backward")]["patched_over_released"] < 1.1
    grads = doc["grads"]
    for rel, pat in zip(grads["released"], grads["patched"], strict=True):
        assert (rel["op"], rel["dtype"], rel["grad_of"]) == (pat["op"], pat["dtype"], pat["grad_of"])
        if rel["dtype"] == "float32":
            # fp32 runs the released code; CUDA's float atomicAdd order varies from run to run
            assert abs(rel["grad_max_abs_err"] - pat["grad_max_abs_err"]) <= 0.05 * rel["grad_max_abs_err"]
        elif rel["grad_of"] in ("input", "offset", "mask"):
            assert pat["grad_mean_abs_err"] < rel["grad_mean_abs_err"] / 5


@pytest.mark.slow
def test_0011_leaves_cpu_gradients_of_both_ops_bit_for_bit(real_mmcv_python, tmp_path):
    """The overlay over the e2e prefix's real mmcv (CPU ops; the recipe's package carries 0011, so the
    overlay reverses it): both sides import and the gradients of every input of both ops are equal."""
    over = patch_ab.overlay(PATCH, tmp_path / "overlay", real_mmcv_python)
    assert over.side == "released"
    sides = patch_ab.each_side(real_mmcv_python, over, GRADS, timeout=300)
    assert sides["released"] == sides["patched"]
    assert all(any(v != 0 for v in g) for grads in sides["patched"].values() for g in grads)
