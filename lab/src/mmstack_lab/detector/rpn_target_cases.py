"""Random anchor-target cases and a digest of what mmdet's AnchorHead.get_targets and loss_by_feat
return for each (issue 43 item 1): a patch to how the RPN makes its targets must return the same,
case for case, and draw the same random numbers.

    python -m mmstack_lab.detector.rpn_target_cases --device cuda --cases 60 --json

Draws `--cases` inputs from `--seed` (the same in every interpreter: drawn on the CPU with a seeded
generator, then moved to --device) and, for a head built from the case's setting, calls
`get_targets` (with its sampling results) and `loss_by_feat` with backward, each after seeding the
RNG, as the two-stage detectors' RPN (and RetinaNet-like heads) call them in training. A case
varies: the batch (1-8 images), the padded size and each image's own pad shape (images padded to
their own multiple of 32 have anchors outside their valid region), how many ground-truth boxes an
image has (none, one, a crowd; duplicated boxes, so that IoU ties), and the setting: the RPN of
Faster R-CNN (MaxIoUAssigner 0.7/0.3 with low-quality matches, RandomSampler 256), allowed_border 0,
a pos_weight, negatives by an IoU range, no low-quality matching, a RetinaNet-like head
(PseudoSampler, min_pos_iou 0, three classes), reg_decoded_bbox with GIoULoss, ignored boxes that
the assigner uses, gt_max_assign_all off (the last two keep a per-image path in a batched patch),
and a tiny memory budget for a batched assignment (`_BATCH_IOU_ELEMENTS`, where the module has it).

Per case it records the targets of every level, each image's sampling result (positive and negative
indices, assigned boxes and labels, avg_factor), the losses, the gradients of the predictions and the
RNG states after (so both sides drew the same random numbers) and hashes them: two interpreters
returned the same for every case exactly when their digests are equal (patch_ab.py --same
rpn_targets compares released and patched). Beside each call it makes the per-image reference in the
same interpreter (the head with any batched path turned off) and says in how many cases the two are
equal, and how often the head ran its per-image `_get_targets_single`.
"""

from __future__ import annotations

import contextlib
import sys

from mmstack_lab.common import case_digests
from mmstack_lab.common.case_digests import digest

SETTINGS = ("rpn", "border_0", "pos_weight", "neg_range", "no_low_quality", "retina", "decoded", "ignore",
            "assign_one", "small_budget")
STRIDES = (4, 8, 16, 32, 64)


def draw(i: int, seed: int, device: str) -> dict:
    """Case i's parameters and CPU inputs, the same in every interpreter (for one --device)."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + i)

    def rint(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi, (1,), generator=g))

    setting = SETTINGS[i % len(SETTINGS)]
    n_imgs = rint(1, 9)
    pad = (32 * rint(2, 8), 32 * rint(2, 8))
    own_pad = rint(0, 3) > 0  # each image padded to its own multiple of 32: anchors outside its valid region
    shapes, pads = [], []
    for _ in range(n_imgs):
        shape = (pad[0] - rint(0, 60), pad[1] - rint(0, 60)) if own_pad else pad
        shapes.append(shape)
        pads.append((min(pad[0], -(-shape[0] // 32) * 32), min(pad[1], -(-shape[1] // 32) * 32)) if own_pad else pad)
    gts, labels, ignores = [], [], []
    for h, w in shapes:
        n = [0, 1, rint(2, 8), rint(8, 40)][rint(0, 4)]
        xy = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.8, h * 0.8])
        wh = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.6, h * 0.6]) + 2
        boxes = torch.cat([xy, (xy + wh).minimum(torch.tensor([w - 1.0, h - 1.0]))], 1)
        if n > 2 and rint(0, 2):
            boxes[-1] = boxes[0]  # a duplicate: its IoU ties with the first's everywhere
        gts.append(boxes)
        labels.append(torch.randint(0, 3, (n,), generator=g) if setting == "retina" else torch.zeros(n, dtype=torch.long))
        ig = torch.rand(rint(0, 3), 2, generator=g) * torch.tensor([w * 0.7, h * 0.7])
        ignores.append(torch.cat([ig, ig + 24], 1))
    sizes = [(-(-pad[0] // s), -(-pad[1] // s)) for s in STRIDES]
    classes = 3 if setting == "retina" else 1
    cls = [torch.randn(n_imgs, 3 * classes, h, w, generator=g) for h, w in sizes]
    reg = [torch.randn(n_imgs, 12, h, w, generator=g) * 0.5 for h, w in sizes]
    return {"i": i, "setting": setting, "n_imgs": n_imgs, "pad": pad, "shapes": shapes, "pads": pads,
            "own_pad": own_pad, "gts": gts, "labels": labels, "ignores": ignores, "cls": cls, "reg": reg,
            "rng_seed": seed * 7919 + i}


def head_of(setting: str, device: str):
    """An AnchorHead (the RPN's configuration, or the setting's change to it), small feature channels,
    counting its per-image _get_targets_single calls."""
    from mmdet.models.dense_heads import AnchorHead, RPNHead
    from mmengine.config import ConfigDict

    assigner = {"type": "MaxIoUAssigner", "pos_iou_thr": 0.7, "neg_iou_thr": 0.3, "min_pos_iou": 0.3,
                "match_low_quality": True, "ignore_iof_thr": -1}
    sampler: dict | None = {"type": "RandomSampler", "num": 256, "pos_fraction": 0.5, "neg_pos_ub": -1,
                            "add_gt_as_proposals": False}
    cfg: dict[str, object] = {"allowed_border": -1, "pos_weight": -1, "debug": False}
    loss_bbox = {"type": "L1Loss", "loss_weight": 1.0}
    if setting == "border_0":
        cfg["allowed_border"] = 0
    elif setting == "pos_weight":
        cfg["pos_weight"] = 2.0
    elif setting == "neg_range":
        assigner["neg_iou_thr"] = (0.1, 0.3)
    elif setting == "no_low_quality":
        assigner["match_low_quality"] = False
    elif setting == "retina":
        assigner.update(pos_iou_thr=0.5, neg_iou_thr=0.4, min_pos_iou=0)
        sampler = None
    elif setting == "decoded":
        loss_bbox = {"type": "GIoULoss", "loss_weight": 2.0}
    elif setting == "ignore":
        assigner["ignore_iof_thr"] = 0.5
    elif setting == "assign_one":
        assigner["gt_max_assign_all"] = False
    train_cfg = ConfigDict(assigner=assigner, **({"sampler": sampler} if sampler else {}), **cfg)
    common = {"in_channels": 4, "feat_channels": 4, "train_cfg": train_cfg,
              "anchor_generator": {"type": "AnchorGenerator", "scales": [8], "ratios": [0.5, 1.0, 2.0],
                                   "strides": list(STRIDES)},
              "bbox_coder": {"type": "DeltaXYWHBBoxCoder", "target_means": [0.0] * 4, "target_stds": [1.0] * 4},
              "reg_decoded_bbox": setting == "decoded", "loss_bbox": loss_bbox}
    if setting == "retina":
        head = AnchorHead(num_classes=3, loss_cls={"type": "CrossEntropyLoss", "use_sigmoid": True, "loss_weight": 1.0},
                          **common)
    else:
        head = RPNHead(loss_cls={"type": "CrossEntropyLoss", "use_sigmoid": True, "loss_weight": 1.0}, **common)
    # per instance: what get_targets calls, not which path it takes
    return head.to(device), case_digests.count_calls(head, "_get_targets_single")


@contextlib.contextmanager
def _budget(setting: str):
    """small_budget: the batched assignment's budget (where the module has one) at 40,000 IoU values."""
    import mmdet.models.dense_heads.anchor_head as module

    old = getattr(module, "_BATCH_IOU_ELEMENTS", None)
    if setting == "small_budget" and old is not None:
        module._BATCH_IOU_ELEMENTS = 40_000
    try:
        yield
    finally:
        if old is not None:
            module._BATCH_IOU_ELEMENTS = old


def _rng(device: str) -> list:
    import torch

    states = [torch.get_rng_state()]
    if device.startswith("cuda"):
        states.append(torch.cuda.get_rng_state(device))
    return states


def loss_inputs(case: dict, device: str) -> tuple[list, list, list | None]:
    """The case's image metas, ground truth and ignored boxes (where its setting uses them), on device."""
    from mmengine.structures import InstanceData

    metas = [{"img_shape": s, "pad_shape": p, "batch_input_shape": case["pad"]} for s, p in zip(case["shapes"], case["pads"], strict=True)]
    insts = [InstanceData(bboxes=b.to(device), labels=lab.to(device)) for b, lab in zip(case["gts"], case["labels"], strict=True)]
    ignore = ([InstanceData(bboxes=b.to(device)) for b in case["ignores"]] if case["setting"] == "ignore" else None)
    return metas, insts, ignore


def loss_with_backward(head, case: dict, device: str, inputs: tuple[list, list, list | None]) -> tuple[dict, list, list]:
    """loss_by_feat on the case's predictions after seeding, and the backward of the sum of its losses, as
    training runs them: the losses and the score and box predictions (their .grad set)."""
    import torch

    metas, insts, ignore = inputs
    cls = [t.detach().clone().to(device).requires_grad_() for t in case["cls"]]
    reg = [t.detach().clone().to(device).requires_grad_() for t in case["reg"]]
    torch.manual_seed(case["rng_seed"])
    losses = head.loss_by_feat(cls, reg, insts, metas, ignore)
    torch.stack([x for v in losses.values() for x in v]).sum().backward()
    return losses, cls, reg


def _side(head, case: dict, device: str) -> dict:
    """get_targets and loss_by_feat (with backward) as training calls them; each after seeding."""
    import torch

    inputs = loss_inputs(case, device)
    metas, insts, ignore = inputs
    feats = [tuple(t.shape[-2:]) for t in case["cls"]]
    torch.manual_seed(case["rng_seed"])
    anchors, valid = head.get_anchors(feats, metas, device=device)
    targets = head.get_targets(anchors, valid, insts, metas, ignore, return_sampling_results=True)
    sampling = [[r.pos_inds, r.neg_inds, r.pos_gt_labels, r.pos_assigned_gt_inds, r.pos_gt_bboxes, r.pos_priors,
                 r.avg_factor, r.num_gts] for r in targets[5]]
    rng_targets = _rng(device)
    losses, cls, reg = loss_with_backward(head, case, device, inputs)
    return {"targets": case_digests.tensors(list(targets[:4])), "avg_factor": targets[4],
            "sampling": case_digests.tensors(sampling), "rng_targets": case_digests.tensors(rng_targets),
            "losses": case_digests.tensors(losses), "grads": case_digests.tensors([t.grad for t in cls + reg]),
            "rng_loss": case_digests.tensors(_rng(device)), "n_pos": [int(r.pos_inds.numel()) for r in targets[5]]}


def run_case(case: dict, device: str) -> dict:
    head, calls = head_of(case["setting"], device)
    with _budget(case["setting"]):
        try:
            got, error = _side(head, case, device), None
        except Exception as exc:  # noqa: BLE001 - the same exception on both sides is part of the contract
            got, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        n_calls = len(calls)
        # the per-image reference: the same head with any batched path turned off
        head._batched_targets_apply = lambda *args, **kwargs: False
        try:
            ref, ref_error = _side(head, case, device), None
        except Exception as exc:  # noqa: BLE001
            ref, ref_error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return {"result": got if error is None else {"error": error}, "per_image_calls": n_calls,
            "equals_per_image": got == ref and error == ref_error, "error": error}


def check(device: str, cases: int, seed: int) -> dict:
    import mmdet
    import torch

    records = []
    settings: dict[str, int] = {}
    calls_by_setting: dict[str, int] = {}
    counts = {"images": 0, "per_image_calls": 0, "equals_per_image": 0, "errors": 0, "own_pad": 0,
              "images_without_boxes": 0, "positives": 0}
    for i in range(cases):
        case = draw(i, seed, device)
        rec = run_case(case, device)
        records.append(digest(rec["result"]))
        settings[case["setting"]] = settings.get(case["setting"], 0) + 1
        counts["images"] += case["n_imgs"]
        counts["per_image_calls"] += rec["per_image_calls"]
        calls_by_setting[case["setting"]] = calls_by_setting.get(case["setting"], 0) + rec["per_image_calls"]
        counts["equals_per_image"] += rec["equals_per_image"]
        counts["errors"] += rec["error"] is not None
        counts["own_pad"] += case["own_pad"]
        counts["images_without_boxes"] += sum(len(b) == 0 for b in case["gts"])
        counts["positives"] += sum(rec["result"].get("n_pos", []))
    return {"what": "mmdet's AnchorHead.get_targets and loss_by_feat (RPNHead's, and settings around it) on random "
                    "batches: a digest per case, and each case against the per-image path in the same interpreter",
            "device": device, "seed": seed, "cases": cases, "torch": torch.__version__, "mmdet": mmdet.__version__,
            "digest": digest(records), "case_digests": records,
            "summary": {"settings": settings, **counts, "per_image_calls_by_setting": calls_by_setting}}


def main(argv: list[str] | None = None) -> int:
    return case_digests.main("rpn_target_cases", __doc__.splitlines()[0], check, cases=60, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
