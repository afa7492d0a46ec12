"""Issue 24 item 2: mmstack_lab.detector.detector_stages splits one training iteration at the models' seams.

Run here on the CPU with the e2e build's real mmcv and patched mmdet (torchvision is not in that
prefix, so its side records why it was skipped); the H200 numbers are in
lab/results/h200/recipe-run5/stages_bs*_sm90.json. Checked: every stage and seam comes
back, seams nest inside their stage as the docstring says, the top level adds up to the
iteration, and the JSON says what each seam covers on each side.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mmstack_lab.paths import child_env

ROOT = Path(__file__).resolve().parents[2]
MODULE = "mmstack_lab.detector.detector_stages"


def test_every_seam_is_described_for_both_sides():
    from mmstack_lab.detector import detector_stages

    assert set(detector_stages.SEAMS) == {"rpn.targets", "rpn.loss", "rpn.proposals", "roi.targets", "roi.features",
                                          "roi.head", "roi.loss"}
    assert all(m and t for m, t in detector_stages.SEAMS.values())


@pytest.mark.slow
def test_mmdet_iteration_splits_into_stages_and_seams_on_the_cpu(real_mmcv_python):
    done = subprocess.run([real_mmcv_python, "-m", MODULE, "--device", "cpu", "--batch-size", "1", "--warmup", "1",
                           "--iters", "2", "--json"], capture_output=True, text=True, timeout=900,
                          env=child_env())
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert set(doc["seams"]) >= {"rpn.targets", "roi.features"} and doc["device"] == "cpu"
    mm = doc["frameworks"]["mmdet"]
    assert "skipped" not in mm, mm
    st = {k: v["cpu_ms"] for k, v in mm["stages"].items()}
    for name in ("preprocess", "forward", "backbone+neck", "rpn", "roi", "parse_losses", "update", "iteration",
                 "rpn.targets", "rpn.loss", "rpn.proposals", "roi.targets", "roi.features", "roi.head", "roi.loss"):
        assert st[name] >= 0, name
    eps = 1.0  # ms: clock reads between nested marks
    assert st["rpn.targets"] <= st["rpn.loss"] + eps  # get_targets runs inside loss_by_feat
    assert st["rpn.loss"] + st["rpn.proposals"] <= st["rpn"] + eps
    assert st["roi.targets"] + st["roi.features"] + st["roi.head"] + st["roi.loss"] <= st["roi"] + eps
    assert st["backbone+neck"] + st["rpn"] + st["roi"] <= st["forward"] + eps
    top = sum(st[k] for k in mm["top_level"])
    assert abs(top + st["other"] - st["iteration"]) < 0.01 and st["other"] >= -eps
    tv = doc["frameworks"]["torchvision"]
    assert "stages" in tv or "torchvision" in tv["skipped"]
