"""Issue 43 item 2: mmcv patch 0014 cuts what mmcv.ops.nms does around its kernel (mmengine's per-call
getfullargspec, autograd's apply, three gather/cat kernels, the score threshold's extra syncs;
batched_nms's host-to-device copy of a 1) and must return exactly what the released code returns.

It entered the recipe after its GPU run (lab/results/h100/perf-run2: the CPU-built package with it
passed its whole test section on an H100, and the proof's stage `patchab` timed and compared it
there). Here: that run tested this very diff, it applies in the recipe's order without fuzz, names
its own A/B, the committed CPU A/B is of the file the GPU run built, the random cases of
mmstack_lab.ops.nms_cases cover what they claim, and, with the e2e build's real mmcv on the CPU
(which carries it now), released and patched return the same for 400 cases while a wrapper that
returns something else is caught.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.gpu_entry import check_tested, diff_sha256

from mmstack_lab.ops import nms_cases, patch_ab
from mmstack_lab.standin.offline import patched_sdist

ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "recipes" / "mmcv" / "patches" / "0014-nms-wrapper-fewer-passes.patch"
CPU_AB = ROOT / "lab" / "results" / "cpu-dev" / "patchab_mmcv-0014-nms-wrapper-fewer-passes.json"
RUN = ROOT / "lab" / "results" / "h100" / "perf-run2"
PACKAGE = "mmcv-2.2.0-cuda130_sm90_py312_h360a1f8_500.conda"


def _gpu_ab() -> dict:
    doc = check_tested(RUN, PATCH, package_file=PACKAGE)
    assert doc is not None, "0014 has a patch_ab: line, so its GPU run must have an A/B"
    return doc


def test_0014_entered_after_the_gpu_run_of_this_very_diff():
    """perf-run2 seeded the CPU-built sm_90 mmcv with 0014, its whole test section passed on the H100,
    and patch_ab on the installed package kept the same boxes in every case, upstream's test_nms
    counting alike, with nms of 100 and 1,000 boxes faster than the released wrapper."""
    doc = _gpu_ab()
    assert doc["device"] == "cuda"
    same = doc["same"]["nms"]
    assert same["cases"] == 1000 and same["identical"] and same["n_differing"] == 0
    assert doc["upstream"]["patched"]["counts"]["passed"] > 0
    times = {r["shape"]: r for r in doc["times"] if r["op"] == "nms"}
    for shape in ("100 boxes, iou 0.5", "1000 boxes, iou 0.5"):
        row = times[shape]
        assert row["patched_median_us"] < row["released_median_us"], shape


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_0014_applies_on_top_of_the_recipes_patches_without_fuzz(tmp_path):
    work = patched_sdist("mmcv", tmp_path)  # the recipe's patches in order (0012, then 0014), --fuzz=0
    text = (work / "mmcv" / "ops" / "nms.py").read_text()
    nms_def = text[text.index("@_iou_thr_renamed\ndef nms("):text.index("def soft_nms(")]
    # 0014's dets (one index_select of cat((boxes, scores))): where 0019's _nms_with_dets does not take the
    # compiled nms_dets, which nms calls with its own boxes
    with_dets = text[text.index("def _nms_with_dets("):text.index("# nms's keyword parameters")]
    assert "dim=1).index_select(0, inds)" in with_dets and "boxes[inds]" not in nms_def
    assert "_nms_with_dets(boxes, scores, boxes, iou_threshold, offset," in nms_def
    # 0014's direct NMSop.forward call (torch.jit.trace keeps apply): in _nms_inds since 0017
    inds_def = text[text.index("def _nms_inds("):text.index("def _nms_with_dets(")]
    assert "inds = _nms_inds(boxes, scores, iou_threshold, offset, score_threshold," in with_dets
    assert "NMSop.forward(None, boxes" in inds_def and "torch.jit.is_tracing()" in inds_def
    assert "valid_inds.index_select(0, inds)" in text and "bboxes[valid_mask]" not in text
    # the other ops keep mmengine's decorator; 0012's batched_nms change is still there
    assert "@deprecated_api_warning({'iou_thr': 'iou_threshold'})\ndef soft_nms(" in text
    assert "split_thr = 20000 if boxes_for_nms.is_cuda and nms_op is nms else 10000" in text
    batched = text[text.index("def batched_nms("):text.index("def nms_match(")]
    assert "max_coordinate + max_coordinate.new_ones(()))" in batched  # no host-to-device copy of a 1
    assert batched.count("max_coordinate + torch.tensor(1).to(boxes))") == 1  # the rotated boxes' branch keeps it
    assert "boxes = boxes[keep]" in batched  # an nms_op callable may return any index Python's indexing takes
    compile(text, "nms.py", "exec")


def test_0014_names_its_own_ab_which_the_patchab_stage_runs():
    assert patch_ab.header_args(PATCH) == ["--ops", "nms,batched_nms", "--same", "nms", "--tests",
                                           "tests/test_ops/test_nms.py"]
    # the stage's rule (mmstack_lab.proof.stages._patchab): a proposed patch with a `patch_ab:` line
    assert any(line.startswith("patch_ab:") for line in PATCH.read_text().splitlines())


def test_the_committed_cpu_ab_is_of_the_file_the_gpu_run_built_and_found_it_returns_the_same():
    doc = json.loads(CPU_AB.read_text())
    # the CPU A/B measured the file perf-run2 built (proposed.txt), whose diff is this patch's diff
    # (check_tested); only the header changed since, when 0014 entered the recipe
    built = dict(line.split()[::-1] for line in (RUN / "proposed.txt").read_text().splitlines())
    assert doc["patch_sha256"] == built["mmcv/0014-nms-wrapper-fewer-passes.patch"], "0014 changed since its CPU A/B"
    assert _gpu_ab()["patch_sha256"] == doc["patch_sha256"]
    assert json.loads((RUN / "proposed_diffs.json").read_text())["diff_sha256"][
        "mmcv/0014-nms-wrapper-fewer-passes.patch"] == diff_sha256(PATCH.read_text())
    assert doc["device"] == "cpu" and doc["installed_carries_patch"] is False
    same = doc["same"]["nms"]
    assert same["cases"] == 1000 and same["identical"] and same["n_differing"] == 0
    assert same["summary"]["released"] == same["summary"]["patched"]
    up = doc["upstream"]
    assert up["released"]["counts"] == up["patched"]["counts"]
    assert up["patched"]["counts"]["failed"] == 0 and up["patched"]["counts"]["passed"] > 0
    assert {(r["op"], r["shape"]) for r in doc["times"]} >= {("nms", "100 boxes, iou 0.5"), ("nms", "1000 boxes, iou 0.5")}


def test_the_random_cases_cover_ties_empty_input_and_the_edges():
    cases = [nms_cases.draw(i, 0) for i in range(1000)]
    again = nms_cases.draw(7, 0)
    assert {k: v for k, v in again.items() if k not in ("boxes", "scores", "idxs")} == \
        {k: v for k, v in cases[7].items() if k not in ("boxes", "scores", "idxs")}
    assert again["boxes"].equal(cases[7]["boxes"]) and again["scores"].equal(cases[7]["scores"])
    seen = {key: {c[key] for c in cases} for key in ("n", "iou", "offset", "form", "dtype", "keyword", "layout", "grad")}
    assert {0, 1, 63, 64, 65, 1000} <= seen["n"]
    assert {0.0, 0.5, 1.0} <= seen["iou"] and seen["offset"] == {0, 1}
    assert seen["form"] == {"tensor", "numpy"} and seen["grad"] == {False, True}
    assert seen["keyword"] == {"positional", "iou_threshold", "iou_thr", "both"}
    assert {"identical", "zero_area", "clustered"} <= seen["layout"]
    ties = [c for c in cases if c["n"] > 1 and c["scores"].unique().numel() < c["n"]]
    assert len(ties) > 200
    assert sum(c["score_threshold"] > 0 for c in cases) > 200 and any(c["score_threshold"] > 1 for c in cases)
    assert sum(c["max_num"] >= 0 for c in cases) > 200


def test_nms_cases_refuses_no_cases_with_exit_2():
    done = subprocess.run([sys.executable, "-m", "mmstack_lab.ops.nms_cases", "--cases", "0"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--cases 0" in done.stderr


def test_patch_ab_refuses_a_same_op_without_a_case_module_with_exit_2():
    done = subprocess.run([sys.executable, "-m", "mmstack_lab.ops.patch_ab", "--patch", str(PATCH), "--same", "roi_align"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--same roi_align" in done.stderr and "known: nms" in done.stderr


def test_0014_returns_what_the_released_wrapper_returns_on_the_cpu(real_mmcv_python, tmp_path):
    """The e2e build's real mmcv (CPU kernels, 0014 in it): 400 random cases (the committed A/B ran
    1,000), released against patched, every output byte for byte; and a wrapper that reverses the
    kept rows of dets is caught."""
    over = patch_ab.overlay(PATCH, tmp_path / "overlay", real_mmcv_python)
    assert over.side == "released"  # the recipe's package carries 0014: the overlay reverses it
    doc = patch_ab.same(real_mmcv_python, over, "cpu", ["nms"], 400)["nms"]
    assert doc["identical"] and doc["n_differing"] == 0, doc["differing_cases"]
    summary = doc["summary"]["patched"]
    assert summary == doc["summary"]["released"]
    assert summary["kept"] > 4000 and summary["empty_inputs"] > 0 and summary["ties"] > 80
    assert summary["errors"] > 0 and summary["warned"] > 0 and summary["batched_nms"] > 80

    # a patched side that returns something else: the released overlay with 0014 applied again, broken
    broken = tmp_path / "broken"
    shutil.copytree(over.path, broken, symlinks=True)
    subprocess.run(["patch", "-p1", "-s", "--forward", "-d", str(broken), "-i", str(PATCH)], check=True)
    nms_py = broken / "mmcv" / "ops" / "nms.py"
    text = nms_py.read_text()
    assert text.count("dim=1).index_select(0, inds)") == 1
    nms_py.write_text(text.replace("dim=1).index_select(0, inds)", "dim=1).index_select(0, inds.flip(0))"))
    caught = patch_ab.same(real_mmcv_python, patch_ab.Overlay(broken, "patched"), "cpu", ["nms"], 100)["nms"]
    assert not caught["identical"] and caught["n_differing"] > 10


def test_a_side_that_cannot_run_the_cases_is_recorded_not_raised(tmp_path):
    """On the GPU the case digests run after the timings: a side that fails must not lose them."""
    (tmp_path / "mmcv").mkdir()
    (tmp_path / "mmcv" / "__init__.py").write_text("raise ImportError('this mmcv cannot be imported')\n")
    doc = patch_ab.same(sys.executable, patch_ab.Overlay(tmp_path, "released"), "cpu", ["nms"], 3)["nms"]
    assert doc["identical"] is False and doc["error"].startswith("released side exited 1")
    assert "this mmcv cannot be imported" in doc["error"]
