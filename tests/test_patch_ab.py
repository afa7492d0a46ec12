"""Issue 24: a Python-level candidate patch (recipes/mmcv/proposed/) and benchmarks/patch_ab.py,
which measures it against the installed mmcv it would change.

The candidate 0009 changes only the CUDA fp16 path of roi_align's backward, which runs on a GPU
alone (patch_ab.py on the lent H200, stage `patchab` of scripts/gpu-proof.sh). Here: it applies
after the recipe's patches, it leaves every CPU result bit for bit as released (the real mmcv
built by the e2e test, its A/B through patch_ab.py), it is not in the recipe before it has run
on a GPU, and patch_ab.py refuses a missing patch with exit 2.
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
PROPOSED = ROOT / "recipes" / "mmcv" / "proposed"
CANDIDATE = PROPOSED / "0010-roi-align-half-backward-in-float.patch"
SCRIPT = ROOT / "benchmarks" / "patch_ab.py"

sys.path.insert(0, str(ROOT / "benchmarks"))
import patch_ab  # noqa: E402


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_candidate_applies_after_the_recipes_patches_without_fuzz(tmp_path):
    work = patched_sdist("mmcv", tmp_path, (CANDIDATE,))
    text = (work / "mmcv" / "ops" / "roi_align.py").read_text()
    backward = text[text.index("def backward"):text.index("roi_align = RoIAlignFunction.apply")]
    assert "grad_output.is_cuda and grad_output.dtype == torch.half" in backward
    assert "grad_input = grad_input.half()" in backward
    compile(text, "roi_align.py", "exec")


def test_candidates_wait_outside_the_recipe_until_they_ran_on_a_gpu():
    """recipes/mmcv/patches/README.md: a patch that changes the CUDA path enters after a GPU run."""
    for recipe in ("recipe.yaml", "meta.yaml"):
        text = (ROOT / "recipes" / "mmcv" / recipe).read_text()
        for p in PROPOSED.glob("*.patch"):
            assert p.name not in text
    assert CANDIDATE.name in (ROOT / "recipes" / "mmcv" / "patches" / "README.md").read_text()


def test_candidate_names_its_own_ab_in_its_header():
    args = patch_ab.header_args(CANDIDATE)
    assert args[:2] == ["--ops", "roi_align"] and "tests/test_ops/test_roi_align.py" in args and "--detector" in args


def test_patch_ab_refuses_a_missing_patch_with_exit_2(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--patch", str(tmp_path / "nope.patch")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "nope.patch" in done.stderr and "--patch" in done.stderr


@pytest.mark.slow
def test_patch_ab_on_the_real_cpu_mmcv_leaves_cpu_gradients_bit_for_bit(real_mmcv_python):
    """The A/B through the e2e build's mmcv: the overlay really carries the patch, every CPU timing
    row and gradient comes back for both sides, and the gradients are identical (the patch's
    branch is CUDA fp16 only)."""
    done = subprocess.run([real_mmcv_python, str(SCRIPT), "--patch", str(CANDIDATE), "--device", "cpu",
                           "--rounds", "1", "--repeats", "1", "--iters", "1", "--detector", "", "--json"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["patch"] == CANDIDATE.name and doc["device"] == "cpu"
    rows = doc["times"]
    assert {(r["dtype"], r["pass"]) for r in rows} == {("float32", "forward"), ("float32", "forward+backward")}
    assert all(r["released_median_us"] > 0 and r["patched_median_us"] > 0 for r in rows)
    released, patched = doc["grads"]["released"], doc["grads"]["patched"]
    assert len(released) == 2 and released == patched
    assert all(0 < g["grad_max_abs_err"] < 1e-3 for g in released)


def test_overlay_refuses_a_patch_that_does_not_apply(tmp_path, monkeypatch):
    """A candidate that no longer applies to the installed mmcv stops the A/B with its reason."""
    fake = tmp_path / "site" / "mmcv"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "ops").mkdir()
    (fake / "ops" / "roi_align.py").write_text("nothing like mmcv's roi_align\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    with pytest.raises(SystemExit, match="does not apply to the installed mmcv"):
        patch_ab.overlay(CANDIDATE, tmp_path / "overlay", sys.executable)


MMDET_CANDIDATE = ROOT / "recipes" / "mmdet" / "proposed" / "0003-randperm-on-the-gallerys-device.patch"


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_mmdet_candidate_applies_after_the_mmdet_recipes_patches_and_waits_outside_it(tmp_path):
    work = patched_sdist("mmdet", tmp_path, (MMDET_CANDIDATE,))
    text = (work / "mmdet" / "models" / "task_modules" / "samplers" / "random_sampler.py").read_text()
    assert "gallery.numel(), device=gallery.device)[:num]" in text
    for recipe in ("recipe.yaml", "meta.yaml"):
        assert MMDET_CANDIDATE.name not in (ROOT / "recipes" / "mmdet" / recipe).read_text()
    assert patch_ab.header_args(MMDET_CANDIDATE)[:2] == ["--package", "mmdet"]


@pytest.mark.slow
def test_mmdet_candidate_samples_as_many_distinct_members_of_the_gallery(real_mmcv_python, tmp_path):
    """The patched RandomSampler, in an overlay over the e2e prefix's real mmdet, on the CPU."""
    over = patch_ab.overlay(MMDET_CANDIDATE, tmp_path / "overlay", real_mmcv_python, "mmdet")
    code = ("import torch; from mmdet.models.task_modules.samplers import RandomSampler as R; import mmdet, json\n"
            "s = R(num=256, pos_fraction=0.5); g = torch.arange(1000, 5000)\n"
            "torch.manual_seed(0); a = s.random_choice(g, 128)\n"
            "print(json.dumps({'file': mmdet.__file__, 'n': a.numel(), 'unique': a.unique().numel(),"
            " 'inside': bool(((a >= 1000) & (a < 5000)).all())}))")
    done = subprocess.run([real_mmcv_python, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**patch_ab._env("patched", over), "PYTHONPATH": str(over)})
    assert done.returncode == 0, done.stderr[-1500:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert doc["file"].startswith(str(over)) and doc == {**doc, "n": 128, "unique": 128, "inside": True}
