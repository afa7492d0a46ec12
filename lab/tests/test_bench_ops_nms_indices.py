"""bench_ops' nms_indices and nms_dets rows (issue 43 item 2): the compiled op mmcv's nms calls, timed
alone against torchvision's nms, which returns the kept indices only; and mmcv.ops.nms, which also makes
the kept rows' dets, against torchvision's nms followed by the same dets (`tv_nms_dets`). Each row must
time the same work on both sides: with the e2e build's real mmcv on the CPU, the indices the op returns
are nms's, tv_nms_dets makes from kept indices the very dets nms returns, and the rows come out for each
size. (torchvision is not in that prefix: its nms is handed mmcv's op, whose indices are checked equal
to nms's here; the GPU run times torchvision's own.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SAME = """
import importlib, torch
from mmcv import ops
from mmstack_lab.ops.boxes import random_boxes
from types import SimpleNamespace
from mmstack_lab.ops.bench_ops import tv_nms_dets
ext = importlib.import_module("mmcv.ops.nms").ext_module
kept_by = SimpleNamespace(nms=lambda b, s, t: ext.nms(b, s, iou_threshold=t, offset=0))
for n in (1, 7, 100, 1000):
    b, s = random_boxes(n, 2, "cpu")
    dets, inds = ops.nms(b, s, 0.5)
    alone = ext.nms(b, s, iou_threshold=0.5, offset=0)
    assert torch.equal(alone, inds), n
    assert torch.equal(dets, torch.cat((b, s[:, None]), dim=1)[inds]), n
    tv_dets, keep = tv_nms_dets(kept_by, b, s, 0.5)
    assert torch.equal(keep, inds) and torch.equal(tv_dets, dets) and tv_dets.shape == (len(inds), 5), n
print("same")
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "lab" / "src")])}


def test_the_row_times_the_call_nms_makes(real_mmcv_python):
    done = subprocess.run([real_mmcv_python, "-c", SAME], capture_output=True, text=True, env=_env())
    assert done.returncode == 0 and done.stdout.strip() == "same", done.stderr[-2000:]


def test_the_row_comes_out_for_each_size(real_mmcv_python):
    done = subprocess.run([real_mmcv_python, "-m", "mmstack_lab.ops.bench_ops", "--device", "cpu", "--full", "--only",
                           "nms,nms_indices,nms_dets", "--repeats", "1", "--iters", "1", "--json"],
                          capture_output=True, text=True, env=_env())
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout)["ops"]
    assert [(r["op"], r["shape"]) for r in rows] == [
        ("nms", "100 boxes, iou 0.5"), ("nms_indices", "100 boxes, iou 0.5"), ("nms_dets", "100 boxes, iou 0.5"),
        ("nms", "1000 boxes, iou 0.5"), ("nms_indices", "1000 boxes, iou 0.5"), ("nms_dets", "1000 boxes, iou 0.5")]
    assert all(r["mmcv_us"] > 0 for r in rows)
