"""L5 payload: a few training iterations of an MMDetection detector on synthetic data.

The ladder's L5 runs `run_detector_step` in a child process, so this module imports nothing but
the standard library at import time; torch, mmcv, mmengine and mmdet are imported inside the
functions (no pydantic, no rich: it runs in bare GPU environments and build sandboxes).

What the step proves, beyond "mmcv imports": mmdet admits this mmcv (recipes/mmdet/patches/0001),
its shipped configs load, a real detector builds with random weights (nothing is downloaded), and
forward + backward + optimizer step run through mmcv's compiled ops on the target device:
RoIAlign and nms in every Faster R-CNN, DeformConv2d (DCNv1) or ModulatedDeformConv2d (DCNv2) in
the deformable backbones. Pass = every loss finite and the last loss below the first, on a fixed
synthetic batch with a fixed seed.

    python -m mmstack.verify.train_detector --device cpu --image-size 128 --iters 3 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

# Short names the ladder and the CLI use -> config path under mmdet/.mim/configs (shipped in the
# mmdet sdist and wheel; recipes/mmdet checks that the package carries them).
MODELS: dict[str, str] = {
    # RoIAlign + nms (mmcv._ext), ResNet-50 + FPN.
    "faster-rcnn": "faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py",
    # + DeformConv2d (DCNv1, mmcv registers it as "DCN") in ResNet stages c3-c5.
    "faster-rcnn-dconv": "dcn/faster-rcnn_r50-dconv-c3-c5_fpn_1x_coco.py",
    # + ModulatedDeformConv2d (DCNv2, registered as "DCNv2") in ResNet stages c3-c5.
    "faster-rcnn-mdconv": "dcnv2/faster-rcnn_r50-mdconv-c3-c5_fpn_1x_coco.py",
}
# What the ladder's L5 runs when it names no model: the plain detector and the deformable one.
DEFAULT_MODELS = ("faster-rcnn", "faster-rcnn-mdconv")

# Per-device defaults: tiny and quick on a CPU runner, detection-sized on a GPU.
CPU_IMAGE_SIZE, GPU_IMAGE_SIZE = 128, 800
CPU_ITERS, GPU_ITERS = 3, 20

NUM_CLASSES = 3
BATCH_SIZE = 2
BOXES_PER_IMAGE = 3
# SGD on one fixed batch. 0.01 with momentum 0.9 is half mmdet's 1x-schedule lr (0.02 for 16
# images): large enough that the loss falls within 2-3 steps from random weights, small enough
# that it does not diverge in 20 (measured: docs/mmdet.md).
LR = 0.01
SEED = 0


class DetectorStepUnavailable(RuntimeError):
    """mmdet, mmcv's compiled ops or the configs are missing: the step cannot run here.

    The message says what was found and how to fix it; the ladder reports it as the L5 reason.
    """


# --------------------------------------------------------------------------------------------
# Imports and configs


def _require_stack() -> dict[str, str]:
    """Import torch, mmcv (with _ext), mmengine and mmdet; return their versions."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - the ladder checks torch at L1
        raise DetectorStepUnavailable(f"torch does not import: {exc}") from exc
    try:
        import mmcv
        import mmcv.ops  # loads mmcv._ext
        from mmcv import _ext  # noqa: F401
    except ImportError as exc:
        raise DetectorStepUnavailable(
            f"mmcv's compiled ops do not import ({exc}); install an mmcv build with ops "
            "(this project's recipes/mmcv), not the pure-Python mmcv-lite"
        ) from exc
    try:
        import mmengine
    except ImportError as exc:
        raise DetectorStepUnavailable(f"mmengine does not import: {exc}") from exc
    try:
        import mmdet
    except AssertionError as exc:
        # mmdet 3.3.0 as published asserts mmcv < 2.2.0 at import.
        raise DetectorStepUnavailable(
            f"mmdet refuses this mmcv: {exc} Install mmdet from this project's recipes/mmdet "
            "(patches/0001 admits mmcv 2.2.x; docs/mmdet.md says why that is safe)"
        ) from exc
    except ImportError as exc:
        raise DetectorStepUnavailable(
            f"mmdet does not import: {exc}; install mmdet (recipes/mmdet, or the `mmdet` "
            "pixi feature)"
        ) from exc
    return {
        "torch": torch.__version__,
        "mmcv": mmcv.__version__,
        "mmengine": mmengine.__version__,
        "mmdet": mmdet.__version__,
    }


def config_dir() -> Path:
    """mmdet's shipped configs (mmdet/.mim/configs)."""
    import mmdet

    path = Path(mmdet.__file__).parent / ".mim" / "configs"
    if not path.is_dir():
        raise DetectorStepUnavailable(
            f"mmdet's configs are not at {path}: this mmdet was installed without its .mim "
            "files; install it from the PyPI sdist or wheel, as recipes/mmdet does"
        )
    return path


def resolve_config(model: str) -> Path:
    """A short name from MODELS, a config path relative to mmdet's configs, or a file path."""
    if model in MODELS:
        return config_dir() / MODELS[model]
    candidate = Path(model)
    if candidate.suffix == ".py" and candidate.is_file():
        return candidate
    relative = config_dir() / (model if model.endswith(".py") else model + ".py")
    if relative.is_file():
        return relative
    found = sorted(config_dir().glob(f"*/{Path(model).stem}.py"))
    if len(found) == 1:
        return found[0]
    known = ", ".join(MODELS)
    raise ValueError(
        f"unknown detector {model!r}: use one of {known}, a config name under "
        f"{config_dir()} (e.g. faster-rcnn_r50_fpn_1x_coco), or a config file path"
    )


def _strip_pretrained(node: Any) -> None:
    """Drop every pretrained checkpoint from a model config, in place: random weights only."""
    if isinstance(node, dict):
        init_cfg = node.get("init_cfg")
        inits = init_cfg if isinstance(init_cfg, list) else [init_cfg]
        if any(isinstance(i, dict) and i.get("type") == "Pretrained" for i in inits):
            node["init_cfg"] = None
        if node.get("pretrained") is not None:
            node["pretrained"] = None
        for value in node.values():
            _strip_pretrained(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _strip_pretrained(value)


def _set_num_classes(node: Any, num_classes: int) -> None:
    if isinstance(node, dict):
        if "num_classes" in node:
            node["num_classes"] = num_classes
        for value in node.values():
            _set_num_classes(value, num_classes)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _set_num_classes(value, num_classes)


def _quiet_mmengine() -> None:
    """Make a WARNING-level MMLogger the current one: init_weights logs every parameter at INFO."""
    from mmengine.logging import MMLogger

    name = "mmstack-l5"
    if MMLogger.check_instance_created(name):
        MMLogger.get_instance(name)  # makes it the current instance again
    else:
        MMLogger.get_instance(name, log_level="WARNING")


def build_detector(model: str, *, num_classes: int = NUM_CLASSES, device: str = "cpu"):
    """Build mmdet's detector from its shipped config with random weights, on `device`."""
    from mmdet.registry import MODELS as MMDET_MODELS
    from mmdet.utils import register_all_modules
    from mmengine.config import Config

    register_all_modules(init_default_scope=True)
    _quiet_mmengine()
    cfg = Config.fromfile(str(resolve_config(model)))
    model_cfg = cfg.model  # a ConfigDict: mmdet reads train_cfg.rpn etc. as attributes
    _strip_pretrained(model_cfg)
    _set_num_classes(model_cfg, num_classes)
    detector = MMDET_MODELS.build(model_cfg)
    # Random weights from each module's own initialiser (ResNet: Kaiming, zero-init residual
    # norms), none from a checkpoint.
    detector.init_weights()
    return detector.to(device)


def deformable_ops(detector) -> list[str]:
    """Names of mmcv's deformable-conv classes the detector holds (what L5 exercises)."""
    from mmcv.ops import DeformConv2d, ModulatedDeformConv2d

    found = {
        type(module).__name__
        for module in detector.modules()
        if isinstance(module, (DeformConv2d, ModulatedDeformConv2d))
    }
    return sorted(found)


# --------------------------------------------------------------------------------------------
# Synthetic data


def synthetic_batch(
    *,
    image_size: int,
    batch_size: int = BATCH_SIZE,
    num_classes: int = NUM_CLASSES,
    boxes_per_image: int = BOXES_PER_IMAGE,
    seed: int = SEED,
) -> list[dict[str, Any]]:
    """Images with solid, class-coloured rectangles on noise, and their boxes.

    Returns plain tensors (CPU): [{"image": uint8 3xHxW, "boxes": float Nx4 xyxy,
    "labels": int64 N in [0, num_classes)}]; both the mmdet and the torchvision step take them.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    palette = torch.randint(40, 256, (num_classes, 3), generator=gen, dtype=torch.int64)
    samples = []
    for _ in range(batch_size):
        image = torch.randint(0, 40, (3, image_size, image_size), generator=gen, dtype=torch.int64)
        boxes, labels = [], []
        for _ in range(boxes_per_image):
            w, h = (
                int(v) for v in torch.randint(image_size // 6, image_size // 2, (2,), generator=gen)
            )
            x0 = int(torch.randint(0, image_size - w, (1,), generator=gen))
            y0 = int(torch.randint(0, image_size - h, (1,), generator=gen))
            label = int(torch.randint(0, num_classes, (1,), generator=gen))
            image[:, y0 : y0 + h, x0 : x0 + w] = palette[label].view(3, 1, 1)
            boxes.append([x0, y0, x0 + w, y0 + h])
            labels.append(label)
        samples.append(
            {
                "image": image.to(torch.uint8),
                "boxes": torch.tensor(boxes, dtype=torch.float32),
                "labels": torch.tensor(labels, dtype=torch.int64),
            }
        )
    return samples


def to_mmdet_inputs(samples: list[dict[str, Any]], device: str = "cpu") -> dict[str, Any]:
    """The dict mmdet's DetDataPreprocessor takes: {"inputs": [...], "data_samples": [...]}."""
    from mmdet.structures import DetDataSample
    from mmengine.structures import InstanceData

    inputs, data_samples = [], []
    for sample in samples:
        image = sample["image"].to(device)
        h, w = image.shape[-2:]
        data_sample = DetDataSample(
            metainfo={
                "img_shape": (h, w),
                "ori_shape": (h, w),
                "scale_factor": (1.0, 1.0),
                "flip": False,
            }
        )
        data_sample.gt_instances = InstanceData(
            bboxes=sample["boxes"].to(device), labels=sample["labels"].to(device)
        )
        inputs.append(image)
        data_samples.append(data_sample)
    return {"inputs": inputs, "data_samples": data_samples}


# --------------------------------------------------------------------------------------------
# The step


def seed_everything(seed: int) -> None:
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def make_optim_wrapper(detector, *, device: str, amp: bool, lr: float = LR):
    """mmengine's OptimWrapper; AmpOptimWrapper (float16, dynamic loss scale) on CUDA with amp."""
    import torch
    from mmengine.optim import AmpOptimWrapper, OptimWrapper

    params = [p for p in detector.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-4)
    if amp and device.startswith("cuda"):
        return AmpOptimWrapper(optimizer=optimizer, loss_scale="dynamic", dtype="float16")
    return OptimWrapper(optimizer=optimizer)


def time_iterations(step, *, iters: int, warmup: int, device: str) -> tuple[list[Any], float]:
    """Run `step()` iters times; seconds spent in the iterations after the first `warmup`."""
    results = []
    start = 0.0
    for i in range(iters):
        if i == warmup:
            _synchronize(device)
            start = time.perf_counter()
        results.append(step())
    _synchronize(device)
    elapsed = time.perf_counter() - start if iters > warmup else 0.0
    return results, elapsed


def judge_losses(losses: list[float]) -> tuple[bool, str]:
    """Pass when every loss is finite and the last one is below the first."""
    bad = [i for i, loss in enumerate(losses) if not math.isfinite(loss)]
    if bad:
        return False, f"loss not finite at iteration {bad[0]}: {losses[bad[0]]}"
    if len(losses) < 2:
        return False, "need at least 2 iterations to see the loss fall"
    if not losses[-1] < losses[0]:
        return False, f"loss did not fall: {losses[0]:.4f} -> {losses[-1]:.4f}"
    return True, f"loss fell {losses[0]:.4f} -> {losses[-1]:.4f}"


def run_detector_step(
    *,
    model: str,
    device: str,
    iters: int,
    amp: bool,
    image_size: int | None = None,
    batch_size: int = BATCH_SIZE,
    num_classes: int = NUM_CLASSES,
    lr: float = LR,
    seed: int = SEED,
    warmup: int = 1,
) -> dict[str, Any]:
    """The ladder's L5 hook: train `model` for `iters` iterations on one synthetic batch.

    Returns a JSON-ready dict: "passed", "reason", "losses" (total loss per iteration, before
    that iteration's update), "loss_parts" (mmdet's named losses per iteration), "iters_per_s"
    (over the iterations after the first `warmup`; None when there are none), plus what ran
    ("model", "config", "device", "amp", "image_size", "batch_size", "deformable_ops",
    "versions").

    Raises DetectorStepUnavailable when mmdet, mmcv's ops or the configs are missing, and
    ValueError for an unknown model or a bad argument; anything else a real failure raises
    propagates, for the ladder's child to report.
    """
    if iters < 2:
        raise ValueError(f"iters must be at least 2 to judge the loss, got {iters}")
    if not 0 <= warmup < iters:
        raise ValueError(f"warmup must be in [0, iters), got {warmup} with iters={iters}")
    versions = _require_stack()
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise DetectorStepUnavailable(f"device {device!r} asked for, but torch sees no CUDA GPU")
    if image_size is None:
        image_size = GPU_IMAGE_SIZE if device.startswith("cuda") else CPU_IMAGE_SIZE
    amp_used = bool(amp and device.startswith("cuda"))

    seed_everything(seed)
    detector = build_detector(model, num_classes=num_classes, device=device)
    detector.train()
    optim_wrapper = make_optim_wrapper(detector, device=device, amp=amp_used, lr=lr)
    samples = synthetic_batch(
        image_size=image_size, batch_size=batch_size, num_classes=num_classes, seed=seed
    )
    data = to_mmdet_inputs(samples, device=device)

    def step() -> dict[str, float]:
        log_vars = detector.train_step(data, optim_wrapper)
        return {k: float(v.detach() if hasattr(v, "detach") else v) for k, v in log_vars.items()}

    parts, elapsed = time_iterations(step, iters=iters, warmup=warmup, device=device)
    losses = [p["loss"] for p in parts]
    passed, reason = judge_losses(losses)
    timed = iters - warmup
    return {
        "model": model,
        "config": str(resolve_config(model)),
        "device": device,
        "device_name": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "amp": amp_used,
        "amp_note": None if amp_used or not amp else "AMP needs CUDA; ran in float32",
        "image_size": image_size,
        "batch_size": batch_size,
        "num_classes": num_classes,
        "iters": iters,
        "warmup": warmup,
        "lr": lr,
        "seed": seed,
        "deformable_ops": deformable_ops(detector),
        "losses": losses,
        "loss_parts": parts,
        "seconds": elapsed,
        "iters_per_s": timed / elapsed if elapsed > 0 else None,
        "passed": passed,
        "reason": reason,
        "versions": versions,
    }


# --------------------------------------------------------------------------------------------
# CLI: python -m mmstack.verify.train_detector


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m mmstack.verify.train_detector",
        description="L5: a few mmdet training iterations on synthetic data, random weights.",
    )
    parser.add_argument(
        "--model",
        default=",".join(DEFAULT_MODELS),
        help=f"comma-separated: {', '.join(MODELS)}, or mmdet config names/paths "
        f"(default: {','.join(DEFAULT_MODELS)})",
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: cuda if seen)")
    parser.add_argument("--iters", type=int, default=None, help="default: 3 on CPU, 20 on GPU")
    parser.add_argument("--image-size", type=int, default=None, help="default: 128 CPU, 800 GPU")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--lr", type=float, default=LR)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--no-amp", action="store_true", help="float32 on CUDA too")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return parser.parse_args(argv)


def _format(result: dict[str, Any]) -> str:
    rate = result["iters_per_s"]
    losses = " ".join(f"{loss:.4f}" for loss in result["losses"])
    verdict = "PASS" if result["passed"] else "FAIL"
    deform = ",".join(result["deformable_ops"]) or "-"
    return (
        f"{verdict} {result['model']} on {result['device']} amp={result['amp']} "
        f"{result['batch_size']}x{result['image_size']}px deform={deform} "
        f"{rate:.3f} it/s\n  losses: {losses}\n  {result['reason']}"
        if rate is not None
        else f"{verdict} {result['model']}: {result['reason']}"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    real_stdout = sys.stdout
    # mmengine's loggers print to stdout; keep stdout for the one JSON object.
    redirect = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    results: list[dict[str, Any]] = []
    error: str | None = None
    code = 0
    with redirect:
        try:
            import torch

            device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
            on_gpu = device.startswith("cuda")
            for name in [m.strip() for m in args.model.split(",") if m.strip()]:
                results.append(
                    run_detector_step(
                        model=name,
                        device=device,
                        iters=args.iters or (GPU_ITERS if on_gpu else CPU_ITERS),
                        amp=not args.no_amp,
                        image_size=args.image_size,
                        batch_size=args.batch_size,
                        lr=args.lr,
                        seed=args.seed,
                    )
                )
            code = 0 if all(r["passed"] for r in results) else 1
        except (ValueError, DetectorStepUnavailable) as exc:
            error, code = f"{type(exc).__name__}: {exc}", 2 if isinstance(exc, ValueError) else 1
    if args.json:
        payload = {"passed": code == 0, "error": error, "results": results}
        real_stdout.write(json.dumps(payload, indent=2) + "\n")
    else:
        for result in results:
            print(_format(result))
        if error:
            print(f"error: {error}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
