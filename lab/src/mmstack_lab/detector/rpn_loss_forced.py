"""AnchorHead's losses with a batched path forced on and off in one interpreter (issue 43 item 1): how
close proposed mmdet patch 0010's every-level-at-once losses come to the per-level ones where they
cannot be bit for bit, the CPU.

    python -m mmstack_lab.detector.rpn_loss_forced --cases 40 --json

0010 takes its batched path on CUDA only (`AnchorHead._losses_batched`): the CPU's vectorized loops
leave a tensor's last elements to scalar code, and sigmoid's scalar and vector code differ in the
last bit, so a gradient through it depends on where an element lies. This runs the cases of
mmstack_lab.detector.rpn_target_cases (drawn the same, on the CPU) through `loss_by_feat` with
backward twice, `_losses_batched` forced to False (the per-level code) and to the head's own
condition without the device (the batched code), and counts per case whether the losses, the box
regression's gradients and the scores' gradients are the same bit for bit (signed zeros included),
with the largest relative difference of the scores' gradients. Cases whose head the batched path
does not take (other losses, decoded boxes) are counted apart. The mmdet it imports must carry 0010.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from mmstack_lab.ops.patch_ab import diff_sha256


def _same(a, b) -> bool:
    import torch

    return all(torch.equal(x, y) and torch.equal(torch.signbit(x), torch.signbit(y)) for x, y in zip(a, b, strict=True))


def _run(head, case: dict, batched: bool):
    from mmdet.models.dense_heads.anchor_head import AnchorHead

    from mmstack_lab.detector import rpn_target_cases as rtc

    head._losses_batched = (lambda cls_scores: AnchorHead._losses_batched(head, [_OnCuda()])) if batched \
        else (lambda cls_scores: False)
    losses, cls, reg = rtc.loss_with_backward(head, case, "cpu", rtc.loss_inputs(case, "cpu"))
    return [x for v in losses.values() for x in v], [t.grad for t in cls], [t.grad for t in reg]


class _OnCuda:
    """What `_losses_batched` asks of the first score map, saying CUDA (the rest of its condition stays)."""

    is_cuda = True


def check(cases: int, seed: int) -> dict:
    import mmdet
    import torch
    from mmdet.models.dense_heads.anchor_head import AnchorHead

    from mmstack_lab.detector import rpn_target_cases as rtc

    if not hasattr(AnchorHead, "_losses_batched"):
        raise SystemExit("rpn_loss_forced: this mmdet has no AnchorHead._losses_batched (patch 0010): nothing to force")
    out = {"cases": 0, "errors": 0, "batched": 0, "not_batched": 0, "losses_same": 0, "reg_grads_same": 0,
           "cls_grads_same": 0, "cls_grad_max_rel": 0.0}
    for i in range(cases):
        case = rtc.draw(i, seed, "cpu")
        head, _ = rtc.head_of(case["setting"], "cpu")
        if not AnchorHead._losses_batched(head, [_OnCuda()]):
            out["not_batched"] += 1
            continue
        try:
            with rtc._budget(case["setting"]):
                ref, got = _run(head, case, False), _run(head, case, True)
        except Exception:  # noqa: BLE001 - the cases that raise do so on both paths (rpn_target_cases counts them)
            out["errors"] += 1
            continue
        out["cases"] += 1
        out["batched"] += 1
        out["losses_same"] += _same(ref[0], got[0])
        out["reg_grads_same"] += _same(ref[2], got[2])
        out["cls_grads_same"] += _same(ref[1], got[1])
        for x, y in zip(ref[1], got[1], strict=True):
            if x.numel():
                rel = ((x - y).abs() / x.abs().clamp_min(1e-30)).max().item()
                out["cls_grad_max_rel"] = max(out["cls_grad_max_rel"], rel)
    return {"what": "AnchorHead.loss_by_feat with its batched path (mmdet patch 0010) forced on the CPU against the "
                    "per-level code, over rpn_target_cases' cases", "cases_drawn": cases, "seed": seed,
            "torch": torch.__version__, "mmdet": mmdet.__version__, "threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "summary": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rpn_loss_forced", description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--patch", help="the 0010 file the imported mmdet was patched with (its sha256 goes in the result)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.cases < 1:
        print(f"rpn_loss_forced: --cases {args.cases}: give at least 1", file=sys.stderr)
        return 2
    doc = check(args.cases, args.seed)
    if args.patch:
        doc["patch"] = Path(args.patch).name
        doc["patch_sha256"] = hashlib.sha256(Path(args.patch).read_bytes()).hexdigest()
        doc["patch_diff_sha256"] = diff_sha256(Path(args.patch).read_text())
    print(json.dumps(doc) if args.json else json.dumps(doc["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
