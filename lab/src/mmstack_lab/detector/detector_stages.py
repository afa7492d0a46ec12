"""Where a detector training iteration spends its time, stage by stage: mmdet against torchvision
(issue 24 item 2).

    python -m mmstack_lab.detector.detector_stages --device cuda --batch-size 2 --json > stages_bs2.json

The models, batch, AMP and optimizer are bench_detector.py's (mmdet's faster-rcnn config; the
"matched" torchvision Faster R-CNN). No profiler: each stage boundary records a CPU clock
(time.perf_counter, no synchronisation) and, on CUDA, an event on the current stream; one
synchronize ends each iteration (bench_detector's steps sync there too, reading the loss). Per
stage, the median over iterations of
- cpu_ms: what the Python side spent issuing the stage's work;
- gpu_ms: event to event, the GPU's time from the stage's start to its end, idle gaps included.
A stage whose gpu_ms is close to its cpu_ms is launch-bound there; gpu_ms well above cpu_ms means
the GPU is the limit. `other` is the iteration less its top-level stages.

Stages (top level, then nested inside `forward`, then the seams inside rpn and roi that SEAMS
describes for each side: rpn.targets, rpn.loss, rpn.proposals, roi.targets, roi.features,
roi.head, roi.loss):
  mmdet        preprocess (data_preprocessor), forward (loss), parse_losses, update
               (optim_wrapper.update_params: backward, step, zero_grad); nested: backbone+neck
               (extract_feat), rpn (rpn_head.loss_and_predict), roi (roi_head.loss)
  torchvision  forward (model(images, targets), its transform included), loss_sum, update (scaled
               backward, step, scaler update, zero_grad); nested: preprocess (transform),
               backbone+neck (backbone), rpn (rpn), roi (roi_heads)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

from mmstack_lab.detector import bench_detector as bd

td = bd.td


class Marks:
    """Stage boundaries of one iteration: (name, "start"|"end", cpu time, CUDA event or None)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.marks: list[tuple[str, str, float, object]] = []

    def mark(self, name: str, edge: str) -> None:
        event = None
        if self.cuda:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
        self.marks.append((name, edge, time.perf_counter(), event))

    def span(self, name: str, fn: Callable, *args, **kwargs):
        self.mark(name, "start")
        try:
            return fn(*args, **kwargs)
        finally:
            self.mark(name, "end")

    def durations(self) -> dict[str, dict[str, float]]:
        """Stage -> {cpu_ms, gpu_ms}, summed over the stage's occurrences in the iteration."""
        out: dict[str, dict[str, float]] = {}
        open_: dict[str, tuple[float, object]] = {}
        for name, edge, t, ev in self.marks:
            if edge == "start":
                open_[name] = (t, ev)
                continue
            t0, ev0 = open_.pop(name)
            d = out.setdefault(name, {"cpu_ms": 0.0, "gpu_ms": 0.0} if self.cuda else {"cpu_ms": 0.0})
            d["cpu_ms"] += (t - t0) * 1e3
            if self.cuda:
                d["gpu_ms"] += ev0.elapsed_time(ev)
        return out


def _wrap(obj, attr: str, marks: Marks, name: str) -> None:
    fn = getattr(obj, attr)
    setattr(obj, attr, lambda *a, **k: marks.span(name, fn, *a, **k))


def mmdet_iteration(args, samples, marks: Marks) -> Callable[[], None]:
    td.seed_everything(args.seed)
    model = td.build_detector(args.model, num_classes=args.num_classes, device=args.device)
    model.train()
    amp = args.amp and args.device.startswith("cuda")
    optim = td.make_optim_wrapper(model, device=args.device, amp=amp, lr=args.lr)
    data = td.to_mmdet_inputs(samples, device=args.device)
    _wrap(model, "extract_feat", marks, "backbone+neck")
    _wrap(model.rpn_head, "loss_and_predict", marks, "rpn")
    _wrap(model.roi_head, "loss", marks, "roi")
    # inside rpn and roi (SEAMS): targets (assign + sample), losses, proposals, RoI features, head
    rpn, roi = model.rpn_head, model.roi_head
    for obj, attr, name in ((rpn, "get_targets", "rpn.targets"), (rpn, "loss_by_feat", "rpn.loss"),
                            (rpn, "predict_by_feat", "rpn.proposals"), (roi.bbox_assigner, "assign", "roi.targets"),
                            (roi.bbox_sampler, "sample", "roi.targets"), (roi.bbox_roi_extractor, "forward", "roi.features"),
                            (roi.bbox_head, "forward", "roi.head"), (roi.bbox_head, "loss_and_target", "roi.loss")):
        _wrap(obj, attr, marks, name)

    def step() -> None:  # mmengine's BaseModel.train_step, stage by stage
        with optim.optim_context(model):
            batch = marks.span("preprocess", model.data_preprocessor, data, True)
            losses = marks.span("forward", model._run_forward, batch, mode="loss")
        parsed, _ = marks.span("parse_losses", model.parse_losses, losses)
        marks.span("update", optim.update_params, parsed)

    return step


def torchvision_iteration(args, samples, marks: Marks) -> Callable[[], None]:
    import torch

    td.seed_everything(args.seed)
    model = bd._torchvision_model("matched", num_classes=args.num_classes, image_size=args.image_size)
    model.to(args.device).train()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=args.lr,
                                momentum=0.9, weight_decay=1e-4)
    amp = args.amp and args.device.startswith("cuda")
    device_type = args.device.split(":")[0]
    scaler = torch.amp.GradScaler(device_type, enabled=amp)
    images = [s["image"].to(args.device).float() / 255.0 for s in samples]
    targets = [{"boxes": s["boxes"].to(args.device), "labels": s["labels"].to(args.device) + 1} for s in samples]
    for attr, name in (("transform", "preprocess"), ("backbone", "backbone+neck"), ("rpn", "rpn"), ("roi_heads", "roi")):
        _wrap(getattr(model, attr), "forward", marks, name)
    from torchvision.models.detection import roi_heads as tv_roi_heads

    rpn, roi = model.rpn, model.roi_heads
    for obj, attr, name in ((rpn, "assign_targets_to_anchors", "rpn.targets"), (rpn, "compute_loss", "rpn.loss"),
                            (rpn, "filter_proposals", "rpn.proposals"), (roi, "select_training_samples", "roi.targets"),
                            (roi.box_roi_pool, "forward", "roi.features"), (roi.box_head, "forward", "roi.head"),
                            (roi.box_predictor, "forward", "roi.head")):
        _wrap(obj, attr, marks, name)
    fastrcnn_loss = tv_roi_heads.fastrcnn_loss
    tv_roi_heads.fastrcnn_loss = lambda *a, **k: marks.span("roi.loss", fastrcnn_loss, *a, **k)

    def update(loss) -> None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    def step() -> None:  # bench_detector.torchvision_step, zero_grad moved to the end of the update
        with torch.autocast(device_type=device_type, dtype=torch.float16, enabled=amp):
            losses = marks.span("forward", model, images, targets)
            loss = marks.span("loss_sum", lambda: sum(losses.values()))
        marks.span("update", update, loss)

    return step


TOP = {"mmdet": ("preprocess", "forward", "parse_losses", "update"), "torchvision": ("forward", "loss_sum", "update")}
# the seams inside rpn and roi, and what each covers on each side (a name spans all its calls in
# one iteration: per image, per level):
SEAMS = {
    "rpn.targets": ("rpn_head.get_targets: anchors assigned (MaxIoUAssigner) and sampled per image",
                    "rpn.assign_targets_to_anchors (per image)"),
    "rpn.loss": ("rpn_head.loss_by_feat: rpn.targets inside it, then the losses",
                 "rpn.compute_loss: sampling and the losses (targets encoded before it)"),
    "rpn.proposals": ("rpn_head.predict_by_feat: per image, per level top-k, decode, batched_nms (mmcv)",
                      "rpn.filter_proposals: batched top-k per level, per image clip and batched_nms (torchvision)"),
    "roi.targets": ("bbox_assigner.assign + bbox_sampler.sample, per image",
                    "roi_heads.select_training_samples (assign, sample, encode)"),
    "roi.features": ("bbox_roi_extractor: RoIAlign per FPN level (mmcv.ops.RoIAlign)",
                     "box_roi_pool: MultiScaleRoIAlign (torchvision.ops.roi_align)"),
    "roi.head": ("bbox_head.forward", "box_head + box_predictor"),
    "roi.loss": ("bbox_head.loss_and_target: targets encoded, then the losses", "fastrcnn_loss"),
}


def measure(framework: str, make, args, samples) -> dict:
    import torch

    cuda = args.device.startswith("cuda")
    marks = Marks(cuda)
    step = make(args, samples, marks)
    per_iter: list[dict] = []
    for i in range(args.warmup + args.iters):
        marks.marks.clear()
        marks.mark("iteration", "start")
        step()
        marks.mark("iteration", "end")
        if cuda:
            torch.cuda.synchronize(args.device)
        if i >= args.warmup:
            per_iter.append(marks.durations())
    stages = {}
    for name in per_iter[0]:
        stages[name] = {k: round(statistics.median(d[name][k] for d in per_iter), 3) for k in per_iter[0][name]}
    top = TOP[framework]
    stages["other"] = {k: round(stages["iteration"][k] - sum(stages[s][k] for s in top), 3) for k in stages["iteration"]}
    return {"top_level": list(top), "stages": stages, "iterations": len(per_iter)}


def run_sides(args, per_side: Callable, *, tool: str, what: str) -> dict:
    """Both detectors on one synthetic batch, each through per_side(framework, make_iteration, args,
    samples) (measure here, detector_ops.count there), with the versions each imported; a side that
    cannot run says why. The report's header is the same for every tool built on these stages."""
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"{tool}: --device cuda, but torch sees no CUDA GPU", file=sys.stderr)
        raise SystemExit(2)
    if args.image_size is None:
        args.image_size = td.GPU_IMAGE_SIZE if args.device.startswith("cuda") else td.CPU_IMAGE_SIZE
    samples = td.synthetic_batch(image_size=args.image_size, batch_size=args.batch_size,
                                 num_classes=args.num_classes, seed=args.seed)
    sides: dict[str, dict] = {}
    try:
        versions = bd.require_stack()
        sides["mmdet"] = {**per_side("mmdet", mmdet_iteration, args, samples), "versions": versions}
    except td.DetectorStepUnavailable as exc:
        sides["mmdet"] = {"skipped": str(exc)}
    try:
        import torchvision
    except Exception as exc:  # noqa: BLE001 - one built for another torch fails in odd ways
        sides["torchvision"] = {"skipped": f"torchvision does not import: {type(exc).__name__}: {exc}"}
    else:
        sides["torchvision"] = {**per_side("torchvision", torchvision_iteration, args, samples),
                                "versions": {"torch": torch.__version__, "torchvision": torchvision.__version__}}
    return {
        "what": what,
        "device": args.device,
        "device_name": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu",
        "model": args.model, "image_size": args.image_size, "batch_size": args.batch_size,
        "amp": args.amp and args.device.startswith("cuda"), "warmup": args.warmup, "iters": args.iters,
        "torchvision_model": "matched (bench_detector.py)",
        "seams": {name: {"mmdet": m, "torchvision": t} for name, (m, t) in SEAMS.items()},
        "frameworks": sides,
    }


def run(args) -> dict:
    return run_sides(args, measure, tool="detector_stages",
                     what="one training iteration split into stages: CPU time issuing each, GPU time between its boundaries")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default="faster-rcnn")
    ap.add_argument("--image-size", type=int, default=None, help="default: 800 GPU, 128 CPU")
    ap.add_argument("--batch-size", type=int, default=td.BATCH_SIZE)
    ap.add_argument("--num-classes", type=int, default=td.NUM_CLASSES)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--lr", type=float, default=td.LR)
    ap.add_argument("--seed", type=int, default=td.SEED)
    ap.add_argument("--no-amp", dest="amp", action="store_false")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.iters < 1 or args.warmup < 0:
        print("detector_stages: --iters must be >= 1 and --warmup >= 0", file=sys.stderr)
        return 2
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    for fw, side in report["frameworks"].items():
        if "skipped" in side:
            print(f"{fw}: skipped: {side['skipped']}")
            continue
        print(f"{fw}:")
        for name, d in side["stages"].items():
            print(f"  {name:16s} " + "  ".join(f"{k} {v:9.2f}" for k, v in d.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
