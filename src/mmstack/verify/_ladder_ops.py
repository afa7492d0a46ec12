"""L4's checks: every op that `mmcv.ops` exports runs once on small inputs and is compared ("complete");
a mode of levels.L4_SETS runs a named subset of them ("quick").

Loaded by path by `_ladder_child.py` (stdlib + torch + mmcv, torchvision when it imports; never
mmstack). Each CHECKS entry covers one op and the names that export it (functional and module
forms). A check runs the op on the device under test and compares it with, in order of strength:

    cpu-kernel    mmcv's own CPU kernel on the same random input (only when running on CUDA)
    torchvision   torchvision's op (only when torchvision imported)
    torch         a reference written here in plain torch (or mmcv's pure-torch reference path)
    known-values  values derived by hand (geometry, linear inputs whose bilinear samples are exact)

An op that runs but has none of these is "run-only" and never counts as a passed comparison.
Ops with only a CUDA kernel are "skip" on a machine without a GPU, with that reason.
"""

from __future__ import annotations

import math
import os

ATOL = 1e-5
RTOL = 1e-5
# Tests only: the op whose expected values are shifted, to prove a wrong result is caught
# through the same comparison (tests/test_verify_ladder_ops.py).
PERTURB = os.environ.get("MMSTACK_L4_PERTURB", "")
REFERENCE_ORDER = ("cpu-kernel", "torchvision", "torch", "known-values")


class Mismatch(AssertionError):
    pass


class Skip(Exception):
    pass


class Ctx:
    """What one check needs: the device, torchvision, and the comparison that records each reference."""

    def __init__(self, op: str, dev: str, tv):
        import torch

        self.torch, self.op, self.dev, self.tv = torch, op, dev, tv
        self.cuda = dev != "cpu"
        self.refs: list[str] = []
        self.max_error = 0.0
        self.ran_on: set[str] = set()
        self.gen = torch.Generator().manual_seed(sum(map(ord, op)))

    # inputs ------------------------------------------------------------------------------------
    def rand(self, *shape, lo=0.0, hi=1.0):
        return self.torch.rand(*shape, generator=self.gen) * (hi - lo) + lo

    def d(self, x):
        """To the device under test (tensors, lists/tuples of them, anything else unchanged)."""
        if isinstance(x, (list, tuple)):
            return type(x)(self.d(v) for v in x)
        return x.to(self.dev) if hasattr(x, "to") and hasattr(x, "device") else x

    def run(self, fn, *args, device: str | None = None, **kw):
        """Run on the device under test (or `device`); note where it ran."""
        dev = device or self.dev
        self.ran_on.add(dev)
        # keyword tensors too: a CPU tensor handed to a CUDA kernel (e.g. torchvision's
        # deform_conv2d `mask=`) is an illegal memory access on the GPU, not an error message
        args = tuple(a.to(dev) if hasattr(a, "device") else a for a in args)
        kw = {k: v.to(dev) if hasattr(v, "device") else v for k, v in kw.items()}
        return fn(*args, **kw)

    # comparisons -------------------------------------------------------------------------------
    def close(self, label: str, got, want, ref: str, atol: float = ATOL, rtol: float = RTOL) -> None:
        torch = self.torch
        got = torch.as_tensor(got.detach() if hasattr(got, "detach") else got).float().cpu()
        want = torch.as_tensor(want.detach() if hasattr(want, "detach") else want).float().cpu()
        if PERTURB == self.op:
            want = want + 0.5
        if tuple(got.shape) != tuple(want.shape):
            raise Mismatch(f"{label} vs {ref}: shape {tuple(got.shape)} != {tuple(want.shape)}")
        err = float((got - want).abs().max()) if got.numel() else 0.0
        if not torch.allclose(got, want, atol=atol, rtol=rtol, equal_nan=False) or math.isnan(err):
            raise Mismatch(f"{label} vs {ref}: max |diff| {err:.3g} > atol {atol:g} + rtol {rtol:g}")
        self.max_error = max(self.max_error, err)
        if ref not in self.refs:
            self.refs.append(ref)

    def exact(self, label: str, got, want, ref: str) -> None:
        self.close(label, got, want, ref, atol=0.0, rtol=0.0)

    def vs_cpu(self, label: str, fn, *args, atol: float = 1e-4, rtol: float = 1e-4, sort=None, **kw) -> None:
        """On CUDA only: the op on the device against mmcv's CPU kernel on the same input."""
        if not self.cuda:
            return
        got = _first(self.run(fn, *args, **kw))
        want = _first(self.run(fn, *args, device="cpu", **kw))
        if sort is not None:
            got, want = sort(got), sort(want)
        self.close(label, got, want, "cpu-kernel", atol=atol, rtol=rtol)


def _first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def _linear(torch, h=4, w=4):
    """Feature map 4*y + x (w=4): bilinear samples of it are exact, averages are centre values."""
    return (torch.arange(h, dtype=torch.float32).view(h, 1) * w + torch.arange(w, dtype=torch.float32)).view(1, 1, h, w)


# -- detection: RoI ops ----------------------------------------------------------------------------

ALIGN_KNOWN = [[[[2.5, 4.5], [10.5, 12.5]]]]  # 2x2 bins of [0,4]^2 on the linear map, aligned


def c_roi_align(c):
    from mmcv.ops import RoIAlign, roi_align

    torch = c.torch
    rois = torch.tensor([[0.0, 0.0, 0.0, 4.0, 4.0]])
    c.close("roi_align", c.run(roi_align, _linear(torch), rois, (2, 2), 1.0, 2, "avg", True), ALIGN_KNOWN, "known-values")
    c.close("RoIAlign", c.run(RoIAlign((2, 2), 1.0, 2, aligned=True).to(c.dev), _linear(torch), rois),
            ALIGN_KNOWN, "known-values")
    feat, boxes = c.rand(2, 3, 12, 12), _boxes(c, 6, 2)
    c.vs_cpu("roi_align", roi_align, feat, boxes, (3, 3), 1.0, 2, "avg", True)
    if c.tv:
        c.close("roi_align", c.run(roi_align, feat, boxes, (3, 3), 1.0, 2, "avg", True),
                c.run(c.tv.roi_align, feat, boxes, (3, 3), 1.0, 2, True), "torchvision", atol=1e-4)


def _boxes(c, n, batch, size=12.0):
    torch = c.torch
    xy = c.rand(n, 2, hi=size / 2)
    wh = c.rand(n, 2, lo=1.0, hi=size / 2)
    idx = torch.arange(n, dtype=torch.float32).remainder(batch).view(n, 1)
    return torch.cat([idx, xy, xy + wh], 1)


def c_roi_pool(c):
    from mmcv.ops import RoIPool, roi_pool

    torch = c.torch
    # rounded roi 0..3 is 4 px; 2x2 bins of 2 px each; the max of 4y+x is at each bin's far corner
    rois = torch.tensor([[0.0, 0.0, 0.0, 3.0, 3.0]])
    c.close("roi_pool", c.run(roi_pool, _linear(torch), rois, (2, 2), 1.0), [[[[5, 7], [13, 15]]]], "known-values")
    c.close("RoIPool", c.run(RoIPool((2, 2), 1.0).to(c.dev), _linear(torch), rois), [[[[5, 7], [13, 15]]]], "known-values")
    if c.tv:
        # integer boxes 3 or 6 px wide/high: mmcv's floor/ceil bins and torchvision's rounded ones agree
        feat = c.rand(2, 3, 12, 12)
        xy = torch.randint(0, 4, (6, 2), generator=c.gen).float()
        wh = torch.randint(1, 3, (6, 2), generator=c.gen).float() * 3
        boxes = torch.cat([torch.arange(6.0).remainder(2).view(6, 1), xy, xy + wh - 1], 1)
        c.close("roi_pool", c.run(roi_pool, feat, boxes, (3, 3), 1.0), c.run(c.tv.roi_pool, feat, boxes, (3, 3), 1.0),
                "torchvision", atol=1e-5)


def c_roi_align_rotated(c):
    from mmcv.ops import RoIAlignRotated, roi_align_rotated

    torch = c.torch
    # (batch, cx, cy, w, h, angle): angle 0 is roi_align's box; a half turn reverses both axes
    rois = torch.tensor([[0.0, 2.0, 2.0, 4.0, 4.0, 0.0], [0.0, 2.0, 2.0, 4.0, 4.0, math.pi]])
    want = [[[[2.5, 4.5], [10.5, 12.5]]], [[[12.5, 10.5], [4.5, 2.5]]]]
    c.close("roi_align_rotated", c.run(roi_align_rotated, _linear(torch), rois, (2, 2), 1.0, 2, True), want,
            "known-values", atol=1e-4)
    c.close("RoIAlignRotated", c.run(RoIAlignRotated((2, 2), 1.0, 2, aligned=True).to(c.dev), _linear(torch), rois),
            want, "known-values", atol=1e-4)
    feat = c.rand(2, 3, 12, 12)
    r = torch.cat([torch.tensor([[0.0], [1.0], [0.0], [1.0]]), c.rand(4, 2, lo=3, hi=9), c.rand(4, 2, lo=1, hi=5),
                   c.rand(4, 1, hi=math.pi)], 1)
    c.vs_cpu("roi_align_rotated", roi_align_rotated, feat, r, (3, 3), 1.0, 2, True)


def c_riroi_align_rotated(c):
    from mmcv.ops import RiRoIAlignRotated, riroi_align_rotated

    torch = c.torch
    feat = c.rand(1, 8, 10, 10)
    rois = torch.tensor([[0.0, 5.0, 5.0, 4.0, 4.0, 0.3]])
    out = c.run(riroi_align_rotated, feat, rois, (2, 2), 1.0, 2, 4, False)
    out2 = c.run(RiRoIAlignRotated((2, 2), 1.0, 2, 4, False).to(c.dev), feat, rois)
    _finite(out, out2)


def c_deform_roi_pool(c):
    from mmcv.ops import DeformRoIPool, DeformRoIPoolPack, ModulatedDeformRoIPoolPack, deform_roi_pool

    torch = c.torch
    rois = torch.tensor([[0.0, 0.0, 0.0, 4.0, 4.0]])
    # no offset: aligned RoIAlign's bins (the kernel starts the roi at x1 * scale - 0.5)
    c.close("deform_roi_pool", c.run(deform_roi_pool, _linear(torch), rois, None, (2, 2), 1.0, 2, 0.1), ALIGN_KNOWN,
            "known-values", atol=1e-4)
    c.close("DeformRoIPool", c.run(DeformRoIPool((2, 2), 1.0, 2).to(c.dev), _linear(torch), rois), ALIGN_KNOWN,
            "known-values", atol=1e-4)
    feat, boxes = c.rand(1, 4, 10, 10), _boxes(c, 3, 1, 10.0)
    # the offset branch of the packs is zero-initialised: exactly the plain pool (modulated: times sigmoid(0))
    plain = c.run(DeformRoIPool((2, 2), 1.0, 2).to(c.dev), feat, boxes)
    c.close("DeformRoIPoolPack", c.run(DeformRoIPoolPack((2, 2), 4, 16, 1.0, 2).to(c.dev), feat, boxes), plain,
            "known-values", atol=1e-4)
    c.close("ModulatedDeformRoIPoolPack", c.run(ModulatedDeformRoIPoolPack((2, 2), 4, 16, 1.0, 2).to(c.dev), feat, boxes),
            plain * 0.5, "known-values", atol=1e-4)


def c_prroi_pool(c):
    from mmcv.ops import PrRoIPool, prroi_pool

    torch = c.torch
    # exact integral of the (linear) bilinear surface over each 1x1 bin = its centre value
    rois = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0]])
    want = [[[[2.5, 3.5], [6.5, 7.5]]]]
    c.close("prroi_pool", c.run(prroi_pool, _linear(torch), rois, (2, 2), 1.0), want, "known-values", atol=1e-4)
    c.close("PrRoIPool", c.run(PrRoIPool((2, 2), 1.0).to(c.dev), _linear(torch), rois), want, "known-values", atol=1e-4)


def c_simple_roi_align(c):
    from mmcv.ops import SimpleRoIAlign, point_sample, rel_roi_point_to_rel_img_point

    torch = c.torch
    img = _linear(torch)
    rois = torch.tensor([[0.0, 0.0, 0.0, 4.0, 4.0]])
    c.close("SimpleRoIAlign", c.run(SimpleRoIAlign((2, 2), 1.0, aligned=True).to(c.dev), img, rois), ALIGN_KNOWN,
            "known-values", atol=1e-4)
    # relative point (0.375, 0.625) is pixel (1.0, 2.0) with align_corners=False: 4*2 + 1
    pts = torch.tensor([[[0.375, 0.625], [0.625, 0.375]]])
    c.close("point_sample", c.run(point_sample, img, pts, align_corners=False), [[[9.0, 6.0]]], "known-values", atol=1e-4)
    rel = c.run(rel_roi_point_to_rel_img_point, torch.tensor([[0.0, 1.0, 1.0, 3.0, 3.0]]), torch.tensor([[[0.5, 0.5]]]),
                img, 1.0)
    c.close("rel_roi_point_to_rel_img_point", rel, [[[0.5, 0.5]]], "known-values")


def c_bezier_align(c):
    from mmcv.ops import BezierAlign, bezier_align

    torch = c.torch
    feat = c.rand(1, 3, 12, 12)
    # batch index then 8 control points of the top and bottom curves
    beziers = torch.tensor([[0.0, 1, 2, 4, 2, 7, 2, 10, 3, 10, 9, 7, 8, 4, 8, 1, 9]], dtype=torch.float32)
    out = c.run(bezier_align, feat, beziers, (2, 4), 1.0, 2, True)
    _finite(out, c.run(BezierAlign((2, 4), 1.0, 2, True).to(c.dev), feat, beziers))
    c.vs_cpu("bezier_align", bezier_align, feat, beziers, (2, 4), 1.0, 2, True)


def c_border_align(c):
    from mmcv.ops import BorderAlign, border_align

    torch = c.torch
    feat = c.rand(1, 4 * 2, 8, 8)
    boxes = torch.tensor([[[1.0, 1.0, 5.0, 6.0], [2.0, 0.5, 7.0, 4.0]]])  # (N, H*W boxes) for H*W = 2? keep small
    boxes = boxes.new_zeros(1, 64, 4) + boxes[:, :1]
    _finite(c.run(border_align, feat, boxes, 3), c.run(BorderAlign(3).to(c.dev), feat, boxes))


# -- detection: NMS and IoU ----------------------------------------------------------------------


def c_nms(c):
    from mmcv.ops import nms

    torch = c.torch
    # IoU(box0, box3) = 100/105, IoU(box1, box3) = 85.5/119.5: both go; box2 is apart
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10.5]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7, 0.95])
    c.exact("nms", c.run(nms, boxes, scores, 0.5)[1].cpu(), [3, 2], "known-values")
    xy = c.rand(100, 2, hi=100)
    many = torch.cat([xy, xy + c.rand(100, 2, lo=1, hi=30)], 1)
    sc = c.rand(100)
    c.vs_cpu("nms", lambda b, s: nms(b, s, 0.5)[1], many, sc, sort=lambda k: k.sort()[0])
    if c.tv:
        c.exact("nms", c.run(nms, many, sc, 0.5)[1].cpu().sort()[0], c.run(c.tv.nms, many, sc, 0.5).cpu().sort()[0],
                "torchvision")


def c_batched_nms(c):
    from mmcv.ops import batched_nms

    torch = c.torch
    # two identical boxes of different classes both survive; within a class the lower score goes
    boxes = torch.tensor([[0, 0, 10, 10], [0, 0, 10, 10], [1, 1, 10, 10]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7])
    idxs = torch.tensor([0, 1, 0])
    _dets, keep = c.run(batched_nms, boxes, scores, idxs, {"iou_threshold": 0.5})
    c.exact("batched_nms", keep.cpu(), [0, 1], "known-values")


def c_soft_nms(c):
    from mmcv.ops import soft_nms

    torch = c.torch
    # linear soft-NMS: a box overlapping the top one by IoU 81/119 (> 0.3) keeps score 0.8 * (1 - 81/119)
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7])
    dets, keep = soft_nms(boxes, scores, 0.3, 0.5, 1e-3, "linear")
    c.ran_on.add("cpu")
    c.exact("soft_nms", keep, [0, 2, 1], "known-values")
    c.close("soft_nms", dets[:, 4], [0.9, 0.7, 0.8 * (1 - 81 / 119)], "known-values")


def c_nms_match(c):
    from mmcv.ops import nms_match

    torch = c.torch
    dets = torch.tensor([[0, 0, 10, 10, 0.9], [1, 1, 11, 11, 0.8], [20, 20, 30, 30, 0.7]], dtype=torch.float32)
    groups = c.run(nms_match, dets, 0.5)
    c.exact("nms_match", [*sorted(groups[0].tolist()), -1, *sorted(groups[1].tolist())], [0, 1, -1, 2],
            "known-values")


def _squares(torch):
    """A 2x2 square against: shifted by (1, 0.5) (IoU 1.5/6.5), and turned 45 degrees (IoU 1/sqrt 2)."""
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0, 0.0]])
    b = torch.tensor([[1.0, 0.5, 2.0, 2.0, 0.0], [0.0, 0.0, 2.0, 2.0, math.pi / 4]])
    return a, b, [[1.5 / 6.5, 1 / math.sqrt(2)]]


def c_box_iou_rotated(c):
    from mmcv.ops import box_iou_rotated

    torch = c.torch
    a, b, want = _squares(torch)
    c.close("box_iou_rotated", c.run(box_iou_rotated, a, b), want, "known-values", atol=1e-5)
    r = torch.cat([c.rand(20, 2, hi=20), c.rand(20, 2, lo=1, hi=8), c.rand(20, 1, hi=math.pi)], 1)
    c.vs_cpu("box_iou_rotated", box_iou_rotated, r, r)


def _quad(torch, box):
    """(cx, cy, w, h, a) -> the 8 corner coordinates."""
    cx, cy, w, h, a = box
    co, si = math.cos(a), math.sin(a)
    pts = []
    for dx, dy in ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2)):
        pts += [cx + dx * co - dy * si, cy + dx * si + dy * co]
    return pts


def c_box_iou_quadri(c):
    from mmcv.ops import box_iou_quadri

    torch = c.torch
    a, b, want = _squares(torch)
    qa = torch.tensor([_quad(torch, a[0].tolist())])
    qb = torch.tensor([_quad(torch, x.tolist()) for x in b])
    c.close("box_iou_quadri", c.run(box_iou_quadri, qa, qb), want, "known-values", atol=1e-5)
    c.vs_cpu("box_iou_quadri", box_iou_quadri, qb, qb)


def c_nms_rotated(c):
    from mmcv.ops import nms_rotated

    torch = c.torch
    # box 1 overlaps box 0 with IoU 1/sqrt 2 (> 0.5): suppressed; box 2 is apart
    dets = torch.tensor([[0.0, 0.0, 2.0, 2.0, 0.0], [0.0, 0.0, 2.0, 2.0, math.pi / 4], [10.0, 10.0, 2.0, 2.0, 0.3]])
    scores = torch.tensor([0.9, 0.95, 0.5])
    _, keep = c.run(nms_rotated, dets, scores, 0.5)
    c.exact("nms_rotated", keep.cpu(), [1, 2], "known-values")
    r = torch.cat([c.rand(40, 2, hi=20), c.rand(40, 2, lo=1, hi=8), c.rand(40, 1, hi=math.pi)], 1)
    sc = c.rand(40)
    c.vs_cpu("nms_rotated", lambda d, s: nms_rotated(d, s, 0.3)[1], r, sc, sort=lambda k: k.sort()[0])


def c_nms_quadri(c):
    from mmcv.ops import nms_quadri

    torch = c.torch
    boxes = [[0.0, 0.0, 2.0, 2.0, 0.0], [0.0, 0.0, 2.0, 2.0, math.pi / 4], [10.0, 10.0, 2.0, 2.0, 0.3]]
    dets = torch.tensor([_quad(torch, b) for b in boxes])
    scores = torch.tensor([0.9, 0.95, 0.5])
    _, keep = c.run(nms_quadri, dets, scores, 0.5)
    c.exact("nms_quadri", keep.cpu(), [1, 2], "known-values")
    c.vs_cpu("nms_quadri", lambda d, s: nms_quadri(d, s, 0.5)[1], dets, scores, sort=lambda k: k.sort()[0])


def c_bbox_overlaps(c):
    from mmcv.ops import bbox_overlaps

    torch = c.torch
    a = torch.cat([c.rand(7, 2, hi=10), c.rand(7, 2, hi=10) + 10], 1)
    b = torch.cat([c.rand(5, 2, hi=10), c.rand(5, 2, hi=10) + 10], 1)
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    want = inter / (area(a)[:, None] + area(b)[None, :] - inter)
    c.close("bbox_overlaps", c.run(bbox_overlaps, a, b, "iou", False, 0), want, "torch", atol=1e-5)
    c.vs_cpu("bbox_overlaps", bbox_overlaps, a, b)


def c_iou3d(c):
    from mmcv.ops import boxes_iou3d, boxes_overlap_bev, nms3d, nms3d_normal

    torch = c.torch
    # (x, y, z, dx, dy, dz, yaw): a 2-cube, the same shifted 1 in x, the same turned 45 degrees
    a = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0]])
    b = torch.tensor([[1.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0], [0.0, 0.0, 0.0, 2.0, 2.0, 2.0, math.pi / 4]])
    octagon = 8 * math.sqrt(2) - 8
    c.close("boxes_overlap_bev", c.run(boxes_overlap_bev, a, b), [[2.0, octagon]], "known-values", atol=1e-4)
    c.close("boxes_iou3d", c.run(boxes_iou3d, a, b), [[1 / 3, 1 / math.sqrt(2)]], "known-values", atol=1e-4)
    scores = torch.tensor([0.9, 0.8, 0.7])
    three = torch.cat([a, b[1:], torch.tensor([[9.0, 9.0, 0.0, 2.0, 2.0, 2.0, 0.0]])])
    c.exact("nms3d", c.run(nms3d, three, scores, 0.5).cpu(), [0, 2], "known-values")
    c.exact("nms3d_normal", c.run(nms3d_normal, three, scores, 0.5).cpu(), [0, 2], "known-values")


def c_iou_bev(c):
    from mmcv.ops import boxes_iou_bev, nms_bev, nms_normal_bev

    torch = c.torch
    bev = torch.tensor([[-1.0, -1.0, 1.0, 1.0, 0.0], [0.0, -1.0, 2.0, 1.0, 0.0]])  # (x1, y1, x2, y2, r)
    c.close("boxes_iou_bev", c.run(boxes_iou_bev, bev[:1], bev[1:]), [[1 / 3]], "known-values", atol=1e-5)
    scores = torch.tensor([0.9, 0.8, 0.7])
    bev3 = torch.tensor([[-1.0, -1.0, 1.0, 1.0, 0.0], [-1.0, -1.0, 1.0, 1.2, 0.0], [5.0, 5.0, 6.0, 6.0, 0.0]])
    c.exact("nms_bev", c.run(nms_bev, bev3, scores, 0.5).cpu(), [0, 2], "known-values")
    c.exact("nms_normal_bev", c.run(nms_normal_bev, bev3, scores, 0.5).cpu(), [0, 2], "known-values")


def c_diff_iou_rotated(c):
    from mmcv.ops import diff_iou_rotated_2d, diff_iou_rotated_3d

    torch = c.torch
    a, b, want = _squares(torch)
    c.close("diff_iou_rotated_2d", c.run(diff_iou_rotated_2d, a.expand(2, 5)[None].contiguous(), b[None]), want,
            "known-values", atol=1e-4)
    a3 = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0]]).expand(2, 7)
    b3 = torch.tensor([[1.0, 0.5, 0.0, 2.0, 2.0, 2.0, 0.0], [0.0, 0.0, 0.0, 2.0, 2.0, 2.0, math.pi / 4]])
    c.close("diff_iou_rotated_3d", c.run(diff_iou_rotated_3d, a3[None].contiguous(), b3[None]), want, "known-values",
            atol=1e-4)


def c_convex_iou(c):
    from mmcv.ops import convex_giou, convex_iou

    torch = c.torch
    # 9 points whose hull is the square [0,2]^2 (its corners, 5 points inside) against it and a shifted copy
    pts = torch.tensor([[0, 0, 2, 0, 2, 2, 0, 2, 1, 1, 0.5, 0.5, 1.5, 0.5, 0.5, 1.5, 1.5, 1.5]], dtype=torch.float32)
    polys = torch.tensor([[0, 0, 2, 0, 2, 2, 0, 2], [1, 0, 3, 0, 3, 2, 1, 2]], dtype=torch.float32)
    c.close("convex_iou", c.run(convex_iou, pts, polys), [[1.0, 1 / 3]], "known-values", atol=1e-4)
    giou, _ = c.run(convex_giou, pts, polys[:1])
    c.close("convex_giou", giou, [1.0], "known-values", atol=1e-4)


def c_min_area_polygons(c):
    from mmcv.ops import min_area_polygons

    torch = c.torch
    # points on and inside the rectangle [0,2]x[0,1]: its own corners are the smallest enclosing box
    pts = torch.tensor([[0, 0, 2, 0, 2, 1, 0, 1, 1, 0.5, 0.5, 0.5, 1.5, 0.5, 1, 0.2, 1, 0.8]], dtype=torch.float32)
    out = c.run(min_area_polygons, pts).cpu().view(4, 2).tolist()
    out = sorted(out, key=lambda p: (round(p[0], 3), round(p[1], 3)))  # corner order is the kernel's
    c.close("min_area_polygons", out, [[0, 0], [0, 1], [2, 0], [2, 1]], "known-values", atol=1e-4)


def c_points_in_polygons(c):
    from mmcv.ops import points_in_polygons

    torch = c.torch
    pts = torch.tensor([[0.5, 0.5], [1.5, 0.5], [0.2, 0.9]])
    polys = torch.tensor([[0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0]])
    c.exact("points_in_polygons", c.run(points_in_polygons, pts, polys).cpu(), [[1.0], [0.0], [1.0]], "known-values")


# -- convolutions -----------------------------------------------------------------------------------


def c_deform_conv2d(c):
    from mmcv.ops import DeformConv2d, DeformConv2dPack, deform_conv2d

    torch = c.torch
    x = torch.arange(9, dtype=torch.float32).reshape(1, 1, 3, 3)
    w = torch.ones(1, 1, 2, 2)
    zero = torch.zeros(1, 8, 2, 2)
    c.close("deform_conv2d", c.run(deform_conv2d, x, zero, w), [[[[8, 12], [20, 24]]]], "known-values")
    shift = zero.clone()
    shift[:, 1::2] = 1.0  # (dy, dx) per tap: +1 px in x, samples at x == 3 read 0
    c.close("deform_conv2d", c.run(deform_conv2d, x, shift, w), [[[[12, 7], [24, 13]]]], "known-values")
    inp, weight = c.rand(2, 4, 9, 9), c.rand(6, 4, 3, 3, lo=-0.5, hi=0.5)
    offset = c.rand(2, 18, 7, 7, lo=-2, hi=2)
    c.vs_cpu("deform_conv2d", deform_conv2d, inp, offset, weight)
    if c.tv:
        c.close("deform_conv2d", c.run(deform_conv2d, inp, offset, weight),
                c.run(c.tv.deform_conv2d, inp, offset, weight), "torchvision", atol=1e-4)
    mod = DeformConv2d(4, 6, 3, bias=False).to(c.dev)
    with torch.no_grad():
        mod.weight.copy_(weight)
    c.close("DeformConv2d", c.run(mod, inp, offset), c.run(deform_conv2d, inp, offset, weight), "known-values", atol=1e-5)
    # the pack's offset conv starts at zero: a plain convolution
    pack = DeformConv2dPack(4, 6, 3, padding=1).to(c.dev)
    c.close("DeformConv2dPack", c.run(pack, inp),
            torch.nn.functional.conv2d(inp.to(c.dev), pack.weight, None, padding=1), "torch", atol=1e-4)


def c_modulated_deform_conv2d(c):
    from mmcv.ops import ModulatedDeformConv2d, ModulatedDeformConv2dPack, modulated_deform_conv2d

    torch = c.torch
    inp, weight = c.rand(2, 4, 9, 9), c.rand(6, 4, 3, 3, lo=-0.5, hi=0.5)
    offset, mask = c.rand(2, 18, 7, 7, lo=-2, hi=2), c.rand(2, 9, 7, 7)
    bias = torch.zeros(6)
    # zero offset, mask 1: a plain convolution
    c.close("modulated_deform_conv2d", c.run(modulated_deform_conv2d, inp, offset * 0, mask * 0 + 1, weight, bias),
            torch.nn.functional.conv2d(inp, weight), "torch", atol=1e-4)
    c.vs_cpu("modulated_deform_conv2d", modulated_deform_conv2d, inp, offset, mask, weight, bias)
    if c.tv:
        c.close("modulated_deform_conv2d", c.run(modulated_deform_conv2d, inp, offset, mask, weight, bias),
                c.run(c.tv.deform_conv2d, inp, offset, weight, mask=mask), "torchvision", atol=1e-4)
    mod = ModulatedDeformConv2d(4, 6, 3, bias=False).to(c.dev)
    with torch.no_grad():
        mod.weight.copy_(weight)
    c.close("ModulatedDeformConv2d", c.run(mod, inp, offset, mask),
            c.run(modulated_deform_conv2d, inp, offset, mask, weight, bias), "known-values", atol=1e-5)
    # the pack's offset/mask conv starts at zero: mask sigmoid(0) = 0.5 times a plain convolution
    pack = ModulatedDeformConv2dPack(4, 6, 3, padding=1).to(c.dev)
    want = 0.5 * torch.nn.functional.conv2d(inp.to(c.dev), pack.weight, None, padding=1) + pack.bias.view(1, -1, 1, 1)
    c.close("ModulatedDeformConv2dPack", c.run(pack, inp), want, "torch", atol=1e-4)


def c_sa_conv2d(c):
    from mmcv.ops import SAConv2d

    torch = c.torch
    torch.manual_seed(0)
    mod = SAConv2d(4, 4, 3, padding=1, use_deform=True).eval()
    x = c.rand(1, 4, 8, 8)
    out = c.run(mod.to(c.dev), x)
    if c.cuda:
        c.close("SAConv2d", out, c.run(mod.cpu(), x, device="cpu"), "cpu-kernel", atol=1e-4)
    _finite(out)
    # its offset convs start at zero: the deformable form equals the plain (torch conv) form
    plain = SAConv2d(4, 4, 3, padding=1, use_deform=False).eval()
    plain.load_state_dict({k: v for k, v in mod.state_dict().items() if not k.startswith("offset_")})
    c.close("SAConv2d", c.run(mod.to(c.dev), x), c.run(plain.to(c.dev), x), "torch", atol=1e-4)


def c_masked_conv2d(c):
    from mmcv.ops import MaskedConv2d, masked_conv2d

    torch = c.torch
    x, w, b = c.rand(1, 3, 6, 6), c.rand(2, 3, 3, 3, lo=-0.5, hi=0.5), c.rand(2)
    mask = (c.rand(1, 6, 6) > 0.5).float()
    dense = torch.nn.functional.conv2d(x, w, b, padding=1)
    m = mask.bool().expand(2, 6, 6)[None]
    got = c.run(masked_conv2d, x, mask, w, b, 1).cpu()
    c.close("masked_conv2d", got[m], dense[m], "torch", atol=1e-4)
    mod = MaskedConv2d(3, 2, 3, padding=1).to(c.dev)
    with torch.no_grad():
        mod.weight.copy_(w)
        mod.bias.copy_(b)
    c.close("MaskedConv2d", c.run(mod, x, mask).cpu()[m], dense[m], "torch", atol=1e-4)


def c_deprecated_wrappers(c):
    from mmcv.ops import Conv2d, ConvTranspose2d, Linear, MaxPool2d

    torch = c.torch
    f = torch.nn.functional
    x = c.rand(2, 3, 6, 6)
    conv = Conv2d(3, 4, 3, padding=1).to(c.dev)
    c.close("Conv2d", c.run(conv, x), f.conv2d(x.to(c.dev), conv.weight, conv.bias, padding=1), "torch")
    tconv = ConvTranspose2d(3, 4, 3, stride=2).to(c.dev)
    c.close("ConvTranspose2d", c.run(tconv, x), f.conv_transpose2d(x.to(c.dev), tconv.weight, tconv.bias, stride=2), "torch")
    lin = Linear(6, 5).to(c.dev)
    c.close("Linear", c.run(lin, x), f.linear(x.to(c.dev), lin.weight, lin.bias), "torch")
    c.close("MaxPool2d", c.run(MaxPool2d(2), x), f.max_pool2d(x, 2), "torch")


def c_conv2d_gradfix(c):
    from mmcv.ops import conv2d, conv_transpose2d

    torch = c.torch
    f = torch.nn.functional
    x, w, b = c.rand(2, 3, 6, 6), c.rand(4, 3, 3, 3), c.rand(4)
    c.close("conv2d", c.run(conv2d, x, w, b, padding=1), f.conv2d(x, w, b, padding=1), "torch", atol=1e-4)
    wt = c.rand(3, 4, 3, 3)
    c.close("conv_transpose2d", c.run(conv_transpose2d, x, wt, None, stride=2),
            f.conv_transpose2d(x, wt, None, stride=2), "torch", atol=1e-4)


def c_sparse_conv(c):
    from mmcv.ops import (
        SparseConv2d,
        SparseConv3d,
        SparseConvTensor,
        SparseConvTranspose2d,
        SparseConvTranspose3d,
        SparseInverseConv2d,
        SparseInverseConv3d,
        SparseMaxPool2d,
        SparseMaxPool3d,
        SparseSequential,
        SubMConv2d,
        SubMConv3d,
    )

    torch = c.torch
    f = torch.nn.functional
    for dims, subm, conv, pool in ((3, SubMConv3d, SparseConv3d, SparseMaxPool3d), (2, SubMConv2d, SparseConv2d, SparseMaxPool2d)):
        shape = [6] * dims
        dense_mask = c.rand(1, *shape) > 0.7
        coords = dense_mask[0].nonzero().int()
        indices = torch.cat([torch.zeros(len(coords), 1, dtype=torch.int32), coords], 1)
        feats = c.rand(len(coords), 3, lo=0.1, hi=1.0)
        dense = torch.zeros(1, 3, *shape)
        dense[(indices[:, 0].long(), slice(None), *indices[:, 1:].long().t())] = feats
        sp = lambda feats=feats, indices=indices, shape=shape: SparseConvTensor(  # noqa: E731
            feats.to(c.dev), indices.to(c.dev), shape, 1)
        # a kernel equal at every tap: each output is (sum of its active neighbours) @ W, flip-free
        W = c.rand(3, 2, lo=-0.5, hi=0.5)
        conv_d = getattr(f, f"conv{dims}d")
        kernel = W.t().reshape(2, 3, *[1] * dims).expand(2, 3, *[3] * dims)
        for cls, is_subm in ((subm, True), (conv, False)):
            mod = cls(3, 2, 3, padding=1, bias=False, indice_key=f"k{dims}{is_subm}").to(c.dev)
            with torch.no_grad():
                mod.weight.copy_(W.expand(*[3] * dims, 3, 2))
            want = conv_d(dense, kernel, padding=1)
            if is_subm:
                want = want * dense_mask[:, None]
            c.close(cls.__name__, SparseSequential(mod)(sp()).dense(), want, "torch", atol=1e-4)
        pooled = pool(2, 2)(sp()).dense()
        c.close(pool.__name__, pooled, getattr(f, f"max_pool{dims}d")(dense, 2, 2), "torch", atol=1e-5)
    for cls in (SparseConvTranspose2d, SparseInverseConv2d, SparseConvTranspose3d, SparseInverseConv3d):
        dims = 3 if cls.__name__.endswith("3d") else 2
        shape = [6] * dims
        coords = (c.rand(*shape) > 0.7).nonzero().int()
        indices = torch.cat([torch.zeros(len(coords), 1, dtype=torch.int32), coords], 1)
        x = SparseConvTensor(c.rand(len(coords), 3).to(c.dev), indices.to(c.dev), shape, 1)
        if cls in (SparseInverseConv2d, SparseInverseConv3d):
            fwd = (SparseConv2d if dims == 2 else SparseConv3d)(3, 3, 3, indice_key=f"inv{dims}").to(c.dev)
            y = cls(3, 2, 3, indice_key=f"inv{dims}").to(c.dev)(fwd(x))
        else:
            y = cls(3, 2, 3).to(c.dev)(x)
        _finite(y.features)


def c_scatter_nd(c):
    from mmcv.ops import scatter_nd

    torch = c.torch
    idx = torch.tensor([[0, 1], [2, 3]])
    c.exact("scatter_nd", c.run(scatter_nd, idx, torch.tensor([5.0, 7.0]), [3, 4]),
            [[0, 5, 0, 0], [0, 0, 0, 0], [0, 0, 0, 7]], "known-values")


# -- segmentation, attention, pooling ----------------------------------------------------------------


def c_carafe(c):
    from mmcv.ops import CARAFE, CARAFENaive, CARAFEPack, carafe, carafe_naive

    torch = c.torch
    n, ch, h, w, k, g, s = 1, 4, 5, 5, 3, 2, 2
    feat = c.rand(n, ch, h, w)
    masks = torch.softmax(c.rand(n, g * k * k, h * s, w * s), 1)
    # reference: each output pixel is its source pixel's k x k neighbourhood weighted by its mask
    cols = torch.nn.functional.unfold(feat, k, padding=k // 2).view(n, g, ch // g, k * k, h, w)
    cols = cols.repeat_interleave(s, 4).repeat_interleave(s, 5)
    want = (cols * masks.view(n, g, 1, k * k, h * s, w * s)).sum(3).view(n, ch, h * s, w * s)
    c.close("carafe_naive", c.run(carafe_naive, feat, masks, k, g, s), want, "torch", atol=1e-4)
    c.close("carafe", c.run(carafe, feat, masks, k, g, s), want, "torch", atol=1e-4)
    c.close("CARAFENaive", c.run(CARAFENaive(k, g, s), feat, masks), want, "torch", atol=1e-4)
    c.close("CARAFE", c.run(CARAFE(k, g, s), feat, masks), want, "torch", atol=1e-4)
    _finite(c.run(CARAFEPack(ch, s).to(c.dev), feat))


def c_cc_attention(c):
    from mmcv.ops import CrissCrossAttention

    torch = c.torch
    torch.manual_seed(0)
    mod = CrissCrossAttention(16)  # query/key convs have in_channels // 8 channels
    with torch.no_grad():
        mod.gamma.scale.fill_(1.0)  # a Scale module, 0 at init (which would make the output x itself)
    x = c.rand(1, 16, 3, 4)
    got = c.run(mod.to(c.dev), x)
    mod = mod.cpu()
    q, k, v = mod.query_conv(x)[0], mod.key_conv(x)[0], mod.value_conv(x)[0]
    want = torch.empty_like(x[0])
    H, W = x.shape[2:]
    for i in range(H):  # attention over the column (without the pixel itself) and the row
        for j in range(W):
            where = [(a, j) for a in range(H) if a != i] + [(i, b) for b in range(W)]
            e = torch.stack([(q[:, i, j] * k[:, a, b]).sum() for a, b in where])
            att = torch.softmax(e, 0)
            want[:, i, j] = sum(att[t] * v[:, a, b] for t, (a, b) in enumerate(where)) + x[0, :, i, j]
    c.close("CrissCrossAttention", got, want[None], "torch", atol=1e-4)


def c_corner_pool(c):
    from mmcv.ops import CornerPool

    torch = c.torch
    x = c.rand(1, 2, 3, 4)
    H, W = 3, 4
    # top: max over the pixels at and below; bottom: at and above; left: at and right of; right: at and left of
    spans = {"top": lambda i, j: x[..., i:, j].amax(-1), "bottom": lambda i, j: x[..., : i + 1, j].amax(-1),
             "left": lambda i, j: x[..., i, j:].amax(-1), "right": lambda i, j: x[..., i, : j + 1].amax(-1)}
    for mode, span in spans.items():
        want = torch.stack([torch.stack([span(i, j) for j in range(W)], -1) for i in range(H)], -2)
        c.close(f"CornerPool({mode})", c.run(CornerPool(mode), x), want, "torch")


def c_psa_mask(c):
    from mmcv.ops import PSAMask

    torch = c.torch
    h = w = 4
    x = c.rand(1, (2 * h - 1) * (2 * w - 1), h, w)
    for kind in ("collect", "distribute"):
        mod = PSAMask(kind, (2 * h - 1, 2 * w - 1))
        out = c.run(mod, x)
        _finite(out)
        c.vs_cpu(f"PSAMask({kind})", mod, x)
        # the mask for pixel (i, j) is the (2h-1)x(2w-1) map centred on it; collect picks its h x w window
        want = torch.zeros(1, h * w, h, w)
        for i in range(h):
            for j in range(w):
                win = x[0, :, i, j].view(2 * h - 1, 2 * w - 1)[h - 1 - i: 2 * h - 1 - i, w - 1 - j: 2 * w - 1 - j]
                if kind == "collect":
                    want[0, :, i, j] = win.reshape(-1)
                else:
                    want[0, i * w + j, :, :] = win
        c.close(f"PSAMask({kind})", out, want, "torch")


def tin_shift_reference(x, shift):
    """out[n, t, c] = x[n, t - shift[n, g], c] (g = c's channel group), zero where t - shift leaves
    [0, T): mmcv's kernel on [N, T, C, H*W] input, checked against upstream's test_tin_shift values
    by tests/test_verify_ladder_ops.py."""
    import torch

    n, t, ch, _ = x.shape
    group = ch // shift.shape[1]
    out = torch.zeros_like(x)
    for b in range(n):
        for c in range(ch):
            s = int(shift[b, c // group])
            for i in range(t):
                if 0 <= i - s < t:
                    out[b, i, c] = x[b, i - s, c]
    return out


def c_tin_shift(c):
    from mmcv.ops import TINShift, tin_shift

    torch = c.torch
    # [N, num_segments, C, H*W] (the op's documented layout; upstream's test: 2 x 4 x 8 x 2) with
    # 4 channel groups; shifts in both directions and one past the clip's end (all zeros)
    x = c.rand(2, 4, 8, 3)
    shift = torch.tensor([[1, 0, 1, -2], [-2, 1, -1, 4]], dtype=torch.int32)
    want = tin_shift_reference(x, shift)
    c.close("tin_shift", c.run(tin_shift, x, shift), want, "torch")
    c.close("TINShift", c.run(TINShift(), x, shift), want, "torch")


def c_ms_deform_attn(c):
    from mmcv.ops import MultiScaleDeformableAttention

    torch = c.torch
    torch.manual_seed(0)
    mod = MultiScaleDeformableAttention(embed_dims=8, num_heads=2, num_levels=2, num_points=2, batch_first=True).eval()
    shapes = torch.tensor([[4, 4], [2, 2]])
    start = torch.tensor([0, 16])
    value = c.rand(1, 20, 8)
    query = c.rand(1, 3, 8)
    ref = c.rand(1, 3, 2, 2, lo=0.1, hi=0.9)
    args = dict(value=value, query_pos=None, reference_points=ref, spatial_shapes=shapes, level_start_index=start)
    out = c.run(mod.to(c.dev), query, **{k: c.d(v) for k, v in args.items()})
    if c.cuda:  # on the CPU mmcv falls back to its pure-torch multi_scale_deformable_attn_pytorch
        c.close("MultiScaleDeformableAttention", out, c.run(mod.cpu(), query, device="cpu", **args), "torch", atol=1e-4)
    _finite(out)
    # no offsets and equal attention: the mean over levels of the value sampled at the reference point
    with torch.no_grad():
        for lin in (mod.sampling_offsets, mod.attention_weights):
            lin.weight.zero_()
            lin.bias.zero_()
        mod = mod.cpu()
        v = mod.value_proj(value)
        mean = 0
        for lvl, (h, w) in enumerate(shapes.tolist()):
            grid = v[:, int(start[lvl]): int(start[lvl]) + h * w].view(1, h, w, 8).permute(0, 3, 1, 2)
            at = ref[:, :, lvl].view(1, 3, 1, 2) * 2 - 1
            mean = mean + torch.nn.functional.grid_sample(grid, at, align_corners=False)[..., 0].transpose(1, 2) / 2
        want = mod.output_proj(mean) + query
        got = c.run(mod.to(c.dev), query, **{k: c.d(v) for k, v in args.items()})
    c.close("MultiScaleDeformableAttention", got, want, "torch", atol=1e-5)


def c_sync_bn(c):
    from mmcv.ops import SyncBatchNorm

    torch = c.torch
    if not c.cuda:
        raise Skip("CUDA-only: mmcv's sync_bn kernels have no CPU implementation")
    import tempfile

    import torch.distributed as dist

    started = not dist.is_initialized()
    if started:
        store = dist.FileStore(tempfile.mktemp(prefix="mmstack-syncbn-"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        x = c.rand(4, 3, 5, 5)
        bn = SyncBatchNorm(3).to(c.dev).train()
        want = torch.nn.functional.batch_norm(x, None, None, bn.weight.detach().cpu(), bn.bias.detach().cpu(), True, 0.1, 1e-5)
        c.close("SyncBatchNorm", c.run(bn, x), want, "torch", atol=1e-4)
    finally:
        if started:
            dist.destroy_process_group()


def c_upfirdn2d(c):
    from mmcv.ops import filter2d, upfirdn2d, upsample2d

    torch = c.torch
    x = c.rand(1, 2, 6, 6)
    f1 = torch.tensor([1.0, 2.0, 1.0])
    f = torch.outer(f1, f1) / 16
    # a symmetric filter, so correlation and convolution agree: a depthwise conv with zero padding 1
    want = torch.nn.functional.conv2d(torch.nn.functional.pad(x, [1, 1, 1, 1]), f.expand(2, 1, 3, 3), groups=2)
    c.close("upfirdn2d", c.run(upfirdn2d, x, f, padding=1), want, "torch", atol=1e-5)
    c.close("filter2d", c.run(filter2d, x, f), want, "torch", atol=1e-5)  # pads to keep the size itself
    # upsampling a constant with a normalised filter keeps the constant away from the border
    const = torch.full((1, 2, 6, 6), 3.0)
    c.close("upsample2d", c.run(upsample2d, const, f1 / 4, 2)[..., 2:-2, 2:-2], torch.full((1, 2, 8, 8), 3.0),
            "known-values", atol=1e-4)


def c_bias_act(c):
    from mmcv.ops import bias_act

    torch = c.torch
    x, b = c.rand(2, 3, 4, 4, lo=-1, hi=1), c.rand(3, lo=-1, hi=1)
    pre = x + b.view(1, 3, 1, 1)
    c.close("bias_act(lrelu)", c.run(bias_act, x, b, act="lrelu"),
            torch.nn.functional.leaky_relu(pre, 0.2) * math.sqrt(2), "torch", atol=1e-5)
    c.close("bias_act(linear)", c.run(bias_act, x, b), pre, "torch", atol=1e-5)


def c_fused_bias_leakyrelu(c):
    from mmcv.ops import FusedBiasLeakyReLU, fused_bias_leakyrelu

    torch = c.torch
    x, b = c.rand(2, 3, 4, 4, lo=-1, hi=1), c.rand(3, lo=-1, hi=1)
    want = torch.nn.functional.leaky_relu(x + b.view(1, 3, 1, 1), 0.2) * math.sqrt(2)
    c.close("fused_bias_leakyrelu", c.run(fused_bias_leakyrelu, x, b), want, "torch", atol=1e-5)
    mod = FusedBiasLeakyReLU(3).to(c.dev)
    with torch.no_grad():
        mod.bias.copy_(b)
    c.close("FusedBiasLeakyReLU", c.run(mod, x), want, "torch", atol=1e-5)


def c_filtered_lrelu(c):
    from mmcv.ops import filtered_lrelu

    torch = c.torch
    x, b = c.rand(2, 3, 6, 6, lo=-1, hi=1), c.rand(3, lo=-1, hi=1)
    want = torch.nn.functional.leaky_relu(x + b.view(1, 3, 1, 1), 0.2) * math.sqrt(2)
    c.close("filtered_lrelu", c.run(filtered_lrelu, x, None, None, b), want, "torch", atol=1e-5)


def c_correlation(c):
    from mmcv.ops import Correlation

    torch = c.torch
    a, b = c.rand(1, 3, 5, 5), c.rand(1, 3, 5, 5)
    d = 1
    out = c.run(Correlation(max_displacement=d), a, b)
    pad = torch.nn.functional.pad(b, [d, d, d, d])
    want = torch.stack([torch.stack([(a * pad[..., dy: dy + 5, dx: dx + 5]).sum(1) for dx in range(2 * d + 1)], 1)
                        for dy in range(2 * d + 1)], 1)
    c.close("Correlation", out, want, "torch", atol=1e-4)


# -- losses --------------------------------------------------------------------------------------


def c_focal_loss(c):
    from mmcv.ops import SigmoidFocalLoss, SoftmaxFocalLoss, sigmoid_focal_loss, softmax_focal_loss

    torch = c.torch
    x = c.rand(6, 4, lo=-2, hi=2)
    t = torch.tensor([0, 1, 2, 3, 1, 0])
    gamma, alpha = 2.0, 0.25
    p = x.sigmoid()
    one = torch.nn.functional.one_hot(t, 4).bool()
    want = torch.where(one, -alpha * (1 - p) ** gamma * p.log(), -(1 - alpha) * p ** gamma * (1 - p).log())
    c.close("sigmoid_focal_loss", c.run(sigmoid_focal_loss, x, t, gamma, alpha, None, "none"), want, "torch", atol=1e-5)
    c.close("SigmoidFocalLoss", c.run(SigmoidFocalLoss(gamma, alpha, reduction="none"), x, t), want, "torch", atol=1e-5)
    pt = x.softmax(1).gather(1, t[:, None])[:, 0]
    want = -alpha * (1 - pt) ** gamma * pt.log()
    c.close("softmax_focal_loss", c.run(softmax_focal_loss, x, t, gamma, alpha, None, "none"), want, "torch", atol=1e-5)
    c.close("SoftmaxFocalLoss", c.run(SoftmaxFocalLoss(gamma, alpha, reduction="none"), x, t), want, "torch", atol=1e-5)


# -- point clouds ------------------------------------------------------------------------------------


def c_points_in_boxes(c):
    from mmcv.ops import points_in_boxes_all, points_in_boxes_cpu, points_in_boxes_part

    torch = c.torch
    # a 2x4x2 box at the origin (bottom at z=0) turned 90 degrees about z (4 in x, 2 in y); one far away
    boxes = torch.tensor([[[0.0, 0.0, 0.0, 2.0, 4.0, 2.0, math.pi / 2], [10.0, 10.0, 0.0, 1.0, 1.0, 1.0, 0.0]]])
    pts = torch.tensor([[[1.5, 0.0, 1.0], [0.0, 1.5, 1.0], [0.0, 0.0, 3.0], [10.2, 9.8, 0.5], [0.0, 0.0, 0.5]]])
    want = [[[1, 0], [0, 0], [0, 0], [0, 1], [1, 0]]]
    if not c.cuda:  # the CPU form only
        c.exact("points_in_boxes_cpu", c.run(points_in_boxes_cpu, pts, boxes, device="cpu"), want, "known-values")
        return
    c.exact("points_in_boxes_all", c.run(points_in_boxes_all, pts, boxes).cpu(), want, "known-values")
    c.exact("points_in_boxes_part", c.run(points_in_boxes_part, pts, boxes).cpu(), [[0, -1, -1, 1, 0]], "known-values")
    p = c.rand(1, 300, 3, hi=10)
    b = torch.cat([c.rand(1, 8, 3, hi=10), c.rand(1, 8, 3, lo=0.5, hi=3.5), c.rand(1, 8, 1, hi=math.pi)], 2)
    c.exact("points_in_boxes_all", c.run(points_in_boxes_all, p, b).cpu(), points_in_boxes_cpu(p, b), "cpu-kernel")


def _cdist2(torch, a, b):
    return ((a[..., :, None, :] - b[..., None, :, :]) ** 2).sum(-1)


def c_knn(c):
    from mmcv.ops import knn

    torch = c.torch
    xyz, centers = c.rand(2, 32, 3), c.rand(2, 5, 3)
    idx = c.run(knn, 4, xyz, centers).cpu()  # (B, k, npoint)
    want = _cdist2(torch, centers, xyz).topk(4, -1, largest=False)[1].transpose(1, 2)
    c.exact("knn", idx.sort(1)[0], want.sort(1)[0], "torch")


def c_three_nn(c):
    from mmcv.ops import three_nn

    torch = c.torch
    target, source = c.rand(2, 10, 3), c.rand(2, 20, 3)
    dist, idx = c.run(three_nn, target, source)
    d2, want = _cdist2(torch, target, source).topk(3, -1, largest=False)
    c.exact("three_nn", idx.cpu().long(), want, "torch")
    c.close("three_nn", dist, d2.sqrt(), "torch", atol=1e-4)


def c_three_interpolate(c):
    from mmcv.ops import three_interpolate

    torch = c.torch
    feats = c.rand(2, 4, 6)
    idx = torch.randint(0, 6, (2, 5, 3), generator=c.gen, dtype=torch.int32)
    w = c.rand(2, 5, 3)
    want = (torch.stack([feats[b][:, idx[b].long()] for b in range(2)]) * w[:, None]).sum(-1)
    c.close("three_interpolate", c.run(three_interpolate, feats, idx, w), want, "torch", atol=1e-5)


def c_gather_points(c):
    from mmcv.ops import gather_points

    torch = c.torch
    feats = c.rand(2, 3, 10)
    idx = torch.randint(0, 10, (2, 4), generator=c.gen, dtype=torch.int32)
    want = feats.gather(2, idx.long()[:, None].expand(2, 3, 4))
    c.exact("gather_points", c.run(gather_points, feats, idx), want, "torch")


def c_grouping(c):
    from mmcv.ops import QueryAndGroup, grouping_operation

    torch = c.torch
    feats = c.rand(2, 3, 10)
    idx = torch.randint(0, 10, (2, 4, 5), generator=c.gen, dtype=torch.int32)
    want = torch.stack([feats[b][:, idx[b].long()] for b in range(2)])
    c.exact("grouping_operation", c.run(grouping_operation, feats, idx), want, "torch")
    xyz = c.rand(2, 10, 3)
    _finite(c.run(QueryAndGroup(0.5, 4), xyz, xyz[:, :3].contiguous(), feats))


def c_group_all(c):
    from mmcv.ops import GroupAll

    torch = c.torch
    feats, xyz = c.rand(2, 3, 10), c.rand(2, 10, 3)
    got = c.run(GroupAll(use_xyz=True), xyz, None, feats)
    c.exact("GroupAll", got, torch.cat([xyz.transpose(1, 2)[:, :, None], feats[:, :, None]], 1), "torch")


def c_ball_query(c):
    from mmcv.ops import ball_query

    torch = c.torch
    xyz, centers = c.rand(1, 30, 3), c.rand(1, 4, 3)
    r, k = 0.4, 5
    got = c.run(ball_query, 0.0, r, k, xyz, centers).cpu()
    want = torch.zeros(1, 4, k, dtype=torch.long)
    d2 = _cdist2(torch, centers, xyz)[0]
    for i in range(4):  # the first k points (in index order) inside the ball, padded with the first one
        hits = [j for j in range(30) if d2[i, j] < r * r][:k]
        if hits:
            want[0, i] = torch.tensor(hits + [hits[0]] * (k - len(hits)))
    c.exact("ball_query", got, want, "torch")


def c_furthest_point_sample(c):
    from mmcv.ops import PointsSampler, furthest_point_sample, furthest_point_sample_with_dist

    torch = c.torch
    pts = c.rand(2, 40, 3)

    def fps(d):  # d: (N, N) squared distances; start at 0, then the point furthest from all chosen
        chosen, best = [0], d[0].clone()
        for _ in range(7):
            nxt = int(best.argmax())
            chosen.append(nxt)
            best = torch.minimum(best, d[nxt])
        return chosen

    d = _cdist2(torch, pts, pts)
    want = torch.tensor([fps(d[b]) for b in range(2)])
    c.exact("furthest_point_sample", c.run(furthest_point_sample, pts, 8).cpu(), want, "torch")
    c.exact("furthest_point_sample_with_dist", c.run(furthest_point_sample_with_dist, d, 8).cpu(), want, "torch")
    sampler = PointsSampler([8], ["D-FPS"])
    c.exact("PointsSampler", c.run(sampler, pts, pts.transpose(1, 2).contiguous()).cpu(), want, "torch")


def c_assign_score_withk(c):
    from mmcv.ops import assign_score_withk

    torch = c.torch
    B, N, npoint, K, M, O = 1, 8, 4, 3, 2, 5  # noqa: E741
    scores = c.rand(B, npoint, K, M)
    points, centers = c.rand(B, N, M, O), c.rand(B, N, M, O)
    knn_idx = torch.randint(0, N, (B, npoint, K), generator=c.gen)
    _finite(c.run(assign_score_withk, scores, points, centers, knn_idx, "sum"))


def c_chamfer_distance(c):
    from mmcv.ops import chamfer_distance

    torch = c.torch
    a, b = c.rand(2, 6, 2), c.rand(2, 9, 2)
    d1, d2, i1, _i2 = c.run(chamfer_distance, a, b)
    dd = _cdist2(torch, a, b)
    c.close("chamfer_distance", d1, dd.min(2)[0], "torch", atol=1e-5)
    c.close("chamfer_distance", d2, dd.min(1)[0], "torch", atol=1e-5)
    c.exact("chamfer_distance", i1.cpu().long(), dd.min(2)[1], "torch")


def c_voxelization(c):
    from mmcv.ops import Voxelization, voxelization

    torch = c.torch
    pts = torch.cat([c.rand(40, 3, hi=4.0), c.rand(40, 1)], 1)
    size, rng = [1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 4.0, 4.0, 4.0]
    coors = c.run(voxelization, pts, size, rng, -1, -1).cpu()  # dynamic: one (z, y, x) per point
    c.exact("voxelization(dynamic)", coors, pts[:, :3].floor().long().flip(1), "torch")
    _voxels, vcoors, counts = c.run(Voxelization(size, rng, 5, 100), pts)
    counts, vcoors = counts.cpu(), vcoors.cpu()
    # every point lands in its voxel (up to 5 per voxel), voxels in order of first appearance
    first = []
    for zyx in pts[:, :3].floor().long().flip(1).tolist():
        if zyx not in first:
            first.append(zyx)
    c.exact("Voxelization", vcoors, first, "torch")
    tally = [min(5, sum(1 for p in pts[:, :3].floor().long().flip(1).tolist() if p == v)) for v in first]
    c.exact("Voxelization", counts, tally, "torch")
    c.vs_cpu("Voxelization", Voxelization(size, rng, 5, 100), pts)


def c_dynamic_scatter(c):
    from mmcv.ops import DynamicScatter, dynamic_scatter

    torch = c.torch
    feats = c.rand(30, 3)
    coors = torch.randint(0, 3, (30, 3), generator=c.gen, dtype=torch.int32)
    uniq, inv = torch.unique(coors, dim=0, return_inverse=True)
    want_max = torch.stack([feats[inv == i].amax(0) for i in range(len(uniq))])
    want_mean = torch.stack([feats[inv == i].mean(0) for i in range(len(uniq))])

    def by_coors(out):
        f, cc = (t.cpu() for t in out)
        order = sorted(range(len(cc)), key=lambda i: cc[i].tolist())
        return f[order], cc[order]

    for reduce, want in (("max", want_max), ("mean", want_mean)):
        f, cc = by_coors(c.run(dynamic_scatter, feats, coors, reduce))
        c.exact(f"dynamic_scatter({reduce})", cc, uniq, "torch")
        c.close(f"dynamic_scatter({reduce})", f, want, "torch", atol=1e-5)
    f, cc = by_coors(c.run(DynamicScatter([1, 1, 1], [0, 0, 0, 3, 3, 3], True), feats, coors))
    c.close("DynamicScatter", f, want_mean, "torch", atol=1e-5)


def c_roiaware_pool3d(c):
    from mmcv.ops import RoIAwarePool3d

    torch = c.torch
    rois = torch.tensor([[0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0]])
    pts = c.rand(50, 3, lo=-1, hi=1) + torch.tensor([0.0, 0.0, 1.0])
    feats = c.rand(50, 2)
    out = c.run(RoIAwarePool3d(1, 64, "max"), rois, pts, feats)
    # one voxel spanning the box: the max over all points inside (all of them)
    c.close("RoIAwarePool3d", out.view(-1), feats.amax(0), "torch", atol=1e-5)


def c_roipoint_pool3d(c):
    from mmcv.ops import RoIPointPool3d

    torch = c.torch
    pts = c.rand(1, 30, 3, lo=-1, hi=1) + torch.tensor([0.0, 0.0, 1.0])
    feats = c.rand(1, 30, 2)
    boxes = torch.tensor([[[0.0, 0.0, 0.0, 4.0, 4.0, 4.0, 0.0]]])
    pooled, empty = c.run(RoIPointPool3d(8), pts, feats, boxes)
    c.exact("RoIPointPool3d", empty.cpu(), [[0]], "known-values")
    # every pooled row is (xyz, features) of an input point: all 30 lie inside the box
    rows = torch.cat([pts, feats], 2)[0]
    dist = ((pooled.cpu()[0, 0][:, None, :] - rows[None]) ** 2).sum(-1).min(1)[0]
    c.close("RoIPointPool3d", dist, torch.zeros(8), "torch", atol=1e-6)


def c_rotated_feature_align(c):
    from mmcv.ops import rotated_feature_align

    torch = c.torch
    feat = c.rand(1, 3, 6, 6)
    # each pixel's box (y, x, w, h, a) sits on the pixel itself (coordinates scaled by 1/2): every
    # sampling point is that pixel, so the output is the input plus 1 (points=1) or 5 (points=5) copies
    yy, xx = torch.meshgrid(torch.arange(6.0), torch.arange(6.0), indexing="ij")
    on_self = torch.stack([yy * 2, xx * 2, torch.zeros(6, 6), torch.zeros(6, 6), c.rand(6, 6)], -1)[None]
    c.close("rotated_feature_align", c.run(rotated_feature_align, feat, on_self, 0.5, 1), feat * 2, "known-values")
    c.close("rotated_feature_align", c.run(rotated_feature_align, feat, on_self, 0.5, 5), feat * 6, "known-values",
            atol=1e-5)
    rb = torch.cat([c.rand(1, 6, 6, 2, lo=1, hi=5), c.rand(1, 6, 6, 2, lo=1, hi=3), c.rand(1, 6, 6, 1, hi=1)], 3)
    _finite(c.run(rotated_feature_align, feat, rb, 1.0, 5))
    c.vs_cpu("rotated_feature_align", rotated_feature_align, feat, rb, 1.0, 5)


def c_active_rotated_filter(c):
    from mmcv.ops import active_rotated_filter

    torch = c.torch
    O, I, nO, k, R = 4, 2, 8, 3, 8  # noqa: E741
    n = nO * k * k
    w = c.rand(O, I, nO, k, k)
    # indices (nO, k, k, R), 1-based: for rotation r, entry l of the filter goes to place perm_r[l]
    perms = torch.stack([torch.randperm(n, generator=c.gen) for _ in range(R)], 1)
    idx = (perms + 1).int().view(nO, k, k, R)
    want = torch.zeros(O, R, I, n)
    for r in range(R):
        want[:, r, :, perms[:, r]] = w.view(O, I, n)
    c.close("active_rotated_filter", c.run(active_rotated_filter, w, idx), want.view(O * R, I * nO, k, k), "torch")
    c.vs_cpu("active_rotated_filter", active_rotated_filter, w, idx)


def c_pixel_group(c):
    from mmcv.ops import pixel_group

    torch = c.torch
    score = c.rand(6, 6)
    label = torch.zeros(6, 6, dtype=torch.int32)
    label[1:3, 1:3], label[4:6, 4:5] = 1, 2
    mask = label > 0  # the text mask is the kernels alone, so nothing grows
    emb = c.rand(6, 6, 4)
    contour = torch.zeros(6, 6, dtype=torch.uint8)
    out = pixel_group(score, mask, emb, label, contour, 3, 0.8)
    c.ran_on.add("cpu")
    # per label (0 is the background): mean score, pixel count, then x, y of each pixel in raster order
    want = [[0.0, 0.0]]
    for lab in (1, 2):
        ys, xs = (label == lab).nonzero(as_tuple=True)
        want.append([float(score[label == lab].mean()), float(len(xs))] + [float(v) for p in zip(xs, ys, strict=False) for v in p])
    if [len(g) for g in out] != [len(g) for g in want]:
        raise Mismatch(f"pixel_group vs known-values: group sizes {[len(g) for g in out]} != {[len(g) for g in want]}")
    c.close("pixel_group", [v for g in out for v in g], [v for g in want for v in g], "known-values", atol=1e-5)


def c_contour_expand(c):
    from mmcv.ops import contour_expand

    torch = c.torch
    # the inner kernel (label 1 at x=1) grows through the outer kernel's connected pixels only
    kernels = torch.tensor([[[1, 1, 1, 0, 1]], [[0, 1, 0, 0, 0]]], dtype=torch.uint8)
    internal = torch.tensor([[0, 1, 0, 0, 0]], dtype=torch.int32)
    c.ran_on.add("cpu")
    c.exact("contour_expand", contour_expand(kernels, internal, 0, 2), [[1, 1, 1, 0, 0]], "known-values")


def c_info(c):
    from mmcv.ops import get_compiler_version, get_compiling_cuda_version

    c.ran_on.add("cpu")
    if not get_compiler_version() or not get_compiling_cuda_version():
        raise Mismatch("get_compiler_version/get_compiling_cuda_version returned nothing")


def _finite(*outs) -> None:
    """Run-only ops still must give finite numbers."""
    import torch

    for out in outs:
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if hasattr(t, "dtype") and t.dtype.is_floating_point and not bool(torch.isfinite(t).all()):
                raise Mismatch("non-finite values in the output")


# -- the table: (op, exported names it covers, needs a GPU?, check) ------------------------------------
# `cuda` is True where mmcv 2.2 has only a CUDA kernel (csrc/pytorch/cpu lacks it) so the check cannot
# run on a machine without a GPU.
CHECKS = (
    ("roi_align", ("roi_align", "RoIAlign"), False, c_roi_align),
    ("roi_pool", ("roi_pool", "RoIPool"), True, c_roi_pool),
    ("roi_align_rotated", ("roi_align_rotated", "RoIAlignRotated"), False, c_roi_align_rotated),
    ("riroi_align_rotated", ("riroi_align_rotated", "RiRoIAlignRotated"), True, c_riroi_align_rotated),
    ("deform_roi_pool", ("deform_roi_pool", "DeformRoIPool", "DeformRoIPoolPack", "ModulatedDeformRoIPoolPack"), True,
     c_deform_roi_pool),
    ("prroi_pool", ("prroi_pool", "PrRoIPool"), True, c_prroi_pool),
    ("point_sample", ("SimpleRoIAlign", "point_sample", "rel_roi_point_to_rel_img_point"), False, c_simple_roi_align),
    ("bezier_align", ("bezier_align", "BezierAlign"), False, c_bezier_align),
    ("border_align", ("border_align", "BorderAlign"), True, c_border_align),
    ("nms", ("nms",), False, c_nms),
    ("batched_nms", ("batched_nms",), False, c_batched_nms),
    ("soft_nms", ("soft_nms",), False, c_soft_nms),
    ("nms_match", ("nms_match",), False, c_nms_match),
    ("box_iou_rotated", ("box_iou_rotated",), False, c_box_iou_rotated),
    ("box_iou_quadri", ("box_iou_quadri",), False, c_box_iou_quadri),
    ("nms_rotated", ("nms_rotated",), False, c_nms_rotated),
    ("nms_quadri", ("nms_quadri",), False, c_nms_quadri),
    ("bbox_overlaps", ("bbox_overlaps",), False, c_bbox_overlaps),
    ("iou3d", ("boxes_iou3d", "boxes_overlap_bev", "nms3d", "nms3d_normal"), True, c_iou3d),
    ("iou_bev", ("boxes_iou_bev", "nms_bev", "nms_normal_bev"), False, c_iou_bev),
    ("diff_iou_rotated", ("diff_iou_rotated_2d", "diff_iou_rotated_3d"), True, c_diff_iou_rotated),
    ("convex_iou", ("convex_iou", "convex_giou"), True, c_convex_iou),
    ("min_area_polygons", ("min_area_polygons",), True, c_min_area_polygons),
    ("points_in_polygons", ("points_in_polygons",), True, c_points_in_polygons),
    ("deform_conv2d", ("deform_conv2d", "DeformConv2d", "DeformConv2dPack"), False, c_deform_conv2d),
    ("modulated_deform_conv2d", ("modulated_deform_conv2d", "ModulatedDeformConv2d", "ModulatedDeformConv2dPack"),
     False, c_modulated_deform_conv2d),
    ("SAConv2d", ("SAConv2d",), False, c_sa_conv2d),
    ("masked_conv2d", ("masked_conv2d", "MaskedConv2d"), True, c_masked_conv2d),
    ("deprecated_wrappers", ("Conv2d", "ConvTranspose2d", "Linear", "MaxPool2d"), False, c_deprecated_wrappers),
    ("conv2d_gradfix", ("conv2d", "conv_transpose2d"), False, c_conv2d_gradfix),
    ("sparse_conv", ("SparseConv2d", "SparseConv3d", "SparseConvTranspose2d", "SparseConvTranspose3d",
                     "SparseInverseConv2d", "SparseInverseConv3d", "SubMConv2d", "SubMConv3d", "SparseModule",
                     "SparseSequential", "SparseMaxPool2d", "SparseMaxPool3d", "SparseConvTensor"),
     True, c_sparse_conv),
    ("scatter_nd", ("scatter_nd",), False, c_scatter_nd),
    ("carafe", ("carafe", "carafe_naive", "CARAFE", "CARAFENaive", "CARAFEPack"), True, c_carafe),
    ("CrissCrossAttention", ("CrissCrossAttention",), False, c_cc_attention),
    ("CornerPool", ("CornerPool",), False, c_corner_pool),
    ("PSAMask", ("PSAMask",), False, c_psa_mask),
    ("tin_shift", ("tin_shift", "TINShift"), True, c_tin_shift),
    ("MultiScaleDeformableAttention", ("MultiScaleDeformableAttention",), False, c_ms_deform_attn),
    ("SyncBatchNorm", ("SyncBatchNorm",), True, c_sync_bn),
    ("upfirdn2d", ("upfirdn2d", "filter2d", "upsample2d"), False, c_upfirdn2d),
    ("bias_act", ("bias_act",), False, c_bias_act),
    ("fused_bias_leakyrelu", ("fused_bias_leakyrelu", "FusedBiasLeakyReLU"), False, c_fused_bias_leakyrelu),
    ("filtered_lrelu", ("filtered_lrelu",), False, c_filtered_lrelu),
    ("Correlation", ("Correlation",), True, c_correlation),
    ("focal_loss", ("sigmoid_focal_loss", "SigmoidFocalLoss", "softmax_focal_loss", "SoftmaxFocalLoss"), True,
     c_focal_loss),
    ("points_in_boxes_cpu", ("points_in_boxes_cpu",), False, c_points_in_boxes),
    ("points_in_boxes", ("points_in_boxes_all", "points_in_boxes_part"), True, c_points_in_boxes),
    ("knn", ("knn",), True, c_knn),
    ("three_nn", ("three_nn",), True, c_three_nn),
    ("three_interpolate", ("three_interpolate",), True, c_three_interpolate),
    ("gather_points", ("gather_points",), True, c_gather_points),
    ("group_points", ("grouping_operation", "QueryAndGroup"), True, c_grouping),
    ("GroupAll", ("GroupAll",), False, c_group_all),
    ("ball_query", ("ball_query",), True, c_ball_query),
    ("furthest_point_sample", ("furthest_point_sample", "furthest_point_sample_with_dist", "PointsSampler"), True,
     c_furthest_point_sample),
    ("assign_score_withk", ("assign_score_withk",), True, c_assign_score_withk),
    ("chamfer_distance", ("chamfer_distance",), True, c_chamfer_distance),
    ("voxelization", ("voxelization", "Voxelization"), False, c_voxelization),
    ("dynamic_scatter", ("dynamic_scatter", "DynamicScatter"), True, c_dynamic_scatter),
    ("RoIAwarePool3d", ("RoIAwarePool3d",), True, c_roiaware_pool3d),
    ("RoIPointPool3d", ("RoIPointPool3d",), True, c_roipoint_pool3d),
    ("rotated_feature_align", ("rotated_feature_align",), False, c_rotated_feature_align),
    ("active_rotated_filter", ("active_rotated_filter",), False, c_active_rotated_filter),
    ("pixel_group", ("pixel_group",), False, c_pixel_group),
    ("contour_expand", ("contour_expand",), False, c_contour_expand),
    ("info", ("get_compiler_version", "get_compiling_cuda_version"), False, c_info),
)


# Which of upstream mmcv v2.2.0's tests (tests/ of the tag archive the recipe's test section runs)
# exercises the same op; None where upstream has no test of it. tests/test_verify_ladder_ops.py
# checks every op has an entry and every file exists in the archive; docs/verify.md shows both.
UPSTREAM_TESTS: dict[str, str | None] = {
    "roi_align": "test_ops/test_roi_align.py", "roi_pool": "test_ops/test_roi_pool.py",
    "roi_align_rotated": "test_ops/test_roi_align_rotated.py",
    "riroi_align_rotated": "test_ops/test_riroi_align_rotated.py",
    "deform_roi_pool": "test_ops/test_deform_roi_pool.py", "prroi_pool": "test_ops/test_prroi_pool.py",
    "point_sample": None, "bezier_align": "test_ops/test_bezier_align.py",
    "border_align": "test_ops/test_border_align.py", "nms": "test_ops/test_nms.py",
    "batched_nms": "test_ops/test_nms.py", "soft_nms": "test_ops/test_nms.py", "nms_match": "test_ops/test_nms.py",
    "box_iou_rotated": "test_ops/test_box_iou_rotated.py", "box_iou_quadri": "test_ops/test_box_iou_quadri.py",
    "nms_rotated": "test_ops/test_nms_rotated.py", "nms_quadri": "test_ops/test_nms_quadri.py",
    "bbox_overlaps": "test_ops/test_bbox.py", "iou3d": "test_ops/test_iou3d.py", "iou_bev": None,
    "diff_iou_rotated": "test_ops/test_diff_iou_rotated.py", "convex_iou": "test_ops/test_convex_iou.py",
    "min_area_polygons": "test_ops/test_min_area_polygons.py",
    "points_in_polygons": "test_ops/test_points_in_polygons.py",
    "deform_conv2d": "test_ops/test_deform_conv.py", "modulated_deform_conv2d": "test_ops/test_modulated_deform_conv.py",
    "SAConv2d": "test_ops/test_saconv.py", "masked_conv2d": "test_ops/test_masked_conv2d.py",
    "deprecated_wrappers": "test_cnn/test_wrappers.py", "conv2d_gradfix": "test_ops/test_conv_gradfix.py",
    "sparse_conv": "test_ops/test_spconv.py", "scatter_nd": None, "carafe": "test_ops/test_carafe.py",
    "CrissCrossAttention": "test_ops/test_cc_attention.py", "CornerPool": "test_ops/test_corner_pool.py",
    "PSAMask": "test_ops/test_psa_mask.py", "tin_shift": "test_ops/test_tin_shift.py",
    "MultiScaleDeformableAttention": "test_ops/test_ms_deformable_attn.py", "SyncBatchNorm": "test_ops/test_syncbn.py",
    "upfirdn2d": "test_ops/test_upfirdn2d.py", "bias_act": "test_ops/test_bias_act.py",
    "fused_bias_leakyrelu": "test_ops/test_fused_bias_leakyrelu.py", "filtered_lrelu": "test_ops/test_filtered_lrelu.py",
    "Correlation": "test_ops/test_correlation.py", "focal_loss": "test_ops/test_focal_loss.py",
    "points_in_boxes_cpu": "test_ops/test_roiaware_pool3d.py", "points_in_boxes": "test_ops/test_roiaware_pool3d.py",
    "knn": "test_ops/test_knn.py", "three_nn": "test_ops/test_three_nn.py",
    "three_interpolate": "test_ops/test_three_interpolate.py", "gather_points": "test_ops/test_gather_points.py",
    "group_points": "test_ops/test_group_points.py", "GroupAll": None, "ball_query": "test_ops/test_ball_query.py",
    "furthest_point_sample": "test_ops/test_furthest_point_sample.py",
    "assign_score_withk": "test_ops/test_assign_score_withk.py", "chamfer_distance": "test_ops/test_chamfer_distance.py",
    "voxelization": "test_ops/test_voxelization.py", "dynamic_scatter": "test_ops/test_scatter_points.py",
    "RoIAwarePool3d": "test_ops/test_roiaware_pool3d.py", "RoIPointPool3d": "test_ops/test_roipoint_pool3d.py",
    "rotated_feature_align": "test_ops/test_rotated_feature_align.py",
    "active_rotated_filter": "test_ops/test_active_rotated_filter.py", "pixel_group": "test_ops/test_pixel_group.py",
    "contour_expand": "test_ops/test_contour_expand.py", "info": "test_ops/test_info.py",
}


def run_check(op: str, cuda_only: bool, fn, dev: str, tv) -> dict:
    """One op's record: op, device, reference(s), status, max_error, reason."""
    import torch

    rec: dict[str, object] = {"op": op, "device": dev, "reason": None, "upstream_test": UPSTREAM_TESTS.get(op)}
    if cuda_only and dev == "cpu":
        rec.update(status="skip", reference=None, references=[], max_error=None,
                   reason="CUDA-only: mmcv has no CPU kernel for it")
        return rec
    c = Ctx(op, dev, tv)
    try:
        fn(c)
        if dev != "cpu":
            torch.cuda.synchronize()
    except Skip as why:
        rec.update(status="skip", reason=str(why))
        c.refs = []
    except Exception as exc:  # noqa: BLE001 - a wrong or crashing op is this op's finding
        rec.update(status="fail", reason=f"{type(exc).__name__}: {exc}".strip()[:500])
    else:
        rec["status"] = "pass" if c.refs else "run-only"
    refs = sorted(c.refs, key=REFERENCE_ORDER.index)
    rec["references"] = refs
    rec["reference"] = refs[0] if refs else "run-only"
    rec["max_error"] = c.max_error if refs else None
    if c.ran_on and dev not in c.ran_on:
        rec["device"] = sorted(c.ran_on)[0]  # an op mmcv runs on the CPU only (soft_nms, contour_expand, ...)
    return rec


def is_sticky_cuda_error(rec: dict) -> bool:
    """A failure that poisons the CUDA context: every later CUDA call in this process fails too."""
    reason = str(rec.get("reason") or "")
    return rec.get("status") == "fail" and ("AcceleratorError" in reason or "CUDA error:" in reason)


def exported_names() -> list[str]:
    import mmcv.ops

    return list(getattr(mmcv.ops, "__all__", []))


def plan(names: list[str], only: tuple[str, ...] | None = None) -> tuple[list[tuple], list[str], dict]:
    """The checks that cover `names`, names no check covers, and name -> op.

    `only` (a named subset of CHECKS' ops, levels.L4_SETS): those checks, in CHECKS' order, whether
    `names` holds them or not (an op the installed mmcv lacks then fails on its import, as it
    should), and no unknown names."""
    if only is not None:
        missing = sorted(set(only) - {entry[0] for entry in CHECKS})
        if missing:
            raise KeyError(f"no check for {missing} in _ladder_ops.CHECKS")
        todo = [entry for entry in CHECKS if entry[0] in only]
        return todo, [], {n: entry[0] for entry in todo for n in entry[1] if n in names}
    by_name = {n: entry for entry in CHECKS for n in entry[1]}
    todo, seen, unknown, owner = [], set(), [], {}
    for name in names:
        entry = by_name.get(name)
        if entry is None:
            unknown.append(name)
            continue
        owner[name] = entry[0]
        if entry[0] not in seen:
            seen.add(entry[0])
            todo.append(entry)
    return todo, unknown, owner
