"""Issue 43 item 1: proposed mmdet patch 0010 computes AnchorHead's losses of every FPN level at once on
CUDA (one elementwise pass, a sum per level, no host read per level) where loss_by_feat_single ran per
level (about 52 ops a level at batch 8, and the L1 loss's `torch.any(weight > 0)` read back each time).

It waits in recipes/mmdet/proposed/ for its GPU run: on CUDA patch_ab --same rpn_targets decides
whether losses, gradients and random draws are the released ones bit for bit. Here: the header says
what, why and how to time it; it applies after the recipe's patches without fuzz and takes the
batched path on CUDA only; on the CPU the released per-level code runs (rpn_target_cases: released
and patched the same, case for case); and with the batched path forced on the CPU
(mmstack_lab.detector.rpn_loss_forced) the losses and the box gradients are the per-level ones bit
for bit, the score gradients within an ulp (sigmoid's scalar tail on the CPU, why the path is CUDA's).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mmstack_lab.ops import patch_ab
from mmstack_lab.ops.patch_ab import diff_sha256
from mmstack_lab.standin.offline import patched_sdist

ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "recipes" / "mmdet" / "proposed" / "0010-rpn-losses-batched.patch"
FORCED = ROOT / "lab" / "results" / "cpu-dev" / "rpn_loss_forced_p0010.json"


def _same_diff(doc: dict, diffs: Path) -> bool:
    """The result ran this file's diff: by its own patch_diff_sha256 where it has one, else by the diff sha256
    recorded beside it (`diffs`) for the whole file it names; the header may change after a run."""
    now = diff_sha256(PATCH.read_text())
    if "patch_diff_sha256" in doc:
        return doc["patch_diff_sha256"] == now
    if doc["patch_sha256"] == hashlib.sha256(PATCH.read_bytes()).hexdigest():
        return True
    side = json.loads(diffs.read_text())
    return f"({doc['patch_sha256'][:8]}...)" in side["made_by"] and side["diff_sha256"][f"mmdet/{PATCH.name}"] == now


def test_header_says_what_why_status_and_how_to_time_it():
    head = PATCH.read_text().split("\n---\n", 1)[0]
    for key in ("What:", "Why:", "Status: proposed", "Upstream:", "after recipes/mmdet/patches 0001-0009"):
        assert key in head, key
    assert patch_ab.header_args(PATCH) == ["--package", "mmdet", "--ops", "", "--detector", "8", "--detector-processes",
                                           "20", "--same", "rpn_targets", "--cases", "60"]


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_0010_applies_after_the_recipes_patches_and_batches_on_cuda_only(tmp_path):
    work = patched_sdist("mmdet", tmp_path)  # the recipe's patches 0001-0009 in order, --fuzz=0
    subprocess.run(["patch", "-p1", "-s", "--fuzz=0", "-d", str(work), "-i", str(PATCH)], check=True)
    text = (work / "mmdet" / "models" / "dense_heads" / "anchor_head.py").read_text()
    compile(text, "anchor_head.py", "exec")
    cond = text[text.index("    def _losses_batched("):text.index("    def _loss_by_feat_batched(")]
    for needed in ("cls_scores[0].is_cuda", "type(self).loss_by_feat_single is", "not self.reg_decoded_bbox",
                   "type(loss_cls) is CrossEntropyLoss", "loss_cls.class_weight is None", "type(loss_bbox) is L1Loss"):
        assert needed in cond, needed
    body = text[text.index("    def loss_by_feat(\n"):]
    assert "if self._losses_batched(cls_scores):  # mmstack patch 0010" in body
    assert "multi_apply(\n            self.loss_by_feat_single," in body  # the per-level code stays for the rest


def test_the_committed_forced_run_is_of_this_file_and_close_where_it_cannot_be_exact():
    doc = json.loads(FORCED.read_text())
    assert _same_diff(doc, FORCED.with_name("rpn_loss_forced_p0010.diffs.json")), "0010 changed since its CPU check"
    s = doc["summary"]
    assert s["batched"] >= 30 and s["not_batched"] > 0
    assert s["losses_same"] == s["reg_grads_same"] == s["batched"]
    assert s["cls_grads_same"] <= s["batched"] and s["cls_grad_max_rel"] < 2.5e-7


def test_rpn_loss_forced_refuses_no_cases_with_exit_2():
    done = subprocess.run([sys.executable, "-m", "mmstack_lab.detector.rpn_loss_forced", "--cases", "0"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--cases 0" in done.stderr


def test_on_the_cpu_the_released_code_runs_and_the_forced_batched_path_agrees(real_mmcv_python, tmp_path):
    over = patch_ab.overlay(PATCH, tmp_path / "overlay", real_mmcv_python, package="mmdet")
    assert over.side == "patched"  # proposed: the installed build 4 is the released side
    doc = patch_ab.same(real_mmcv_python, over, "cpu", ["rpn_targets"], 12)["rpn_targets"]
    assert doc["identical"] and doc["n_differing"] == 0, doc["differing_cases"]

    forced = patch_ab._child([real_mmcv_python, "-m", "mmstack_lab.detector.rpn_loss_forced", "--cases", "12", "--json"],
                             "patched", over, timeout=900)
    assert forced.returncode == 0, forced.stderr[-2000:]
    s = json.loads(forced.stdout)["summary"]
    assert s["batched"] >= 8 and s["losses_same"] == s["reg_grads_same"] == s["batched"]
    assert s["cls_grad_max_rel"] < 2.5e-7
    # the released mmdet has nothing to force: one line, not a silent pass
    released = patch_ab._child([real_mmcv_python, "-m", "mmstack_lab.detector.rpn_loss_forced", "--cases", "1"],
                               "released", over, timeout=300)
    assert released.returncode != 0 and "no AnchorHead._losses_batched" in released.stderr


def test_the_gpu_run_of_this_file_found_the_same_results_and_no_resolved_gain_so_it_waits():
    """lab/results/h200/perf-run13: this very file against the installed build 4 on CUDA: the same
    targets, losses and gradients in 60 cases, and 20 ABBA process pairs at batch 8 whose interval
    spans 1; a patch whose gain is not shown stays in proposed/."""
    doc = json.loads((ROOT / "lab" / "results" / "h200" / "perf-run13" / f"patchab_mmdet-{PATCH.stem}.json").read_text())
    assert _same_diff(doc, ROOT / "lab" / "results" / "h200" / "perf-run13" / "proposed_diffs.json")
    assert doc["device"] == "cuda" and doc["installed_carries_patch"] is False
    same = doc["same"]["rpn_targets"]
    assert same["cases"] == 60 and same["identical"] and same["n_differing"] == 0
    (row,) = doc["detector_processes"]
    assert row["batch_size"] == 8 and len(row["pairs"]) == 20
    assert all(p["released_losses_finite"] and p["patched_losses_finite"] for p in row["pairs"])
    low, high = row["ratio_median_ci95"]
    assert low < 1.0 < high and row["verdict"].startswith("not resolved")
    assert PATCH.parent.name == "proposed"
