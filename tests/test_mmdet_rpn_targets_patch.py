"""Issue 43 item 1: mmdet recipe patch 0006 takes the RPN's targets and
loss off most of their host waits: anchors and targets by indices of a known size instead of
boolean masks, RandomSampler's and PseudoSampler's `unique` (a read back) dropped where the indices
are distinct already, the binary cross entropy's one-hot labels by a comparison instead of nonzero,
and the valid flags and concatenations that every image of a batch shares made once.

It waited in recipes/mmdet/proposed/ until its GPU run: lab/results/h100/perf-run2 tested a package
built with it on the CPU machine (the recipe's whole test section passed on the H100) and timed it
with patch_ab. Here: that run tested this very diff; it applies in the recipe's order, after 0005
(it touches none of 0005's files), without fuzz; with the e2e build's real mmdet (an
overlay of the installed package, as patch_ab.py makes it) the released and the patched code give
the same targets, sampled indices (same seed: the same random draws), losses and gradients, bit for
bit, over padded and unpadded batches, images without boxes, crowded images with more positives than
the sampler takes, four (allowed_border, pos_weight) settings, the samplers alone (RandomSampler as
the RoI head uses it, a subclass that keeps `unique`, PseudoSampler) and the binary cross entropy's
one-hot path with ignored labels; and detector_ops' committed counts with it show the host waits it
removes and no other stage changed.
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
PATCHES = ROOT / "recipes" / "mmdet" / "patches"
PATCH = PATCHES / "0006-rpn-targets-and-loss-without-host-reads.patch"
P0005 = PATCHES / "0005-max-iou-assigner-on-the-device.patch"
RUN = ROOT / "lab" / "results" / "h100" / "perf-run2"
CPU = ROOT / "lab" / "results" / "cpu-dev"
TOUCHED = ("mmdet/models/dense_heads/anchor_head.py", "mmdet/models/losses/cross_entropy_loss.py",
           "mmdet/models/task_modules/samplers/base_sampler.py",
           "mmdet/models/task_modules/samplers/pseudo_sampler.py",
           "mmdet/models/task_modules/samplers/random_sampler.py")

# Per side: digests (dtype, shape, sha256 of the bytes) of what the RPN's get_targets and
# loss_by_feat return and of the gradients, for a seeded RNG; of what the samplers sample; of the
# binary cross entropy and its gradient. Equal digests: equal bit for bit.
TARGETS = DIGEST + r"""
import hashlib, json, torch
from mmengine.config import ConfigDict
from mmengine.structures import InstanceData
from mmdet.models.dense_heads import RPNHead
from mmdet.models.losses.cross_entropy_loss import binary_cross_entropy
from mmdet.models.task_modules.assigners import AssignResult
from mmdet.models.task_modules.samplers import (IoUBalancedNegSampler, PseudoSampler, RandomSampler)

def rpn(allowed_border, pos_weight):
    train_cfg = ConfigDict(
        assigner=dict(type='MaxIoUAssigner', pos_iou_thr=0.7, neg_iou_thr=0.3, min_pos_iou=0.3,
                      match_low_quality=True, ignore_iof_thr=-1),
        sampler=dict(type='RandomSampler', num=256, pos_fraction=0.5, neg_pos_ub=-1, add_gt_as_proposals=False),
        allowed_border=allowed_border, pos_weight=pos_weight, debug=False)
    return RPNHead(in_channels=4, feat_channels=4, train_cfg=train_cfg,
                   anchor_generator=dict(type='AnchorGenerator', scales=[8], ratios=[0.5, 1.0, 2.0],
                                         strides=[4, 8, 16, 32, 64]),
                   bbox_coder=dict(type='DeltaXYWHBBoxCoder', target_means=[0.0] * 4, target_stds=[1.0] * 4),
                   loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=True, loss_weight=1.0),
                   loss_bbox=dict(type='L1Loss', loss_weight=1.0))

def gts(g, n, h, w):
    xy = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.8, h * 0.8])
    wh = torch.rand(n, 2, generator=g) * torch.tensor([w * 0.5, h * 0.5]) + 4
    return InstanceData(bboxes=torch.cat([xy, (xy + wh).minimum(torch.tensor([w - 1.0, h - 1.0]))], 1),
                        labels=torch.zeros(n, dtype=torch.long))

g = torch.Generator().manual_seed(0)
out = {"rpn": [], "sampler": [], "bce": []}
# the RPN: targets and losses (with their gradients) for a seeded RNG, per setting and batch
for allowed_border, pos_weight in ((-1, -1), (0, -1), (-1, 2.0), (8, 0.5)):
    head = rpn(allowed_border, pos_weight)
    for k, (n_imgs, pad, shapes, n_gts) in enumerate([
            (2, (128, 128), [(128, 128), (128, 128)], [3, 5]),        # no padding: every anchor valid
            (3, (128, 160), [(128, 160), (96, 120), (70, 160)], [4, 0, 9]),  # padded images, an image without gts
            (1, (64, 96), [(64, 96)], [1]),
            (2, (96, 96), [(96, 96), (50, 40)], [30, 2]),             # crowded: low-quality matches
            (1, (128, 128), [(128, 128)], [120])]):                        # more positives than the sampler takes
        metas = [dict(img_shape=s, pad_shape=pad, batch_input_shape=pad) for s in shapes]
        insts = [gts(g, n, *s) for n, s in zip(n_gts, shapes)]
        feats = [(pad[0] // s, pad[1] // s) for s in (4, 8, 16, 32, 64)]
        cls = [torch.randn(n_imgs, 3, h, w, generator=g).requires_grad_() for h, w in feats]
        reg = [torch.randn(n_imgs, 12, h, w, generator=g).requires_grad_() for h, w in feats]
        torch.manual_seed(100 + k)
        anchors, valid = head.get_anchors(feats, metas, device='cpu')
        targets = head.get_targets(anchors, valid, insts, metas, return_sampling_results=True)
        sampling = [[r.pos_inds, r.neg_inds, r.pos_gt_labels, r.pos_assigned_gt_inds, r.avg_factor]
                    for r in targets[5]]
        torch.manual_seed(100 + k)
        losses = head.loss_by_feat(cls, reg, insts, metas)
        total = sum(sum(v) for v in losses.values())
        total.backward()
        out["rpn"].append({"case": [allowed_border, pos_weight, k], "targets": digest(list(targets[:5])),
                           "sampling": digest(sampling), "losses": digest(losses),
                           "loss_values": {n: [x.item() for x in v] for n, v in losses.items()},
                           "grads": digest([x.grad for x in cls + reg]),
                           "n_pos": [int(r.pos_inds.numel()) for r in targets[5]],
                           "n_neg": [int(r.neg_inds.numel()) for r in targets[5]]})
# the samplers alone (RandomSampler as the RoI head uses it, a subclass, PseudoSampler), over random and empty assignments
for k in range(40):
    n_gt, n_box = int(torch.randint(0, 6, (1,), generator=g)), int(torch.randint(1, 900, (1,), generator=g))
    gt_inds = torch.randint(-1, n_gt + 1, (n_box,), generator=g) if n_gt else torch.zeros(n_box, dtype=torch.long)
    labels = torch.where(gt_inds > 0, gt_inds + 10, -1)
    mo = torch.rand(n_box, generator=g)
    pred = InstanceData(priors=torch.rand(n_box, 4, generator=g) * 100)
    gt = InstanceData(bboxes=torch.rand(n_gt, 4, generator=g) * 100, labels=torch.arange(n_gt) + 11)
    row = []
    for sampler in (RandomSampler(num=512, pos_fraction=0.25, neg_pos_ub=-1, add_gt_as_proposals=True),
                    RandomSampler(num=64, pos_fraction=0.5, neg_pos_ub=3, add_gt_as_proposals=False),
                    IoUBalancedNegSampler(num=128, pos_fraction=0.25, floor_thr=-1, floor_fraction=0, num_bins=3),
                    PseudoSampler()):
        ar = AssignResult(n_gt, gt_inds.clone(), mo.clone(), labels.clone())
        torch.manual_seed(k)
        r = sampler.sample(ar, pred, gt)
        row.append(digest([r.pos_inds, r.neg_inds, r.pos_is_gt, r.pos_assigned_gt_inds, r.pos_gt_labels, r.avg_factor]))
    out["sampler"].append(row)
# the binary cross entropy with labels expanded to one-hot (pred N x C, labels N), ignore_index inside and outside
for k, (n, c, ignore) in enumerate([(50, 1, -100), (300, 1, -100), (40, 4, -100), (40, 4, 2), (0, 1, -100), (33, 3, None)]):
    pred = torch.randn(n, c, generator=g).requires_grad_()
    label = torch.randint(-1, c + 2, (n,), generator=g)
    weight = torch.rand(n, generator=g)
    loss = binary_cross_entropy(pred, label, weight, reduction='mean', avg_factor=max(n, 1), ignore_index=ignore)
    loss.backward()
    out["bce"].append(digest([loss, pred.grad]))
print(json.dumps(out))
"""


def test_header_says_what_why_status_after_0005_and_how_to_time_it():
    head = PATCH.read_text().split("\n---\n", 1)[0]
    for key in ("What:", "Why:", "Status: in the recipe after its GPU", "Upstream:", "patch_ab: --package mmdet",
                "after 0005"):
        assert key in head, key
    assert patch_ab.header_args(PATCH)[:2] == ["--package", "mmdet"]


def test_0006_entered_after_the_gpu_run_of_this_very_diff():
    """perf-run2 seeded the CPU-built mmdet with 0005 and 0006, its whole test section passed on the
    H100, and patch_ab timed 0006 (0005 on both sides) against the same file."""
    doc = check_tested(RUN, PATCH, package_file="mmdet-3.3.0-mmcv22_pyh8259157_1.conda")
    ratio = mmdet_over_torchvision(doc, 8)
    assert ratio["patched"] > ratio["released"]


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_applies_in_the_recipes_order_after_0005_without_fuzz(tmp_path):
    work = patched_sdist("mmdet", tmp_path)  # the recipe's patches: 0005, then 0006
    for name in TOUCHED:
        compile((work / name).read_text(), name, "exec")
    head = (work / TOUCHED[0]).read_text()
    assert "if not inside_flags.any():" not in head and "torch.nonzero_static(mask, size=size)" in head
    assert "flat_anchors[inside_flags]" not in head and "unmap(" not in head.replace("_unmap_by_inds(", "")
    sampler = (work / TOUCHED[2]).read_text()
    assert ".unique()" in sampler  # the default for samplers whose indices may repeat
    # 0006 touches none of 0005's files: the A/B of either needs no other candidate
    assert not set(TOUCHED) & {line[6:] for line in P0005.read_text().splitlines() if line.startswith("+++ b/")}


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_patched_rpn_targets_losses_and_samplers_are_released_bit_for_bit(real_mmcv_python, tmp_path):
    released = released_equals_patched(PATCH, real_mmcv_python, TARGETS, tmp_path / "overlay")
    assert released.keys() == {"rpn", "sampler", "bce"}
    rpn = released["rpn"]
    # the cases reach what changed: padded batches (anchors outside the valid region), images
    # without boxes, more positives than the sampler takes (its random draw), a pos_weight
    assert len(rpn) == 20
    assert any(128 in case["n_pos"] for case in rpn) and any(0 in case["n_pos"] for case in rpn)
    assert all(case["loss_values"]["loss_rpn_cls"][0] > 0 for case in rpn)
    assert any(x > 0 for case in rpn for x in case["loss_values"]["loss_rpn_bbox"])


def _mmdet(name: str) -> dict:
    return json.loads((CPU / name).read_text())["frameworks"]["mmdet"]["stages"]


@pytest.mark.parametrize("bs", ["2", "8"])
def test_counts_with_the_patch_lose_host_waits_in_the_rpn_and_roi_targets_only(bs):
    """detector_ops at 800 px on the CPU: released (detector_ops_bs*.json), with 0005
    (detector_ops_p0004_bs*.json) and with 0005 and 0006 (detector_ops_p0006_bs*.json)."""
    doc = json.loads((CPU / f"detector_ops_p0006_bs{bs}.json").read_text())
    assert doc["environment"].startswith("recipes/mmdet/proposed/0005") and "0006" in doc["environment"]
    released, p5, p6 = _mmdet(f"detector_ops_bs{bs}.json"), _mmdet(f"detector_ops_p0004_bs{bs}.json"), doc["frameworks"]["mmdet"]["stages"]
    for stage in ("rpn.targets", "rpn.loss", "roi.targets", "iteration"):
        assert p6[stage]["host_waits"] < p5[stage]["host_waits"] < released[stage]["host_waits"], stage
    for stage in ("rpn.targets", "rpn.loss", "iteration"):
        assert p6[stage]["ops"] < p5[stage]["ops"], stage
    assert p6["roi.targets"]["ops"] == p5["roi.targets"]["ops"]  # a sort for each unique
    for stage in ("preprocess", "backbone+neck", "rpn.proposals", "roi.features", "roi.head", "roi.loss", "update"):
        assert p6[stage] == released[stage], stage
    # what is left in the RPN's targets: per image, the count of anchors inside and one nonzero each
    # for the sampler's positives and negatives
    assert p6["rpn.targets"]["host_waits"] == 3 * int(bs)


def test_upstreams_tests_of_the_touched_code_count_the_same_on_every_side():
    doc = json.loads((CPU / "upstream_mmdet_p0006_cpu.json").read_text())
    sides = doc["sides"]
    assert set(sides) == {"released", "0006", "0005+0006"}
    for name, side in sides.items():
        assert side["failed"] == [] and side["counts"]["passed"] > 100, name
        assert side["by_file"] == sides["released"]["by_file"], name
    assert "tests/test_models/test_dense_heads/test_rpn_head.py" in sides["released"]["by_file"]
