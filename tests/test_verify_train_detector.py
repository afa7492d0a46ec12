"""L5's detector step (src/mmstack/verify/train_detector.py): its rules, and the real step on the CPU.

The end-to-end tests train mmdet's Faster R-CNN R50-FPN and its DCNv2 variant for a few
iterations on 128 px synthetic images, on the real mmcv build (mmcv._ext) and an mmdet carrying
recipes/mmdet/patches/0001. They skip, saying what is missing, where either is absent.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmstack.verify import train_detector as td

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def stack_python(real_mmcv_python) -> str:
    """An interpreter with mmcv's ops and a patched mmdet: the dev environment, or the prefix the
    e2e test installs from the recipe-built channel (mmcv + mmdet packages)."""
    probe = subprocess.run([real_mmcv_python, "-c", "import mmcv.ops, mmdet"], capture_output=True, text=True,
                           timeout=600)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"L5 needs mmcv with ops and a patched mmdet in {real_mmcv_python}: {last}")
    return real_mmcv_python


def _run(python: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """This tree's train_detector (PYTHONPATH=src) under `python`, as the ladder's child runs it."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([python, *args], capture_output=True, text=True, timeout=timeout, env=env)


# ---- rules (no mmdet needed) ---------------------------------------------------------------


def test_module_imports_with_the_stdlib_alone():
    # The ladder imports it in bare environments; heavy imports happen inside the functions.
    code = (
        "import sys, mmstack.verify.train_detector as m; "
        "heavy = {'torch', 'mmcv', 'mmengine', 'mmdet', 'pydantic', 'rich'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("losses", "passed", "why"),
    [
        ([3.0, 2.5, 2.0], True, "fell 3.0000 -> 2.0000"),
        ([3.0, 2.0, 3.1], False, "did not fall"),
        ([3.0, 3.0], False, "did not fall"),
        ([3.0, math.nan, 1.0], False, "not finite at iteration 1"),
        ([3.0, math.inf], False, "not finite at iteration 1"),
        ([3.0], False, "at least 2 iterations"),
    ],
)
def test_judge_losses(losses, passed, why):
    ok, reason = td.judge_losses(losses)
    assert ok is passed
    assert why in reason


def test_pretrained_checkpoints_are_stripped_everywhere():
    cfg = {
        "backbone": {"init_cfg": {"type": "Pretrained", "checkpoint": "torchvision://resnet50"}},
        "neck": {"init_cfg": [{"type": "Xavier"}, {"type": "Pretrained", "checkpoint": "x"}]},
        "head": {"init_cfg": {"type": "Normal", "std": 0.01}, "pretrained": "open-mmlab://x"},
    }
    td._strip_pretrained(cfg)
    assert cfg["backbone"]["init_cfg"] is None
    assert cfg["neck"]["init_cfg"] is None
    assert cfg["head"] == {"init_cfg": {"type": "Normal", "std": 0.01}, "pretrained": None}


def test_num_classes_is_set_in_every_head():
    cfg = {"roi_head": {"bbox_head": {"num_classes": 80}}, "rpn_head": {"x": [{"num_classes": 80}]}}
    td._set_num_classes(cfg, 3)
    assert cfg["roi_head"]["bbox_head"]["num_classes"] == 3
    assert cfg["rpn_head"]["x"][0]["num_classes"] == 3


def test_synthetic_batch_is_fixed_and_boxes_lie_inside_the_image():
    pytest.importorskip("torch")
    a = td.synthetic_batch(image_size=96, batch_size=2, num_classes=3, seed=0)
    b = td.synthetic_batch(image_size=96, batch_size=2, num_classes=3, seed=0)
    for x, y in zip(a, b, strict=True):
        assert x["image"].equal(y["image"]) and x["boxes"].equal(y["boxes"])
        assert x["image"].shape == (3, 96, 96) and str(x["image"].dtype) == "torch.uint8"
        boxes = x["boxes"]
        assert boxes.shape == (td.BOXES_PER_IMAGE, 4)
        assert (boxes[:, :2] >= 0).all() and (boxes[:, 2:] <= 96).all()
        assert (boxes[:, 2:] > boxes[:, :2]).all()
        assert ((x["labels"] >= 0) & (x["labels"] < 3)).all()


def test_bad_iteration_counts_are_bad_input():
    with pytest.raises(ValueError, match="at least 2"):
        td.run_detector_step(model="faster-rcnn", device="cpu", iters=1, amp=False)
    with pytest.raises(ValueError, match="warmup"):
        td.run_detector_step(model="faster-rcnn", device="cpu", iters=3, amp=False, warmup=3)


# ---- the real step (mmcv._ext + patched mmdet) ----------------------------------------------


def test_mmdet_admits_this_projects_mmcv(stack_python):
    proc = _run(stack_python, "-c", "import mmcv, mmdet; print(mmcv.__version__, mmdet.mmcv_maximum_version)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    mmcv_version, cap = proc.stdout.split()
    assert mmcv_version.startswith("2.2."), mmcv_version
    assert cap == "2.3.0", "mmdet lacks recipes/mmdet/patches/0001"


def test_configs_resolve_by_short_name_config_name_and_path(stack_python):
    code = (
        "from mmstack.verify import train_detector as td\n"
        "plain = td.resolve_config('faster-rcnn')\n"
        "assert plain.name == 'faster-rcnn_r50_fpn_1x_coco.py' and plain.is_file(), plain\n"
        "assert td.resolve_config('faster-rcnn_r50_fpn_1x_coco') == plain\n"
        "assert td.resolve_config(str(plain)) == plain\n"
        "try:\n"
        "    td.resolve_config('no-such-model')\n"
        "except ValueError as exc:\n"
        "    assert \"unknown detector 'no-such-model'\" in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('no error for an unknown model')\n"
    )
    proc = _run(stack_python, "-c", code)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
def test_l5_step_trains_deformable_faster_rcnn_on_cpu(stack_python):
    """The ladder's hook: DCNv2 backbone, loss finite and falling, a rate."""
    proc = _run(stack_python, "-m", "mmstack.verify.train_detector", "--model", "faster-rcnn-mdconv", "--device", "cpu",
                "--iters", "3", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (result,) = json.loads(proc.stdout)["results"]
    assert result["passed"], result["reason"]
    assert result["deformable_ops"] == ["ModulatedDeformConv2dPack"]
    assert result["amp"] is False and "needs CUDA" in result["amp_note"]
    assert len(result["losses"]) == 3 and all(math.isfinite(x) for x in result["losses"])
    assert result["losses"][-1] < result["losses"][0]
    named = {"loss_rpn_cls", "loss_rpn_bbox", "loss_cls", "loss_bbox"}
    assert named <= set(result["loss_parts"][0])
    assert result["iters_per_s"] > 0
    assert result["image_size"] == td.CPU_IMAGE_SIZE


@pytest.mark.slow
def test_l5_cli_json_for_the_plain_detector(stack_python):
    """`python -m mmstack.verify.train_detector --json`: one JSON object on stdout, exit 0.

    64 px, one image and 2 iterations keep it short; the test above runs the CPU default.
    """
    proc = _run(stack_python, "-m", "mmstack.verify.train_detector", "--model", "faster-rcnn", "--device", "cpu",
                "--iters", "2", "--image-size", "64", "--batch-size", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["passed"] and report["error"] is None
    (result,) = report["results"]
    assert result["model"] == "faster-rcnn" and result["deformable_ops"] == []
    assert (result["image_size"], result["batch_size"]) == (64, 1)
    assert result["passed"], result["reason"]


def test_cli_unknown_model_exits_2_with_json(stack_python):
    proc = _run(stack_python, "-m", "mmstack.verify.train_detector", "--model", "nope", "--device", "cpu", "--json")
    assert proc.returncode == 2, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["passed"] is False and report["results"] == []
    assert "unknown detector 'nope'" in report["error"]
