"""Where a detector training iteration spends its time, stage by stage: mmdet against torchvision
(issue 24 item 2).

    python -m mmstack_lab.detector.detector_stages --device cuda --batch-size 2 --json > stages_bs2.json

The models, batch, AMP and optimizer are bench_detector.py's, from mmstack_lab.detector.harness
(mmdet's faster-rcnn config; the "matched" torchvision Faster R-CNN). No profiler: each stage
boundary records a CPU clock (time.perf_counter, no synchronisation) and, on CUDA, an event on the
current stream; one synchronize ends each iteration (bench_detector's steps sync there too,
reading the loss). Per stage, the median over iterations of
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

import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mmstack_lab.detector import harness

if TYPE_CHECKING:
    import torch


class Marks:
    """Stage boundaries of one iteration: (name, "start"|"end", cpu time, CUDA event or None)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.marks: list[tuple[str, str, float, torch.cuda.Event | None]] = []

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
        open_: dict[str, tuple[float, torch.cuda.Event | None]] = {}
        for name, edge, t, ev in self.marks:
            if edge == "start":
                open_[name] = (t, ev)
                continue
            t0, ev0 = open_.pop(name)
            d = out.setdefault(name, {"cpu_ms": 0.0, "gpu_ms": 0.0} if self.cuda else {"cpu_ms": 0.0})
            d["cpu_ms"] += (t - t0) * 1e3
            if ev0 is not None and ev is not None:  # both recorded where self.cuda
                d["gpu_ms"] += ev0.elapsed_time(ev)
        return out


def _wrap(obj, attr: str, marks: Marks, name: str) -> None:
    fn = getattr(obj, attr)
    setattr(obj, attr, lambda *a, **k: marks.span(name, fn, *a, **k))


def mmdet_iteration(args, samples, marks: Marks) -> Callable[[], None]:
    side = harness.mmdet_side(args, samples)
    model, optim, data = side.model, side.optim, side.data
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

    tv = harness.torchvision_side(args, samples, "matched")
    model, optimizer, scaler = tv.model, tv.optimizer, tv.scaler
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
        with torch.autocast(device_type=tv.device_type, dtype=torch.float16, enabled=tv.amp):
            losses = marks.span("forward", model, tv.images, tv.targets)
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

    harness.require_device(args, tool)
    samples = harness.synthetic_batch(args)
    sides: dict[str, dict] = {}
    try:
        versions = harness.require_stack()
        sides["mmdet"] = {**per_side("mmdet", mmdet_iteration, args, samples), "versions": versions}
    except harness.td.DetectorStepUnavailable as exc:
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
        **harness.setting(args), "iters": args.iters,
        "torchvision_model": "matched (bench_detector.py)",
        "seams": {name: {"mmdet": m, "torchvision": t} for name, (m, t) in SEAMS.items()},
        "frameworks": sides,
    }


def run(args) -> dict:
    return run_sides(args, measure, tool="detector_stages",
                     what="one training iteration split into stages: CPU time issuing each, GPU time between its boundaries")


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser(__doc__.splitlines()[0], warmup=5, iters=20)
    args = harness.parse_args(ap, argv, "detector_stages")
    print_report(run(args), as_json=args.json, lines=_lines)
    return 0


def print_report(report: dict, *, as_json: bool, lines: Callable[[str, dict], list[str]]) -> None:
    """A run_sides report as JSON, or as text: per side, `lines(name, side)` or why it was skipped."""
    if as_json:
        print(json.dumps(report, indent=1))
        return
    for fw, side in report["frameworks"].items():
        print("\n".join([f"{fw}: skipped: {side['skipped']}"] if "skipped" in side else lines(fw, side)))


def _lines(fw: str, side: dict) -> list[str]:
    return [f"{fw}:", *(f"  {name:16s} " + "  ".join(f"{k} {v:9.2f}" for k, v in d.items())
                        for name, d in side["stages"].items())]


if __name__ == "__main__":
    sys.exit(main())
