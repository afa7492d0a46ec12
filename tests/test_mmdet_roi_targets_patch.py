"""Issue 43 item 1: mmdet recipe patch 0007 computes the RoI head's
targets for the whole batch at once: BBoxHead.get_targets (concat=True, the default) makes one
encode of every image's positives and one cat per output of slices of a few tensors made once,
instead of _get_targets_single per image (four new tensors, four slice writes and an encode each)
and a cat; and BBoxHead.loss takes the positives' indices once instead of reading the mask's count
back for `.any()` and each of its four boolean-mask indexings.

It waited in recipes/mmdet/proposed/ until its GPU run: lab/results/h100/perf-run4 tested a package
built with it on the CPU machine (the recipe's whole mmdet test section passed on an H100) and timed
it with patch_ab. Here: that run tested this very diff; it applies in the recipe's order without fuzz; with the e2e build's
real mmdet (an overlay of the installed package, as patch_ab.py makes it) the released and the patched
code give the same targets (concat=True and False), losses and gradients of loss_and_target, bit for
bit, over batches of 1-8 images from mmdet's own MaxIoUAssigner and RandomSampler and hand-built
SamplingResults (images without positives, without negatives, without either, batches without any
positive), tensor and HorizontalBoxes ground truth, pos_weight -1, 0 and 2, reg_decoded_bbox,
reg_class_agnostic, the Faster R-CNN head (Shared2FCBBoxHead); the batched path is the one taken
(one encode per batch) only where the rows are BBoxHead's own: a subclass that overrides
_get_targets_single, and concat=False, keep the loop; and roi.loss, counted as detector_ops counts
it, dispatches as many ops at batch 8 as at 2, with three host waits instead of seven.

Those that need the e2e build's prefix skip without it. lab/results/cpu-dev/roi_loss_ops_p0007.json
holds the count script's run from before any prefix existed here (a STAND-IN interpreter, as it
says); the last test checks it against the whole-iteration counts of detector_ops_p0006_bs*.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.candidate_patch import DIGEST, released_equals_patched
from support.gpu_entry import check_tested, mmdet_over_torchvision

from mmstack_lab.ops import patch_ab
from mmstack_lab.standin.offline import patched_sdist

ROOT = Path(__file__).resolve().parents[1]
PATCH = ROOT / "recipes" / "mmdet" / "patches" / "0007-roi-targets-batched.patch"
RUN = ROOT / "lab" / "results" / "h100" / "perf-run4"
CPU = ROOT / "lab" / "results" / "cpu-dev"
TOUCHED = "mmdet/models/roi_heads/bbox_heads/bbox_head.py"

# What both scripts share: sampling results for a batch, real (MaxIoUAssigner + RandomSampler as
# Faster R-CNN's RoI head configures them) or hand-built, image by image.
COMMON = DIGEST + r"""
import hashlib, json, torch
from mmengine.config import ConfigDict
from mmengine.structures import InstanceData
from mmdet.models.roi_heads.bbox_heads import BBoxHead, Shared2FCBBoxHead
from mmdet.models.task_modules.assigners import AssignResult, MaxIoUAssigner
from mmdet.models.task_modules.samplers import RandomSampler, SamplingResult
from mmdet.structures.bbox import HorizontalBoxes, bbox2roi

NUM_CLASSES = 5

def boxes(g, n, size=200.0):
    xy = torch.rand(n, 2, generator=g) * size * 0.8
    wh = torch.rand(n, 2, generator=g) * size * 0.4 + 2
    return torch.cat([xy, xy + wh], 1)

def near(g, b, k):
    # k boxes around each of b, IoU well above 0.5: positives only
    b = b.repeat_interleave(k, 0)
    wh = (b[:, 2:] - b[:, :2]).repeat(1, 2)
    return b + (torch.rand(b.shape, generator=g) - 0.5) * 0.08 * wh

def gt_of(g, n, hbox):
    gt = boxes(g, n)
    return HorizontalBoxes(gt) if hbox else gt, torch.randint(0, NUM_CLASSES, (n, ), generator=g)

def sampled(g, kind, hbox):
    # one image through the RoI head's assigner and sampler (Faster R-CNN's rcnn train_cfg)
    n_gt = 0 if kind == 'no_gt' else int(torch.randint(1, 9, (1, ), generator=g))
    gt, labels = gt_of(g, n_gt, hbox)
    gt_t = gt.tensor if hbox else gt
    if kind == 'all_pos':
        priors = near(g, gt_t, 3)
    else:
        priors = torch.cat([near(g, gt_t, 2), boxes(g, int(torch.randint(1, 300, (1, ), generator=g)))])
    if hbox:  # box-type priors as well (the sampler joins gts and priors of one type): the per-image path
        priors = HorizontalBoxes(priors)
    assigner = MaxIoUAssigner(pos_iou_thr=0.5, neg_iou_thr=0.5, min_pos_iou=0.5, match_low_quality=False,
                              ignore_iof_thr=-1)
    sampler = RandomSampler(num=512 if kind != 'small' else 16, pos_fraction=0.25, neg_pos_ub=-1,
                            add_gt_as_proposals=kind != 'small')
    pred, gts = InstanceData(priors=priors), InstanceData(bboxes=gt, labels=labels)
    return sampler.sample(assigner.assign(pred, gts), pred, gts)

def hand(g, n_pos, n_neg, hbox):
    # a SamplingResult made by hand: n_pos positives (then n_neg negatives) among its priors
    n_gt = int(torch.randint(1, 6, (1, ), generator=g)) if n_pos else 0
    gt, labels = gt_of(g, n_gt, hbox)
    n = n_pos + n_neg
    priors = boxes(g, n)
    gt_inds = torch.zeros(n, dtype=torch.long)
    if n_pos:
        gt_inds[:n_pos] = torch.randint(1, n_gt + 1, (n_pos, ), generator=g)
    assigned = torch.where(gt_inds > 0, labels[(gt_inds - 1).clamp(min=0)] if n_gt else gt_inds, -1)
    result = AssignResult(n_gt, gt_inds, torch.rand(n, generator=g), assigned)
    return SamplingResult(torch.arange(n_pos), torch.arange(n_pos, n), priors, gt, result,
                          torch.zeros(n, dtype=torch.uint8))

def head_of(kind, pos_weight, decoded, agnostic):
    loss_bbox = dict(type='GIoULoss', loss_weight=10.0) if decoded else \
        dict(type='L1Loss', loss_weight=1.0) if agnostic else dict(type='SmoothL1Loss', beta=1.0, loss_weight=1.0)
    kw = dict(num_classes=NUM_CLASSES, reg_class_agnostic=agnostic, reg_decoded_bbox=decoded,
              bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.0] * 4, target_stds=[0.1, 0.1, 0.2, 0.2]),
              loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0), loss_bbox=loss_bbox)
    if kind == 'Shared2FCBBoxHead':
        head = Shared2FCBBoxHead(in_channels=4, fc_out_channels=8, roi_feat_size=1, **kw)
    else:
        head = BBoxHead(in_channels=4, roi_feat_size=1, **kw)
    return head, ConfigDict(pos_weight=pos_weight)
"""

# Per side: digests (dtype, shape, sha256 of the bytes) of get_targets (concat=True and False) and of
# loss_and_target's targets, losses and gradients, per batch. Equal digests: equal bit for bit.
TARGETS = COMMON + r"""
g = torch.Generator().manual_seed(0)
KINDS = ['sampled', 'sampled', 'small', 'no_gt', 'all_pos', 'hand_no_pos', 'hand_no_neg', 'hand_empty']
SETTINGS = [('BBoxHead', -1, False, False), ('Shared2FCBBoxHead', -1, False, False), ('BBoxHead', 2.0, False, False),
            ('BBoxHead', 0, False, True), ('BBoxHead', -1, True, False), ('Shared2FCBBoxHead', 2.0, True, True)]
out = {"cases": []}
for setting in SETTINGS:
    head, cfg = head_of(*setting)
    for k in range(12):
        n_imgs = 1 + k % 8
        hbox = k % 3 == 1  # HorizontalBoxes ground truth (and priors, where sampled)
        torch.manual_seed(len(out["cases"]))  # RandomSampler's draws: the same on both sides
        if k == 0:
            kinds = ['hand_no_pos'] * n_imgs          # no positive in the batch: nothing to encode
        elif k == 9:
            kinds = ['hand_no_neg', 'all_pos'] * 4   # no negative in the batch
        else:
            kinds = [KINDS[int(i)] for i in torch.randint(0, len(KINDS), (n_imgs, ), generator=g)]
        results = []
        for kind in kinds:
            if kind.startswith('hand'):
                n_pos = 0 if kind in ('hand_no_pos', 'hand_empty') else int(torch.randint(1, 40, (1, ), generator=g))
                n_neg = 0 if kind in ('hand_no_neg', 'hand_empty') else int(torch.randint(1, 90, (1, ), generator=g))
                results.append(hand(g, n_pos, n_neg, hbox))
            else:
                results.append(sampled(g, kind, hbox))
        listed = head.get_targets(results, cfg, concat=False)
        n = sum(r.pos_priors.size(0) + r.neg_priors.size(0) for r in results)
        rois = bbox2roi([r.priors for r in results])
        cls_score = torch.randn(n, NUM_CLASSES + 1, generator=g).requires_grad_()
        reg = 4 if setting[3] else 4 * NUM_CLASSES
        bbox_pred = (torch.randn(n, reg, generator=g) * 0.2).requires_grad_()
        both = head.loss_and_target(cls_score, bbox_pred, rois, results, cfg)
        losses = both['loss_bbox']
        total = sum(v for name, v in losses.items() if name.startswith('loss'))
        total.backward()
        out["cases"].append({
            "setting": list(setting), "kinds": kinds, "hbox": hbox,
            "n_pos": [int(r.pos_priors.size(0)) for r in results],
            "n_neg": [int(r.neg_priors.size(0)) for r in results],
            "targets": digest(list(both['bbox_targets'])), "listed": digest(list(listed)),
            "losses": digest(losses), "loss_values": {name: float(v) for name, v in losses.items()},
            "grads": digest([cls_score.grad, bbox_pred.grad]),
            "label_weights_max": float(both['bbox_targets'][1].max()) if n else None})
print(json.dumps(out))
"""

# Per side: how many rows each call of the coder's encode got, for a head whose rows are BBoxHead's
# own, the Faster R-CNN head, and a subclass that overrides _get_targets_single (its rows its own).
PATHS = COMMON + r"""
class OwnRows(BBoxHead):
    def _get_targets_single(self, *args, **kwargs):
        return BBoxHead._get_targets_single(self, *args, **kwargs)

g = torch.Generator().manual_seed(1)
torch.manual_seed(1)
results = [sampled(g, kind, False) for kind in ('sampled', 'no_gt', 'sampled', 'all_pos', 'small')]
out = {"n_pos": [int(r.pos_priors.size(0)) for r in results]}
for name in ('BBoxHead', 'Shared2FCBBoxHead', 'OwnRows'):
    head, cfg = head_of('BBoxHead' if name == 'OwnRows' else name, -1, False, False)
    if name == 'OwnRows':
        head.__class__ = OwnRows
    calls, encode = [], head.bbox_coder.encode
    def counted(bboxes, gt_bboxes, calls=calls, encode=encode):
        calls.append(int(bboxes.size(0)))
        return encode(bboxes, gt_bboxes)
    head.bbox_coder.encode = counted
    concat = digest(list(head.get_targets(results, cfg)))
    out[name] = {"concat": list(calls)}
    del calls[:]
    listed = head.get_targets(results, cfg, concat=False)
    out[name]["listed"] = list(calls)
    out[name]["same_as_listed"] = concat == digest([torch.cat(x) for x in listed])
print(json.dumps(out))
"""

# Per side: roi.loss as detector_ops counts it (bbox_head.loss_and_target under its counting mode), on
# the Faster R-CNN RoI head (Shared2FCBBoxHead, 80 classes, L1Loss) fed by mmdet's own MaxIoUAssigner and
# RandomSampler with the rcnn train_cfg (512 per image, a quarter positive, gts added as proposals).
COUNT = r"""
import hashlib, json, torch
from mmengine.config import ConfigDict
from mmengine.structures import InstanceData
from mmdet.models.roi_heads.bbox_heads import Shared2FCBBoxHead
from mmdet.models.task_modules.assigners import MaxIoUAssigner
from mmdet.models.task_modules.samplers import RandomSampler
from mmdet.structures.bbox import bbox2roi
from mmstack_lab.detector import detector_ops as do

out = {}
for bs in (2, 8):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(bs)
    head = Shared2FCBBoxHead(in_channels=256, fc_out_channels=1024, roi_feat_size=7, num_classes=80,
                             bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.0] * 4,
                                             target_stds=[0.1, 0.1, 0.2, 0.2]),
                             reg_class_agnostic=False,
                             loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0),
                             loss_bbox=dict(type='L1Loss', loss_weight=1.0))
    assigner = MaxIoUAssigner(pos_iou_thr=0.5, neg_iou_thr=0.5, min_pos_iou=0.5, match_low_quality=False, ignore_iof_thr=-1)
    sampler = RandomSampler(num=512, pos_fraction=0.25, neg_pos_ub=-1, add_gt_as_proposals=True)
    results = []
    for _ in range(bs):
        n_gt = int(torch.randint(3, 8, (1,), generator=g))
        xy = torch.rand(n_gt, 2, generator=g) * 600
        gt = torch.cat([xy, xy + torch.rand(n_gt, 2, generator=g) * 150 + 20], 1)
        pxy = torch.rand(1000, 2, generator=g) * 700
        props = torch.cat([pxy, pxy + torch.rand(1000, 2, generator=g) * 200 + 8], 1)
        near = gt.repeat_interleave(20, 0) + torch.randn(n_gt * 20, 4, generator=g) * 6
        priors = torch.cat([near, props])
        pred, gts = InstanceData(priors=priors), InstanceData(bboxes=gt, labels=torch.randint(0, 80, (n_gt,), generator=g))
        results.append(sampler.sample(assigner.assign(pred, gts), pred, gts))
    n = sum(r.priors.size(0) for r in results)
    rois = bbox2roi([r.priors for r in results])
    cls_score = torch.randn(n, 81, generator=g).requires_grad_()
    bbox_pred = torch.randn(n, 320, generator=g).requires_grad_()
    counts = []
    for it in range(2):
        cls_score.grad = bbox_pred.grad = None
        stack = do.Stack()
        mode = do.counting_mode(stack, False)
        with mode:
            stack.mark('roi.loss', 'start')
            res = head.loss_and_target(cls_score, bbox_pred, rois, results, ConfigDict(pos_weight=-1))
            stack.mark('roi.loss', 'end')
            # its share of the backward pass (in detector_ops' update stage)
            stack.mark('backward', 'start')
            (res['loss_bbox']['loss_cls'] + res['loss_bbox']['loss_bbox']).backward()
            stack.mark('backward', 'end')
        counts.append({k: do._tidy(mode.stages[k], False) for k in ('roi.loss', 'backward')})
    assert counts[0] == counts[1]
    out[f"bs{bs}"] = dict(counts[0]['roi.loss'], backward=counts[0]['backward'],
                          n_pos=[int(r.pos_inds.numel()) for r in results],
                          loss={k: float(v) for k, v in res['loss_bbox'].items()},
                          grads=[hashlib.sha256(x.grad.numpy().tobytes()).hexdigest()[:16] for x in (cls_score, bbox_pred)])
print(json.dumps(out))
"""


def test_header_says_what_why_status_and_how_to_time_it():
    head = PATCH.read_text().split("\n---\n", 1)[0]
    for key in ("What:", "Why:", "Status: in the recipe after its GPU run", "Upstream:",
                "patch_ab: --package mmdet --ops \"\" --detector 2,8"):
        assert key in head, key
    assert patch_ab.header_args(PATCH) == ["--package", "mmdet", "--ops", "", "--detector", "2,8"]


def test_0007_entered_after_the_gpu_run_of_this_very_diff():
    """perf-run4 seeded the CPU-built mmdet with 0007 (and candidate 0008), its whole test section
    passed on the H100, and patch_ab timed 0007 (0008 on both sides) against the same file: mmdet
    gained more than the matched torchvision drifted, at batch 2 and 8."""
    doc = check_tested(RUN, PATCH, package_file="mmdet-3.3.0-mmcv22_pyh8259157_2.conda")
    for bs in (2, 8):
        ratio = mmdet_over_torchvision(doc, bs)
        assert ratio["patched"] > ratio["released"], bs
        (row,) = [r for r in doc["detector"] if r["batch_size"] == bs]
        assert row["released"]["mmdet"]["loss_first"] == row["patched"]["mmdet"]["loss_first"]


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_applies_in_the_recipes_order_without_fuzz(tmp_path):
    work = patched_sdist("mmdet", tmp_path)  # the recipe's patches, 0007 last, with --fuzz=0
    text = (work / TOUCHED).read_text()
    compile(text, TOUCHED, "exec")
    # the batched path, taken only for BBoxHead's own rows; the per-image loop kept for the rest
    assert "type(self)._get_targets_single is not \\\n                BBoxHead._get_targets_single" in text
    assert "multi_apply(\n            self._get_targets_single," in text
    # BBoxHead.loss: no `.any()` and no boolean-mask indexing left on the regression path
    loss = text.split("    def loss(self,", 1)[1].split("    def predict_by_feat(", 1)[0]
    loss = "\n".join(line.split("#", 1)[0] for line in loss.splitlines())  # the code, not its comments
    assert ".any()" not in loss and "[pos_inds" not in loss and "pos_inds.type(torch.bool)" not in loss
    assert "torch.sum(label_weights > 0).float().item()" in loss  # kept: its float divides the loss


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_patched_roi_targets_losses_and_grads_are_released_bit_for_bit(real_mmcv_python, tmp_path):
    released = released_equals_patched(PATCH, real_mmcv_python, TARGETS, tmp_path / "overlay")
    cases = released["cases"]
    assert len(cases) == 72
    # the cases reach what changed: batches of 1 to 8 images, images
    # without positives, without negatives and without either, batches without any positive,
    # pos_weight 2 in the label weights, both ground-truth types, every head setting
    assert {len(c["n_pos"]) for c in cases} >= set(range(1, 9))
    assert any(0 in c["n_pos"] and any(c["n_pos"]) for c in cases)
    assert any(0 in c["n_neg"] and any(c["n_neg"]) for c in cases)
    assert any(p == 0 and n == 0 for c in cases for p, n in zip(c["n_pos"], c["n_neg"], strict=True))
    assert any(not any(c["n_pos"]) for c in cases) and any(not any(c["n_neg"]) for c in cases)
    assert any(c["label_weights_max"] == 2.0 for c in cases) and any(c["hbox"] for c in cases)
    assert {tuple(c["setting"]) for c in cases} == {("BBoxHead", -1, False, False), ("Shared2FCBBoxHead", -1, False, False),
                                                    ("BBoxHead", 2.0, False, False), ("BBoxHead", 0, False, True),
                                                    ("BBoxHead", -1, True, False), ("Shared2FCBBoxHead", 2.0, True, True)}
    assert all(c["loss_values"]["loss_cls"] > 0 for c in cases if any(c["n_pos"]) or any(c["n_neg"]))
    assert sum(c["loss_values"]["loss_bbox"] > 0 for c in cases) > 50


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_one_encode_per_batch_only_for_bbox_heads_own_rows(real_mmcv_python, tmp_path):
    over = patch_ab.overlay(PATCH, tmp_path / "overlay", real_mmcv_python, package="mmdet")
    sides = patch_ab.each_side(real_mmcv_python, over, PATHS, timeout=300)
    released, patched = sides["released"], sides["patched"]
    n_pos = released["n_pos"]
    assert n_pos == patched["n_pos"] and n_pos.count(0) == 1 and sum(n_pos) > 0
    per_image = [n for n in n_pos if n]
    for name in ("BBoxHead", "Shared2FCBBoxHead", "OwnRows"):
        assert released[name] == {"concat": per_image, "listed": per_image, "same_as_listed": True}, name
    for name in ("BBoxHead", "Shared2FCBBoxHead"):
        assert patched[name] == {"concat": [sum(n_pos)], "listed": per_image, "same_as_listed": True}, name
    assert patched["OwnRows"] == released["OwnRows"]


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_roi_loss_dispatches_as_many_ops_at_batch_8_as_at_2(real_mmcv_python, tmp_path):
    """The stage detector_ops calls roi.loss: released, about 32 ops per image (the per-image targets)
    and seven host waits; patched, the same ops whatever the batch and three waits (the positives'
    nonzero, the classification loss's avg_factor and L1Loss's any), with the same losses."""
    over = patch_ab.overlay(PATCH, tmp_path / "overlay", real_mmcv_python, package="mmdet")
    sides = patch_ab.each_side(real_mmcv_python, over, COUNT, timeout=600)
    released, patched = sides["released"], sides["patched"]
    for bs in ("bs2", "bs8"):
        for key in ("loss", "grads", "n_pos"):
            assert patched[bs][key] == released[bs][key], (bs, key)
        assert released[bs]["host_waits"] == 7 and patched[bs]["host_waits"] == 3, bs
        assert patched[bs]["host_waits_by_op"] == {"aten._local_scalar_dense.default": 2, "aten.nonzero.default": 1}
        assert patched[bs]["ops"] < released[bs]["ops"], bs
    per_image = (released["bs8"]["ops"] - released["bs2"]["ops"]) / 6
    assert per_image > 25
    assert patched["bs8"]["ops"] == patched["bs2"]["ops"]


def test_committed_roi_loss_counts_are_the_stage_detector_ops_counts():
    """lab/results/cpu-dev/roi_loss_ops_p0007.json: the COUNT script's run (in a STAND-IN interpreter,
    its environment says which); its released side is the roi.loss stage of the committed whole-iteration
    counts with the recipe's mmdet (detector_ops_p0006_bs*.json), op for op, so the patched side is what
    that stage becomes."""
    doc = json.loads((CPU / "roi_loss_ops_p0007.json").read_text())
    assert "STAND-IN" in doc["environment"] and Path(doc["patch"]["file"]).name == PATCH.name  # then in proposed/
    released, patched = doc["sides"]["released"], doc["sides"]["patched"]
    for bs in ("2", "8"):
        stage = json.loads((CPU / f"detector_ops_p0006_bs{bs}.json").read_text())["frameworks"]["mmdet"]["stages"]
        assert {k: released[f"bs{bs}"][k] for k in stage["roi.loss"]} == stage["roi.loss"], bs
        for key in ("loss", "grads", "n_pos"):
            assert patched[f"bs{bs}"][key] == released[f"bs{bs}"][key], (bs, key)
        # its share of the backward: the same ops, without the index_put by the boolean mask
        rel_back, pat_back = released[f"bs{bs}"]["backward"], patched[f"bs{bs}"]["backward"]
        assert rel_back["host_waits_by_op"] == {"aten.index_put.default": 1} and pat_back["host_waits"] == 0
        assert pat_back["ops"] == rel_back["ops"]
    assert patched["bs2"]["ops"] == patched["bs8"]["ops"] < released["bs2"]["ops"] < released["bs8"]["ops"]
    assert patched["bs8"]["host_waits"] == 3 < released["bs8"]["host_waits"]
