"""The set-up every detector tool shares (bench_detector, detector_stages, detector_ops,
profile_detector): its common arguments, the fixed synthetic batch, each side's model, optimizer
and data built the same way, and the setting its report opens with.

The two sides train on the same batch (mmstack.verify.train_detector makes it):
- mmdet: the config's detector with random weights, mmengine's optimizer wrapper (AMP on CUDA);
- torchvision: Faster R-CNN ("stock" or "matched": bench_detector's docstring), SGD with momentum
  0.9 and weight decay 1e-4 over the trainable tensors, float16 autocast + GradScaler on CUDA.
A tool times or counts what it likes around them; the set-up is here once so that every tool's
numbers are of the same models.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# mmstack as installed in the environment under test, or the checkout's on PYTHONPATH
# (PYTHONPATH=src:lab/src python -m mmstack_lab.detector.bench_detector ...)
from mmstack.verify import train_detector as td


def parser(description: str, *, warmup: int, iters: int, iters_help: str | None = None) -> argparse.ArgumentParser:
    """A tool's parser with the shared arguments alone (its own defaults for --warmup and --iters)."""
    ap = argparse.ArgumentParser(description=description)
    add_arguments(ap, warmup=warmup, iters=iters, iters_help=iters_help)
    add_training_arguments(ap)
    ap.add_argument("--json", action="store_true")
    return ap


def parse_args(ap: argparse.ArgumentParser, argv: list[str] | None, tool: str) -> argparse.Namespace:
    """The parsed arguments; --iters below 1 or --warmup below 0: one line, exit 2."""
    args = ap.parse_args(argv)
    if args.iters < 1 or args.warmup < 0:
        print(f"{tool}: --iters must be >= 1 and --warmup >= 0", file=sys.stderr)
        raise SystemExit(2)
    return args


def add_arguments(parser: argparse.ArgumentParser, *, warmup: int, iters: int, iters_help: str | None = None,
                  model_help: str | None = None) -> None:
    """The arguments every detector tool takes (its own defaults for --warmup and --iters); --json last."""
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--model", default="faster-rcnn", help=model_help)
    parser.add_argument("--image-size", type=int, default=None, help="default: 800 GPU, 128 CPU")
    parser.add_argument("--batch-size", type=int, default=td.BATCH_SIZE)
    parser.add_argument("--num-classes", type=int, default=td.NUM_CLASSES)
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--iters", type=int, default=iters, help=iters_help)


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """--lr, --seed, --no-amp (after a tool's own arguments, before --json)."""
    parser.add_argument("--lr", type=float, default=td.LR)
    parser.add_argument("--seed", type=int, default=td.SEED)
    parser.add_argument("--no-amp", dest="amp", action="store_false")


def require_stack() -> dict[str, str]:
    """The versions of torch, mmcv (its compiled ops loaded), mmengine and mmdet; or
    td.DetectorStepUnavailable naming the one that does not import. The lab's own check: the one
    inside mmstack.verify.train_detector is private there (the lab uses mmstack's public names)."""
    import importlib

    versions = {}
    for name in ("torch", "mmcv", "mmcv.ops", "mmengine", "mmdet"):
        try:
            module = importlib.import_module(name)
        except (ImportError, AssertionError) as exc:  # mmdet 3.3.0 as published asserts mmcv < 2.2.0
            raise td.DetectorStepUnavailable(f"{name} does not import: {exc}") from exc
        if "." not in name:
            versions[name] = module.__version__
    return versions


def sync(device: str) -> None:
    """Wait for the device's queued work (CUDA); nothing on the CPU."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def cuda(args: argparse.Namespace) -> bool:
    return bool(args.device.startswith("cuda"))


def amp(args: argparse.Namespace) -> bool:
    """AMP (float16 autocast, a dynamic loss scale) where asked for and on CUDA only."""
    return bool(args.amp) and cuda(args)


def require_device(args: argparse.Namespace, tool: str) -> None:
    """--device cuda on a machine whose torch sees no GPU: one line, exit 2."""
    import torch

    if cuda(args) and not torch.cuda.is_available():
        print(f"{tool}: --device {args.device}, but torch sees no CUDA GPU", file=sys.stderr)
        raise SystemExit(2)


def default_image_size(args: argparse.Namespace) -> None:
    """--image-size left out: the device's (800 px on a GPU, 128 on the CPU)."""
    if args.image_size is None:
        args.image_size = td.GPU_IMAGE_SIZE if cuda(args) else td.CPU_IMAGE_SIZE


def synthetic_batch(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The fixed synthetic batch (at the device's image size where --image-size was left out)."""
    default_image_size(args)
    return td.synthetic_batch(image_size=args.image_size, batch_size=args.batch_size,
                              num_classes=args.num_classes, seed=args.seed)


def setting(args: argparse.Namespace) -> dict[str, Any]:
    """What a report says it ran: device (and its name), model, images, AMP, warm-up."""
    import torch

    return {"device": args.device, "device_name": torch.cuda.get_device_name(args.device) if cuda(args) else "cpu",
            "model": args.model, "image_size": args.image_size, "batch_size": args.batch_size, "amp": amp(args),
            "warmup": args.warmup}


def quiet_stdout(fn: Callable[..., Any], *args: Any, quiet: bool) -> Any:
    """fn(*args), with stdout sent to stderr while it runs when quiet: mmengine logs to stdout, and a
    tool that prints its report as JSON keeps stdout for that."""
    real_stdout = sys.stdout
    if quiet:
        sys.stdout = sys.stderr
    try:
        return fn(*args)
    finally:
        sys.stdout = real_stdout


# -- the two sides -------------------------------------------------------------------------------

@dataclass
class MmdetSide:
    model: Any
    optim: Any  # mmengine's OptimWrapper (AmpOptimWrapper under AMP)
    data: dict[str, Any]  # the batch as mmdet's data_preprocessor takes it


def mmdet_side(args: argparse.Namespace, batch: list[dict[str, Any]]) -> MmdetSide:
    """The mmdet detector (seeded, in train mode), its optimizer wrapper and the batch."""
    td.seed_everything(args.seed)
    model = td.build_detector(args.model, num_classes=args.num_classes, device=args.device)
    model.train()
    optim = td.make_optim_wrapper(model, device=args.device, amp=amp(args), lr=args.lr)
    return MmdetSide(model, optim, td.to_mmdet_inputs(batch, device=args.device))


@dataclass
class TorchvisionSide:
    model: Any
    optimizer: Any
    scaler: Any  # torch.amp.GradScaler, enabled under AMP
    device_type: str  # for torch.autocast
    amp: bool
    images: list[Any]  # float images in [0, 1]
    targets: list[dict[str, Any]]  # boxes, and labels + 1 (torchvision's class 0 is background)


def torchvision_training(args: argparse.Namespace, batch: list[dict[str, Any]], model: Any) -> TorchvisionSide:
    """A torchvision detector already on the device, with the optimizer, scaler and batch it trains with."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    device_type = args.device.split(":")[0]
    scaler = torch.amp.GradScaler(device_type, enabled=amp(args))
    images = [s["image"].to(args.device).float() / 255.0 for s in batch]
    targets = [{"boxes": s["boxes"].to(args.device), "labels": s["labels"].to(args.device) + 1} for s in batch]
    return TorchvisionSide(model, optimizer, scaler, device_type, amp(args), images, targets)


def torchvision_side(args: argparse.Namespace, batch: list[dict[str, Any]], variant: str) -> TorchvisionSide:
    """torchvision's Faster R-CNN `variant` ("stock" or "matched"; seeded, on the device, in train mode)."""
    td.seed_everything(args.seed)
    model = torchvision_model(variant, num_classes=args.num_classes, image_size=args.image_size)
    model.to(args.device).train()
    return torchvision_training(args, batch, model)


def torchvision_model(variant: str, *, num_classes: int, image_size: int) -> Any:
    from torchvision.models import resnet50
    from torchvision.models.detection import FasterRCNN, fasterrcnn_resnet50_fpn
    from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor

    size = {"min_size": image_size, "max_size": image_size}
    # torchvision's class 0 is background: num_classes + 1 outputs for the same foreground set.
    if variant == "stock":
        return fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=num_classes + 1, **size)
    backbone = resnet50(weights=None, zero_init_residual=True)  # nn.BatchNorm2d, as mmdet's BN
    backbone = _resnet_fpn_extractor(backbone, trainable_layers=3)
    return norm_eval(FasterRCNN(backbone, num_classes=num_classes + 1, rpn_post_nms_top_n_train=1000, **size))


def norm_eval(model: Any) -> Any:
    """mmdet's ResNet `norm_eval=True`: every BatchNorm stays in eval mode (running statistics
    fixed) whenever the model is put in train mode; its affine weights still get gradients where
    requires_grad is set (mmdet's norm_cfg requires_grad=True, frozen stages excepted)."""
    import torch

    train = model.train

    def train_norm_eval(mode: bool = True) -> Any:
        train(mode)
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.eval()
        return model

    model.train = train_norm_eval
    return model
