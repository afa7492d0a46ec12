"""The ladder's one table: each level, its title, the level it needs, and the parts the child runs.

Both processes read it: `ladder.py` (the parent: which parts to ask for, what blocks what, the
titles it prints) and `_ladder_child.py` (the child: which function runs each part, and which
checks L4's quick set runs), which loads this file by path. So it imports the standard library
only, and no mmstack.

L4 has one list of checks, `_ladder_ops.CHECKS` (one per op `mmcv.ops` exports); its modes are
names for subsets of it: "complete" runs every check whose op the installed mmcv exports, "quick"
the few named in `L4_SETS`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Level:
    id: str  # "L1" .. "L6": what --levels takes, the key of every result
    title: str  # what the table prints beside the id
    needs: str | None  # the level that must pass (or skip) first, when both are asked for
    parts: tuple[str, ...]  # what the child runs for it, in order; each part a function of the child
    checks: str  # what the level proves: README's ladder table is these rows (tests/test_verify_levels.py)


TABLE = (
    Level("L1", "import", None, ("L1",), "`import mmcv`: version and location"),
    Level("L2", "CUDA", "L1", ("L2",),
          "CUDA visible, driver vs runtime (incl. minor-version compatibility), GPU arch covered by "
          "the SASS/PTX inside `mmcv._ext`"),
    Level("L3", "ops load", "L1", ("L3", "L3-info"),
          "`mmcv._ext` and every library it needs load; the glibc its symbols need is not newer "
          "than the `__glibc` its conda package declares; `mmcv.ops` imports; "
          "`get_compiler_version()`, `collect_env()` run"),
    Level("L4", "ops run", "L3", ("L4",),
          "roi_align, nms, box_iou_rotated, deform_conv (and a 3D op) give correct numbers (against "
          "known values, the CPU kernel on a GPU, and torchvision when it imports); `--l4 complete` "
          "runs every op `mmcv.ops` exports and says per op what it was compared with (CPU kernel, "
          "torch/torchvision reference, known values) or that it was run only or skipped, and why"),
    Level("L5", "train", "L4", ("L5", "L5-detector"),
          "a few training steps of a tiny model built from mmcv ops; the loss falls. `--model "
          "faster-rcnn[,faster-rcnn-mdconv,faster-rcnn-dconv]` adds MMDetection detectors (random "
          "weights, synthetic images, [docs/mmdet.md](docs/mmdet.md)); `--nproc N` adds the step "
          "under torchrun on N ranks: NCCL on N GPUs with mmcv's SyncBN, gloo on the CPU "
          "([docs/distributed.md](docs/distributed.md))"),
    Level("L6", "checkpoints", "L4", ("L6",),
          "checkpoints through mmengine's `Runner`, each step in a fresh process: saved, loaded "
          "into a new model (same predictions), resumed (iteration, optimizer, learning rate and "
          "losses continue), tested from the file as `tools/test.py` does, fine-tuned from an mmcv "
          "1.x-era model-zoo-shaped file; with `--model`, the detectors too "
          "([docs/mmdet.md](docs/mmdet.md#checkpoints-train-save-test-resume-fine-tune-l6)). Fails, "
          "naming the fix, on an mmengine that cannot load its own checkpoints on torch >= 2.6 "
          "(conda-forge's 0.10.7); mmstack ships one that can (`recipes/mmengine`)"),
)

# Parts the parent asks for only when an option asks: part -> the option.
OPTIONAL_PARTS = {"L5-detector": "--model"}
# The levels an option extends (the parent refuses the option when --levels leaves them all out).
EXTENDED_BY = {"--model": ("L5", "L6"), "--nproc": ("L5",)}

# L4's modes: a name for a subset of _ladder_ops.CHECKS (by op), None for every check.
L4_SETS: dict[str, tuple[str, ...] | None] = {
    "quick": ("roi_align", "nms", "box_iou_rotated", "deform_conv2d", "points_in_boxes_cpu"),
    "complete": None,
}

BY_ID = {lv.id: lv for lv in TABLE}
LEVELS = tuple(BY_ID)
TITLES = {lv.id: lv.title for lv in TABLE}
NEEDS = {lv.id: lv.needs for lv in TABLE if lv.needs}
PARTS = {lv.id: lv.parts for lv in TABLE}
L4_MODES = tuple(L4_SETS)


def level_of(part: str) -> str:
    """The level a part belongs to ("L3-info" -> "L3")."""
    return next(lv.id for lv in TABLE if part in lv.parts)


def all_parts() -> tuple[str, ...]:
    return tuple(p for lv in TABLE for p in lv.parts)
