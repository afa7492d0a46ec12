"""Issue 43 item 2: mmcv patch 0017 makes batched_nms's dets once (one index_select of
cat((boxes, scores)) after nms's kept indices) where the released code let nms make the dets of the
offset boxes and then indexed and concatenated again: two kernels where four ran, at batched_nms's
fixed cost per call, where mmcv trailed torchvision at 100 boxes.

It entered the recipe after its GPU runs (lab/results/h100/perf-run11 and 12). Here: the header says
what, why and how to time it; it applies after the recipe's patches before it without fuzz and leaves
every other path as released; and with the e2e build's real mmcv (CPU kernels, 0017 in it) released
(the overlay reverses it) and patched return the same for 400 random cases of
mmstack_lab.ops.nms_cases, while a fast path that makes dets of the offset boxes is caught (so the
cases do reach it). The committed CPU A/B ran the 1,000 cases and upstream's test_nms.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support.gpu_entry import built_files, diff_sha256

from mmstack_lab.ops import patch_ab
from mmstack_lab.standin.offline import patched_sdist

ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "recipes" / "mmcv" / "patches" / "0017-batched-nms-dets-once.patch"
CPU_AB = ROOT / "lab" / "results" / "cpu-dev" / "patchab_mmcv-0017-batched-nms-dets-once.json"
FAST = "        dets = torch.cat((boxes, scores.reshape(-1, 1)),\n                         dim=1).index_select(0, keep)"


def test_header_says_what_why_status_and_how_to_time_it():
    head = PATCH.read_text().split("\n--- a/", 1)[0]
    for key in ("What:", "Why:", "How:", "Status: in the recipe after its GPU runs", "Upstream:"):
        assert key in head, key
    assert patch_ab.header_args(PATCH) == ["--ops", "nms,batched_nms", "--same", "nms", "--tests",
                                           "tests/test_ops/test_nms.py"]


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_0017_applies_after_the_recipes_patches_and_keeps_every_other_path(tmp_path):
    work = patched_sdist("mmcv", tmp_path)  # the recipe's patches in order, --fuzz=0, 0017 among them
    for recipe in ("recipe.yaml", "meta.yaml"):
        assert f"patches/{PATCH.name}" in (ROOT / "recipes" / "mmcv" / recipe).read_text(), recipe
    text = (work / "mmcv" / "ops" / "nms.py").read_text()
    compile(text, "nms.py", "exec")
    batched = text[text.index("def batched_nms("):text.index("def nms_match(")]
    fast = batched[batched.index("mmstack recipe patch 0017"):]
    # since 0019 the kept indices and the dets of the boxes without their offsets come from _nms_with_dets
    # (det_boxes = boxes), which makes them as 0017 did (FAST, with det_boxes) where it does not take
    # the compiled nms_dets
    call = "return _nms_with_dets(boxes_for_nms, scores, boxes, **nms_cfg_)"
    assert call in fast
    with_dets = text[text.index("def _nms_with_dets("):text.index("# nms's keyword parameters")]
    assert "    dets = torch.cat((det_boxes, scores.reshape(-1, 1)),\n                     dim=1).index_select(0, inds)" \
        in with_dets
    # the fast path's conditions: mmcv's own nms, one pass, 4-column tensors, nms's keywords by name
    cond = batched[batched.index("    if (boxes_for_nms.shape[0] < split_thr and nms_op is nms"):batched.index(call)]
    for needed in ("isinstance(boxes, Tensor)", "boxes.size(-1) == 4", "'iou_threshold' in nms_cfg_",
                   "all(key in _NMS_KEYWORDS for key in nms_cfg_)"):
        assert needed in cond, needed
    # released paths stay: other nms ops, the deprecated key, the per-class loop
    assert "dets, keep = nms_op(boxes_for_nms, scores, **nms_cfg_)" in batched
    assert "for id in torch.unique(idxs):" in batched
    # nms itself calls the same _nms_inds (its checks and kernel call in one place)
    nms_def = text[text.index("@_iou_thr_renamed\ndef nms("):text.index("def soft_nms(")]
    assert "_nms_with_dets(boxes, scores, boxes, iou_threshold, offset," in nms_def
    assert "inds = _nms_inds(boxes, scores, iou_threshold, offset, score_threshold," in with_dets
    assert text.count("NMSop.forward(None, boxes") == 1


def test_the_committed_cpu_ab_is_of_this_file_and_found_the_same():
    doc = json.loads(CPU_AB.read_text())
    # the file the CPU A/B ran is the one the GPU A/B (perf-run11) ran and proof-cpu-pair18 built; only its
    # header's Status changed since, so its diff is the one the pair recorded
    pair = ROOT / "lab" / "results" / "cpu-dev" / "proof-cpu-pair18" / "B"
    gpu = json.loads((ROOT / "lab" / "results" / "h100" / "perf-run11" / f"patchab_mmcv-{PATCH.stem}.json").read_text())
    assert doc["patch_sha256"] == gpu["patch_sha256"] == built_files(pair)[f"mmcv/{PATCH.name}"]
    assert json.loads((pair / "proposed_diffs.json").read_text())["diff_sha256"][f"mmcv/{PATCH.name}"] == \
        diff_sha256(PATCH.read_text()), "0017's diff changed since its A/Bs"
    assert doc["device"] == "cpu" and doc["installed_carries_patch"] is False
    same = doc["same"]["nms"]
    assert same["cases"] == 1000 and same["identical"] and same["n_differing"] == 0
    assert same["summary"]["released"] == same["summary"]["patched"] and same["summary"]["patched"]["batched_nms"] > 250
    up = doc["upstream"]
    assert up["released"]["counts"] == up["patched"]["counts"]
    assert up["patched"]["counts"]["failed"] == 0 and up["patched"]["counts"]["passed"] > 0


def test_0017_returns_what_the_released_batched_nms_returns_on_the_cpu(real_mmcv_python, tmp_path):
    over = patch_ab.overlay(PATCH, tmp_path / "overlay", real_mmcv_python)
    assert over.side == "released"  # the recipe's package carries 0017: the overlay reverses it
    doc = patch_ab.same(real_mmcv_python, over, "cpu", ["nms"], 400)["nms"]
    assert doc["identical"] and doc["n_differing"] == 0, doc["differing_cases"]
    assert doc["summary"]["patched"] == doc["summary"]["released"]
    assert doc["summary"]["patched"]["batched_nms"] > 100

    # a fast path that makes dets of the offset boxes returns something else: the cases reach it
    # (the released overlay with 0017 applied again, broken, against the released overlay)
    broken = tmp_path / "broken"
    shutil.copytree(over.path, broken, symlinks=True)
    subprocess.run(["patch", "-p1", "-s", "--forward", "-d", str(broken), "-i", str(PATCH)], check=True)
    nms_py = broken / "mmcv" / "ops" / "nms.py"
    text = nms_py.read_text()
    assert text.count(FAST) == 1
    nms_py.write_text(text.replace(FAST, FAST.replace("(boxes, scores", "(boxes_for_nms, scores")))
    caught = patch_ab.same(real_mmcv_python, patch_ab.Overlay(broken, "patched", over.path), "cpu", ["nms"], 100)["nms"]
    assert not caught["identical"] and caught["n_differing"] > 3
