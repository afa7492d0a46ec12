"""Issue 24: candidate 0011 (recipes/mmcv/proposed/) runs deform_conv's and modulated deform_conv's
fp16 CUDA backward in fp32 and rounds once, as recipe patch 0010 does for roi_align (mmcv 2.2.0's
col2im adds every sample's gradient with a 16-bit atomicAdd; on the H200 deform_conv2d's fp16
forward+backward was 0.61x torchvision's speed, recipe-run6).

The changed branch runs on a CUDA GPU only, so the patch waits outside the recipe until the
recipe's GPU build with it (PROPOSED=1 scripts/gpu-proof.sh) has passed upstream's deform_conv
tests and L4 and patch_ab.py has measured it. Here: it applies after the recipe's patches without
fuzz, names its A/B, and, in an overlay over the e2e build's real mmcv, leaves every CPU gradient
of both ops bit for bit as released.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.offline import patched_sdist

ROOT = Path(__file__).resolve().parents[1]
PATCH = ROOT / "recipes" / "mmcv" / "proposed" / "0011-deform-conv-half-backward-in-float.patch"
sys.path.insert(0, str(ROOT / "benchmarks"))
import patch_ab  # noqa: E402

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
def test_0011_applies_after_the_recipes_patches_and_waits_outside_the_recipe(tmp_path):
    work = patched_sdist("mmcv", tmp_path, (PATCH,))
    for name in ("deform_conv.py", "modulated_deform_conv.py"):
        text = (work / "mmcv" / "ops" / name).read_text()
        assert "half = " in text and "torch.half" in text
        compile(text, name, "exec")
    for recipe in ("recipe.yaml", "meta.yaml"):
        assert PATCH.name not in (ROOT / "recipes" / "mmcv" / recipe).read_text()
    args = patch_ab.header_args(PATCH)
    assert args[:2] == ["--ops", "deform_conv2d,modulated_deform_conv2d"] and "tests/test_ops/test_deform_conv.py" in args


@pytest.mark.slow
def test_0011_leaves_cpu_gradients_of_both_ops_bit_for_bit(real_mmcv_python, tmp_path):
    """The overlay over the e2e prefix's real mmcv (CPU ops): the patched Python imports and the
    gradients of every input of both ops equal the released ones exactly."""
    over = patch_ab.overlay(PATCH, tmp_path / "overlay", real_mmcv_python)
    assert over.side == "patched"
    sides = {}
    for side in ("released", "patched"):
        done = subprocess.run([real_mmcv_python, "-c", GRADS], capture_output=True, text=True, timeout=300,
                              env=patch_ab._env(side, over))
        assert done.returncode == 0, done.stderr[-1500:]
        sides[side] = json.loads(done.stdout.strip().splitlines()[-1])
    assert sides["released"] == sides["patched"]
    assert all(any(v != 0 for v in g) for grads in sides["patched"].values() for g in grads)
