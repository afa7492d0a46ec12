"""mmstack_lab.detector.harness: the set-up bench_detector, detector_stages, detector_ops and
profile_detector share (their arguments, the synthetic batch, each side's optimizer and data, the
setting their reports open with). Runs here with torch on the CPU; the models themselves need
mmdet or torchvision (the tools' own slow tests run them with the e2e build's mmcv and mmdet)."""

from __future__ import annotations

import argparse
import importlib

import pytest

torch = pytest.importorskip("torch")
from mmstack_lab.detector import harness  # noqa: E402 - after the torch check
from mmstack_lab.detector.harness import td  # noqa: E402

TOOLS = ("bench_detector", "detector_stages", "detector_ops", "profile_detector")
SHARED = ("--device", "--model", "--image-size", "--batch-size", "--num-classes", "--warmup", "--iters", "--lr",
          "--seed", "--no-amp", "--json")


def _args(*argv: str, warmup: int = 5, iters: int = 10) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    harness.add_arguments(parser, warmup=warmup, iters=iters)
    harness.add_training_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("tool", TOOLS)
def test_every_detector_tool_takes_the_shared_arguments(tool, capsys):
    module = importlib.import_module(f"mmstack_lab.detector.{tool}")
    with pytest.raises(SystemExit) as done:
        module.main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert all(flag in text for flag in SHARED), text
    assert "default: 800 GPU, 128 CPU" in text


def test_defaults_are_train_detectors():
    args = _args(warmup=2, iters=3)
    assert (args.device, args.model, args.image_size, args.batch_size, args.num_classes) == (
        "cuda", "faster-rcnn", None, td.BATCH_SIZE, td.NUM_CLASSES)
    assert (args.warmup, args.iters, args.lr, args.seed, args.amp) == (2, 3, td.LR, td.SEED, True)
    assert _args("--no-amp").amp is False


@pytest.mark.parametrize(("argv", "size"), [(("--device", "cpu"), td.CPU_IMAGE_SIZE),
                                            (("--device", "cuda:1"), td.GPU_IMAGE_SIZE),
                                            (("--device", "cuda", "--image-size", "96"), 96)])
def test_image_size_left_out_is_the_devices(argv, size):
    args = _args(*argv)
    harness.default_image_size(args)
    assert args.image_size == size


def test_the_synthetic_batch_is_train_detectors_fixed_one():
    args = _args("--device", "cpu", "--image-size", "64", "--batch-size", "2")
    batch = harness.synthetic_batch(args)
    again = td.synthetic_batch(image_size=64, batch_size=2, num_classes=td.NUM_CLASSES, seed=td.SEED)
    assert len(batch) == 2
    for a, b in zip(batch, again, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in ("image", "boxes", "labels"))


def test_the_setting_a_report_opens_with():
    args = _args("--device", "cpu", "--image-size", "64")
    assert harness.setting(args) == {"device": "cpu", "device_name": "cpu", "model": "faster-rcnn", "image_size": 64,
                                     "batch_size": td.BATCH_SIZE, "amp": False, "warmup": 5}
    assert harness.amp(_args("--device", "cpu")) is False  # AMP is CUDA's only, asked for or not


def test_torchvision_training_trains_the_trainable_tensors_on_the_batch():
    args = _args("--device", "cpu", "--image-size", "32", "--batch-size", "2", "--lr", "0.05")
    batch = harness.synthetic_batch(args)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    model[0].requires_grad_(False)  # a frozen stage
    side = harness.torchvision_training(args, batch, model)
    (group,) = side.optimizer.param_groups
    assert [id(p) for p in group["params"]] == [id(p) for p in model[1].parameters()]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.05, 0.9, 1e-4)
    assert (side.device_type, side.amp, side.scaler.is_enabled()) == ("cpu", False, False)
    for image, target, sample in zip(side.images, side.targets, batch, strict=True):
        assert image.dtype == torch.float32 and 0 <= float(image.min()) and float(image.max()) <= 1
        assert torch.equal(image * 255, sample["image"].float())
        assert torch.equal(target["boxes"], sample["boxes"])
        assert torch.equal(target["labels"], sample["labels"] + 1)  # torchvision's 0 is background


def test_norm_eval_keeps_batchnorm_in_eval_mode_while_training():
    model = harness.norm_eval(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)))
    assert model.train() is model
    assert model.training and model[0].training and not model[1].training
    assert model[1].weight.requires_grad  # its affine weights still train


def test_no_gpu_for_cuda_is_one_line_and_exit_2(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine's torch sees a GPU")
    with pytest.raises(SystemExit) as done:
        harness.require_device(_args("--device", "cuda"), "some_tool")
    assert done.value.code == 2
    assert capsys.readouterr().err == "some_tool: --device cuda, but torch sees no CUDA GPU\n"
    harness.require_device(_args("--device", "cpu"), "some_tool")  # the CPU always is there


def test_quiet_stdout_keeps_stdout_for_the_report(capsys):
    assert harness.quiet_stdout(lambda x: print("mmengine says", x) or x, 3, quiet=True) == 3
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "mmengine says 3\n")
    harness.quiet_stdout(print, "shown", quiet=False)
    assert capsys.readouterr().out == "shown\n"
