"""Issue 24: Python-level patches of the recipes (mmcv 0010, mmdet 0003) and mmstack_lab.ops.patch_ab,
which measures one against the installed package, released and patched side by side.

mmcv's 0010 changes only the CUDA fp16 path of roi_align's backward, which runs on a GPU alone
(patch_ab.py on the lent H200, stage `patchab` of scripts/gpu-proof.sh). Both entered their
recipes after the H200 run recipe-run6 built them (PROPOSED=1) with the whole test section on the
GPU and patch_ab.py measured them (the installed package carried the patch, so the overlay
reversed it). Here: each applies in the recipe's order without fuzz, the GPU run was of these very
files, the overlay applies or reverses a patch and refuses one that does neither, it leaves every
CPU result bit for bit (the real mmcv built by the e2e test), and patch_ab.py refuses a missing
patch with exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.gpu_entry import built_files, diff_sha256

from mmstack_lab.ops import patch_ab
from mmstack_lab.paths import LAB_SRC, child_env
from mmstack_lab.standin.offline import patched_sdist, unpacked_sdist

ROOT = Path(__file__).resolve().parents[2]
CANDIDATE = ROOT / "recipes" / "mmcv" / "patches" / "0010-roi-align-half-backward-in-float.patch"
MMDET_CANDIDATE = ROOT / "recipes" / "mmdet" / "patches" / "0003-randperm-on-the-gallerys-device.patch"
RUN6 = ROOT / "lab" / "results" / "h200" / "recipe-run6"
MODULE = "mmstack_lab.ops.patch_ab"



@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_0010_applies_in_the_recipes_order_without_fuzz(tmp_path):
    work = patched_sdist("mmcv", tmp_path)
    text = (work / "mmcv" / "ops" / "roi_align.py").read_text()
    backward = text[text.index("def backward"):text.index("roi_align = RoIAlignFunction.apply")]
    assert "grad_output.is_cuda and grad_output.dtype == torch.half" in backward
    assert "grad_input = grad_input.half()" in backward
    compile(text, "roi_align.py", "exec")


def test_the_patches_entered_their_recipes_after_the_gpu_run_of_these_very_diffs():
    """recipes/mmcv/patches/README.md: a patch that changes the CUDA path enters after a GPU run.
    recipe-run6 built them with PROPOSED=1 (proposed.txt: the files' sha256, proposed_diffs.json:
    their diffs') and its test section passed on the H200; patch_ab.py measured 0010 and mmdet's
    0003 there and upstream's roi_align tests passed alike on both sides."""
    built = built_files(RUN6)
    diffs = json.loads((RUN6 / "proposed_diffs.json").read_text())["diff_sha256"]
    assert set(diffs) == set(built)
    for patch in (CANDIDATE, MMDET_CANDIDATE, ROOT / "recipes" / "mmcv" / "patches" / "0009-split-filtered-lrelu-unit.patch"):
        key = f"{patch.parents[1].name}/{patch.name}"
        assert diffs[key] == diff_sha256(patch.read_text()), f"{key} changed since the H200 run"
        for recipe in ("recipe.yaml", "meta.yaml"):
            assert f"patches/{patch.name}" in (ROOT / "recipes" / patch.parents[1].name / recipe).read_text()
    status = (RUN6 / "STATUS").read_text()
    assert "sm90 build rc=0" in status and "verify sm90 rc=0" in status
    for patch, name in ((CANDIDATE, "mmcv-0010"), (MMDET_CANDIDATE, "mmdet-0003")):
        (result,) = RUN6.glob(f"patchab_{name}-*.json")
        doc = json.loads(result.read_text())
        assert doc["patch_sha256"] == built[f"{patch.parents[1].name}/{patch.name}"]  # the file that was built
        assert doc["installed_carries_patch"] is True
    up = json.loads(next(RUN6.glob("patchab_mmcv-0010-*.json")).read_text())["upstream"]
    assert up["released"]["counts"] == up["patched"]["counts"] and up["patched"]["counts"]["failed"] == 0
    assert up["patched"]["counts"]["passed"] > 0
    assert CANDIDATE.name in (ROOT / "recipes" / "mmcv" / "patches" / "README.md").read_text()


def test_candidate_names_its_own_ab_in_its_header():
    args = patch_ab.header_args(CANDIDATE)
    assert args[:2] == ["--ops", "roi_align"] and "tests/test_ops/test_roi_align.py" in args and "--detector" in args


def test_patch_ab_refuses_a_missing_patch_with_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", MODULE, "--patch", str(tmp_path / "nope.patch")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "nope.patch" in done.stderr and "--patch" in done.stderr


@pytest.mark.slow
def test_patch_ab_on_the_real_cpu_mmcv_leaves_cpu_gradients_bit_for_bit(real_mmcv_python):
    """The A/B through the e2e build's mmcv: the overlay really carries the patch, every CPU timing
    row and gradient comes back for both sides, and the gradients are identical (the patch's
    branch is CUDA fp16 only)."""
    done = subprocess.run([real_mmcv_python, "-m", MODULE, "--patch", str(CANDIDATE), "--device", "cpu",
                           "--rounds", "1", "--repeats", "1", "--iters", "1", "--detector", "", "--json"],
                          capture_output=True, text=True, timeout=900, env=child_env())
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



@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_mmdet_0003_applies_in_the_mmdet_recipes_order(tmp_path):
    work = patched_sdist("mmdet", tmp_path)
    text = (work / "mmdet" / "models" / "task_modules" / "samplers" / "random_sampler.py").read_text()
    assert "gallery.numel(), device=gallery.device)[:num]" in text
    assert "torch.randperm(gallery.numel())[:num].to(" not in text
    assert patch_ab.header_args(MMDET_CANDIDATE)[:2] == ["--package", "mmdet"]


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_overlay_reverses_a_patch_the_installed_package_already_carries(tmp_path, monkeypatch):
    """The H200 packages of recipe-run6 carried 0010: the overlay is then the released side."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    carrying, released = patched_sdist("mmcv", tmp_path / "a"), unpacked_sdist("mmcv", tmp_path / "b")
    site = tmp_path / "site"
    (site / "mmcv" / "ops").mkdir(parents=True)
    (site / "mmcv" / "__init__.py").write_text("")
    shutil.copy(carrying / "mmcv" / "ops" / "roi_align.py", site / "mmcv" / "ops" / "roi_align.py")
    monkeypatch.setenv("PYTHONPATH", str(site))
    over = patch_ab.overlay(CANDIDATE, tmp_path / "overlay", sys.executable)
    assert over.side == "released"
    assert (over.path / "mmcv" / "ops" / "roi_align.py").read_text() == \
        (released / "mmcv" / "ops" / "roi_align.py").read_text()
    assert patch_ab._env("released", over)["PYTHONPATH"].split(os.pathsep)[0] == str(over.path)
    # the other side: the installed package, and the lab for the child's `-m mmstack_lab...`
    assert patch_ab._env("patched", over)["PYTHONPATH"] == os.pathsep.join([str(LAB_SRC), str(site)])


@pytest.mark.slow
def test_mmdet_0003_samples_as_many_distinct_members_of_the_gallery(real_mmcv_python):
    """The patched RandomSampler of the e2e prefix's real mmdet (the recipe's build), on the CPU."""
    code = ("import torch, inspect; from mmdet.models.task_modules.samplers import RandomSampler as R; import mmdet, json\n"
            "s = R(num=256, pos_fraction=0.5); g = torch.arange(1000, 5000)\n"
            "torch.manual_seed(0); a = s.random_choice(g, 128)\n"
            "print(json.dumps({'patched': 'device=gallery.device)[:num]' in inspect.getsource(R.random_choice),"
            " 'n': a.numel(), 'unique': a.unique().numel(), 'inside': bool(((a >= 1000) & (a < 5000)).all())}))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([real_mmcv_python, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-1500:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    assert doc == {"patched": True, "n": 128, "unique": 128, "inside": True}


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_detector_processes_pairs_fresh_children_abba(real_mmcv_python):
    """--detector-processes (issue 43: the in-process A/B could not resolve 0008 or 0009 on the H100
    hosts): through the e2e build's mmdet and mmcv, mmdet 0009 (reversed for the released side: the e2e
    mmdet carries it since build 4) at batch 2 on the CPU, two pairs
    of fresh children, the released side first in the first pair and second in the next, each pair's
    ratio patched over released; two pairs are too few for an interval, and the result says so."""
    patch = ROOT / "recipes" / "mmdet" / "patches" / "0009-anchor-targets-batched.patch"
    done = subprocess.run([real_mmcv_python, "-m", MODULE, "--patch", str(patch), "--device", "cpu", "--ops", "",
                           "--same", "", "--detector", "2", "--detector-processes", "2", "--detector-repeats", "1",
                           "--detector-iters", "1", "--detector-warmup", "1", "--json"],
                          capture_output=True, text=True, timeout=900, env=child_env())
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert "detector" not in doc
    (row,) = doc["detector_processes"]
    assert row["batch_size"] == 2 and "error" not in row, row.get("error")
    assert [p["first"] for p in row["pairs"]] == ["released", "patched"]
    for p in row["pairs"]:
        assert p["released"] > 0 and p["patched"] > 0 and p["ratio"] == p["patched"] / p["released"]
        assert p["released_losses_finite"] and p["patched_losses_finite"]
    assert len(row["child_seconds"]) == 4
    assert row["ratio_median_ci95"] is None and row["verdict"] == "no interval (fewer than 6 pairs)"


def test_a_recipe_patch_names_the_later_ones_on_its_files():
    """patch_ab.overlay reverses a recipe patch from a copy without the recipe's later patches that
    touch its files (0009 builds on 0006's anchor_head.py): the list, in the recipe's order."""
    mmdet = ROOT / "recipes" / "mmdet"
    p0006 = mmdet / "patches" / "0006-rpn-targets-and-loss-without-host-reads.patch"
    assert patch_ab.later_overlapping(p0006) == [mmdet / "patches" / "0009-anchor-targets-batched.patch"]
    assert patch_ab.later_overlapping(mmdet / "patches" / "0005-max-iou-assigner-on-the-device.patch") == []
    assert patch_ab.later_overlapping(mmdet / "patches" / "0009-anchor-targets-batched.patch") == []
