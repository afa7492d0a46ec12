"""Random RPN proposal cases and a digest of what mmdet's RPNHead.predict_by_feat returns for each
(issue 43 item 1): a patch to how the RPN makes its proposals must return the same, case for case.

    python -m mmstack_lab.detector.rpn_proposal_cases --device cuda --cases 60 --json

Draws `--cases` inputs from `--seed` (the same in every interpreter: drawn on the CPU with a seeded
generator, then moved to --device) and calls `RPNHead.predict_by_feat` of the mmdet this interpreter
imports, as the two-stage detectors call it for their proposals (training: nms_pre 2000, testing:
1000). A case varies: the batch (1-8 images), the padded size and each image's img_shape inside it
(so the border clip differs per image), the config (train, test, a small nms_pre, none, min_bbox_size,
max_per_img 5, NMS IoU 0.3, rescale), the coder (clip_border off, add_ctr_clamp), scores with ties
(few distinct logits) and large deltas, and on CUDA float16 inputs under torch.autocast (what AMP
training feeds it; plain float16 without autocast makes the released head raise in mmcv's CUDA nms,
"expected scalar type Float but found Half", lab/results/h100/perf-run4). An exception is part of
the result: both sides must raise the same. Per case it records the proposals of every image (bboxes, scores, labels: dtype, shape, bytes) and hashes them: two
interpreters returned the same for every case exactly when their digests are equal (patch_ab.py --same
rpn_proposals compares released and patched).

Beside each call it makes mmdet's per-image reference in the same interpreter,
BaseDenseHead.predict_by_feat (the loop over _predict_by_feat_single, which is what RPNHead inherits
when it does not override predict_by_feat), and the summary says in how many cases the two are equal
bit for bit, their boxes and labels equal, and how many last bits their scores differ by at most
(float ulps). It also says how often the head ran its per-image method, and does so for a subclass
that overrides _predict_by_feat_single (a batched predict_by_feat must leave that one per image).
"""

from __future__ import annotations

import contextlib
import copy
import sys

from mmstack_lab.common import case_digests
from mmstack_lab.common.case_digests import digest

SETTINGS = ("train", "test", "small_nms_pre", "no_nms_pre", "min_bbox_size", "max_per_img_5", "nms_iou_0.3",
            "rescale", "no_clip", "ctr_clamp")
TRAIN = {"nms_pre": 2000, "max_per_img": 1000, "nms": {"type": "nms", "iou_threshold": 0.7}, "min_bbox_size": 0}
TEST = {"nms_pre": 1000, "max_per_img": 1000, "nms": {"type": "nms", "iou_threshold": 0.7}, "min_bbox_size": 0}
STRIDES = (4, 8, 16, 32, 64)


def draw(i: int, seed: int, device: str) -> dict:
    """Case i's parameters and CPU inputs, the same in every interpreter (for one --device)."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + i)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    setting = SETTINGS[i % len(SETTINGS)]
    n_imgs = int(torch.randint(1, 9, (1,), generator=g))
    # padded to a multiple of 32, as DetDataPreprocessor pads (size_divisor=32)
    pad = (32 * int(torch.randint(3, 9, (1,), generator=g)), 32 * int(torch.randint(3, 9, (1,), generator=g)))
    inner = pick([False, True, True])  # images smaller than the padded batch: each its own clip
    shapes = [(pad[0] - int(torch.randint(0, 60, (1,), generator=g)), pad[1] - int(torch.randint(0, 60, (1,), generator=g)))
              if inner else pad for _ in range(n_imgs)]
    sizes = [(pad[0] // s, pad[1] // s) for s in STRIDES]
    ties = pick([False, False, False, True])
    spread = pick([0.5, 0.5, 3.0])
    cls = [torch.randint(-3, 3, (n_imgs, 3, h, w), generator=g).float() if ties else torch.randn(n_imgs, 3, h, w, generator=g) * 2
           for h, w in sizes]
    reg = [torch.randn(n_imgs, 12, h, w, generator=g) * spread for h, w in sizes]
    amp = pick([False, False, True]) if device == "cuda" else False
    return {"i": i, "setting": setting, "n_imgs": n_imgs, "pad": pad, "shapes": shapes, "ties": ties, "spread": spread,
            "amp": amp, "dtype": "float16" if amp else "float32", "cls": cls, "reg": reg}


def _cfg(setting: str):
    from mmengine.config import ConfigDict

    cfg: dict[str, object] = copy.deepcopy(TEST if setting == "test" else TRAIN)
    overrides: dict[str, dict[str, object]] = {"small_nms_pre": {"nms_pre": 50, "max_per_img": 40}, "no_nms_pre": {"nms_pre": -1, "max_per_img": 300},
                "min_bbox_size": {"min_bbox_size": 12.0}, "max_per_img_5": {"max_per_img": 5},
                "nms_iou_0.3": {"nms": {"type": "nms", "iou_threshold": 0.3}}}
    cfg.update(overrides.get(setting, {}))
    return ConfigDict(cfg)


def head_of(setting: str, own_single: bool = False):
    """The RPN head of Faster R-CNN's config (3 anchors a position, 5 levels), small feature channels."""
    from mmdet.models.dense_heads import RPNHead

    cls = RPNHead
    if own_single:
        class OwnSingle(RPNHead):  # a subclass with its own per-image method (as GARPNHead has)
            def _predict_by_feat_single(self, *args, **kwargs):
                return RPNHead._predict_by_feat_single(self, *args, **kwargs)
        cls = OwnSingle
    head = cls(in_channels=4, feat_channels=4,
               anchor_generator={"type": "AnchorGenerator", "scales": [8], "ratios": [0.5, 1.0, 2.0], "strides": list(STRIDES)},
               bbox_coder={"type": "DeltaXYWHBBoxCoder", "target_means": [0.0] * 4, "target_stds": [1.0] * 4,
                           "clip_border": setting != "no_clip", "add_ctr_clamp": setting == "ctr_clamp", "ctr_clamp": 32})
    # per instance: what predict_by_feat calls, not which path it takes
    return head.eval(), case_digests.count_calls(head, "_predict_by_feat_single")


def _ulps(a, b) -> int:
    """How many last bits apart two float tensors of one dtype are (the largest, element by element)."""
    import torch

    if a.numel() == 0:
        return 0
    ints = {torch.float32: torch.int32, torch.float16: torch.int16}[a.dtype]
    return int((a.contiguous().view(ints).long() - b.contiguous().view(ints).long()).abs().max())


def run_case(case: dict, device: str, own_single: bool = False) -> dict:
    import torch
    from mmdet.models.dense_heads.base_dense_head import BaseDenseHead

    dtype = getattr(torch, case["dtype"])
    head, calls = head_of(case["setting"], own_single)
    cls = [t.to(device, dtype) for t in case["cls"]]
    reg = [t.to(device, dtype) for t in case["reg"]]
    metas = [{"img_shape": s, "pad_shape": case["pad"], "scale_factor": (1.5, 1.25)} for s in case["shapes"]]
    kw = {"batch_img_metas": metas, "cfg": _cfg(case["setting"]), "rescale": case["setting"] == "rescale"}
    def call(fn):
        try:
            with torch.no_grad(), (torch.autocast("cuda", dtype=torch.float16) if case["amp"] else contextlib.nullcontext()):
                return fn(), None
        except Exception as exc:  # noqa: BLE001 - the same exception on both sides is part of the contract
            return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    got, error = call(lambda: head.predict_by_feat(cls, reg, **kw))
    n_calls = len(calls)
    ref, ref_error = call(lambda: BaseDenseHead.predict_by_feat(head, cls, reg, **kw))
    if error or ref_error:
        return {"proposals": [{"error": error}], "kept": [], "keys": [], "per_image_calls": n_calls,
                "equals_per_image": error == ref_error, "boxes_equal_per_image": error == ref_error, "score_ulps": 0,
                "error": error}
    out = [{k: case_digests.tensors(getattr(r, k)) for k in ("bboxes", "scores", "labels")} for r in got]
    same_boxes = all(torch.equal(a.bboxes, b.bboxes) and torch.equal(a.labels, b.labels) for a, b in zip(got, ref, strict=True))
    ulps = max((_ulps(a.scores, b.scores) for a, b in zip(got, ref, strict=True) if a.scores.shape == b.scores.shape),
               default=0)
    return {"proposals": out, "kept": [len(r) for r in got], "keys": [sorted(r.keys()) for r in got],
            "per_image_calls": n_calls, "equals_per_image": same_boxes and ulps == 0 and
            all(a.scores.shape == b.scores.shape for a, b in zip(got, ref, strict=True)),
            "boxes_equal_per_image": same_boxes, "score_ulps": ulps, "error": None}


def check(device: str, cases: int, seed: int) -> dict:
    import mmdet
    import torch

    records = []
    settings: dict[str, int] = {}
    summary: dict[str, object] = {"settings": settings}
    counts = {"images": 0, "per_image_calls": 0, "equals_per_image": 0, "boxes_equal_per_image": 0, "max_score_ulps": 0,
               "ties": 0, "amp": 0, "errors": 0, "clipped_per_image": 0}
    for i in range(cases):
        case = draw(i, seed, device)
        rec = run_case(case, device)
        records.append(digest([rec["proposals"], rec["kept"], rec["keys"]]))
        counts["images"] += case["n_imgs"]
        counts["per_image_calls"] += rec["per_image_calls"]
        counts["equals_per_image"] += rec["equals_per_image"]
        counts["boxes_equal_per_image"] += rec["boxes_equal_per_image"]
        counts["max_score_ulps"] = max(counts["max_score_ulps"], rec["score_ulps"])
        counts["ties"] += case["ties"]
        counts["amp"] += case["amp"]
        counts["errors"] += rec["error"] is not None
        counts["clipped_per_image"] += len(set(case["shapes"])) > 1
        settings[case["setting"]] = settings.get(case["setting"], 0) + 1
    summary.update(counts)
    first = draw(0, seed, device)
    summary["subclass_per_image_calls"] = run_case(first, device, own_single=True)["per_image_calls"]
    summary["subclass_images"] = first["n_imgs"]
    return {"what": "mmdet's RPNHead.predict_by_feat on random batches: a digest per case, and each case against "
                    "the per-image reference (BaseDenseHead.predict_by_feat) in the same interpreter",
            "device": device, "seed": seed, "cases": cases, "torch": torch.__version__, "mmdet": mmdet.__version__,
            "digest": digest(records), "case_digests": records, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    return case_digests.main("rpn_proposal_cases", __doc__.splitlines()[0], check, cases=60, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
