"""Random nms cases and a digest of what mmcv returns for each (issue 43 item 2): a patch to mmcv's nms
wrapper must return the same, case for case.

    python -m mmstack_lab.ops.nms_cases --device cuda --cases 1000 --json

Draws `--cases` inputs from `--seed` (the same inputs in every interpreter: drawn on the CPU with a
seeded generator, then moved to --device) and calls `mmcv.ops.nms` (the mmcv this interpreter
imports) on each, and `mmcv.ops.batched_nms` on every third. A case varies: the box count (0, 1, 63-65,
up to 300, now and then 1,000), the boxes (uniform, clustered, identical, zero-area), the scores
(uniform, a few levels: ties, all equal), iou_threshold (0, 0.3, 0.5, 0.7, 1, random), offset (0, 1),
score_threshold (none, random, above every score), max_num, numpy or tensor input, float64 scores or
boxes (the kernels take float32 boxes: an error, recorded), boxes that require grad, and the keyword
(iou_threshold, the deprecated iou_thr, both: an AssertionError). Per case it records the kept
indices and dets (type, dtype, shape, bytes), whether dets requires grad, the warnings raised and
any exception's type and message, and hashes them: two interpreters returned the same for every
case exactly when their digests are equal (patch_ab.py --same nms compares released and patched).
"""

from __future__ import annotations

import hashlib
import sys
import warnings

from mmstack_lab.common import case_digests
from mmstack_lab.common.case_digests import digest


def draw(i: int, seed: int) -> dict:
    """Case i's parameters and CPU inputs (torch tensors), the same in every interpreter."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + i)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    def uniform() -> float:
        return float(torch.rand(1, generator=g))

    n = pick([0, 1, 2, 63, 64, 65, 1000] + [int(torch.randint(3, 301, (1,), generator=g))] * 9)
    layout = pick(["uniform"] * 4 + ["clustered"] * 3 + ["identical", "zero_area"])
    if layout == "clustered":  # a few objects, each proposed many times: heavy suppression
        centers = torch.rand(max(1, n // 20), 2, generator=g) * 400
        xy = centers[torch.randint(len(centers), (n,), generator=g)] + torch.randn(n, 2, generator=g) * 5
        wh = torch.rand(n, 2, generator=g) * 20 + 40
    elif layout == "identical":
        xy, wh = torch.full((n, 2), 10.0), torch.full((n, 2), 30.0)
    else:
        xy = torch.rand(n, 2, generator=g) * 800
        wh = torch.rand(n, 2, generator=g) * 200 + 8
        if layout == "zero_area":
            wh[:, int(torch.randint(2, (1,), generator=g))] = 0
    boxes = torch.cat([xy, xy + wh], 1)
    scoring = pick(["uniform"] * 3 + ["levels", "levels", "equal"])
    scores = torch.rand(n, generator=g)
    if scoring == "levels":  # ties: the sort's order among equal scores matters
        scores = torch.floor(scores * 5) / 5
    elif scoring == "equal":
        scores = torch.full((n,), 0.5)
    case = {
        "i": i, "n": n, "layout": layout, "scoring": scoring,
        "iou": pick([0.0, 0.3, 0.5, 0.5, 0.7, 1.0, round(uniform(), 4)]),
        "offset": pick([0, 0, 1]),
        "score_threshold": pick([0, 0, 0, 0, round(uniform(), 4), 1.5]),
        "max_num": pick([-1, -1, -1, 0, 1, int(torch.randint(n + 6, (1,), generator=g))]),
        "form": pick(["tensor"] * 8 + ["numpy"]),
        "dtype": pick(["float32"] * 12 + ["float64_scores", "float64_boxes"]),
        "grad": pick([False] * 6 + [True]),
        "keyword": pick(["positional"] * 5 + ["iou_threshold"] * 3 + ["iou_thr", "both"]),
        "classes": int(torch.randint(1, 12, (1,), generator=g)),
        "class_agnostic": pick([False, False, True]),
    }
    case["idxs"] = torch.randint(case["classes"], (n,), generator=g)
    if case["dtype"] == "float64_scores":
        scores = scores.double()
    elif case["dtype"] == "float64_boxes":
        boxes = boxes.double()
    case["boxes"], case["scores"] = boxes, scores
    return case


def _record(call) -> dict:
    """What a call returned (every output's type, dtype, shape and bytes), warned and raised."""
    import numpy as np
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = call()
            error = None
        except Exception as exc:  # noqa: BLE001 - the same exception on both sides is part of the contract
            out, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    rec: dict = {"error": error, "warnings": [f"{w.category.__name__}: {w.message}" for w in caught], "outputs": []}
    for x in out or ():
        if isinstance(x, torch.Tensor):
            rec["outputs"].append({"type": "tensor", "dtype": str(x.dtype), "shape": list(x.shape),
                                   "device": x.device.type, "requires_grad": x.requires_grad,
                                   "bytes": hashlib.sha256(x.detach().cpu().contiguous().numpy().tobytes()).hexdigest()})
        else:
            a = np.ascontiguousarray(x)
            rec["outputs"].append({"type": type(x).__name__, "dtype": str(a.dtype), "shape": list(a.shape),
                                   "bytes": hashlib.sha256(a.tobytes()).hexdigest()})
    return rec


def run_case(case: dict, device: str) -> dict:
    from mmcv.ops import batched_nms, nms

    boxes, scores = case["boxes"].to(device), case["scores"].to(device)
    if case["grad"] and boxes.is_floating_point():
        boxes = boxes.clone().requires_grad_(True)
    if case["form"] == "numpy":
        boxes, scores = boxes.detach().cpu().numpy(), scores.cpu().numpy()
    rest = {"offset": case["offset"], "score_threshold": case["score_threshold"], "max_num": case["max_num"]}
    keyword = case["keyword"]
    if keyword == "positional":
        rec = {"nms": _record(lambda: nms(boxes, scores, case["iou"], **rest))}
    elif keyword == "both":
        rec = {"nms": _record(lambda: nms(boxes, scores, iou_thr=case["iou"], iou_threshold=case["iou"], **rest))}
    else:
        rec = {"nms": _record(lambda: nms(boxes, scores, **{keyword: case["iou"]}, **rest))}
    if case["i"] % 3 == 0 and case["form"] == "tensor":
        key = "iou_thr" if keyword == "iou_thr" else "iou_threshold"  # batched_nms passes it on to nms
        cfg = {"type": "nms", key: case["iou"], "offset": case["offset"],
               "score_threshold": case["score_threshold"], "max_num": case["max_num"]}
        idxs = case["idxs"].to(device)
        rec["batched_nms"] = _record(lambda: batched_nms(boxes, scores, idxs, cfg, case["class_agnostic"]))
    return rec


def check(device: str, cases: int, seed: int) -> dict:
    import mmcv
    import torch

    records, summary = [], {"kept": 0, "empty_inputs": 0, "errors": 0, "warned": 0, "score_threshold": 0,
                            "batched_nms": 0, "numpy": 0, "ties": 0}
    for i in range(cases):
        case = draw(i, seed)
        rec = run_case(case, device)
        records.append(digest([rec]))
        first = rec["nms"]
        summary["kept"] += first["outputs"][1]["shape"][0] if first["outputs"] else 0
        summary["empty_inputs"] += case["n"] == 0
        summary["errors"] += first["error"] is not None
        summary["warned"] += bool(first["warnings"])
        summary["score_threshold"] += case["score_threshold"] > 0
        summary["batched_nms"] += "batched_nms" in rec
        summary["numpy"] += case["form"] == "numpy"
        summary["ties"] += case["scoring"] != "uniform" or case["layout"] == "identical"
    return {"what": "mmcv.ops.nms (and batched_nms on every third case) on random cases: a digest per case",
            "device": device, "seed": seed, "cases": cases, "torch": torch.__version__, "mmcv": mmcv.__version__,
            "digest": digest(records), "case_digests": records, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    return case_digests.main("nms_cases", __doc__.splitlines()[0], check, cases=1000, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
