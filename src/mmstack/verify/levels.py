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
    checks: str  # one line for the docs and --help: what the level proves


TABLE = (
    Level("L1", "import", None, ("L1",), "`import mmcv`: version and location"),
    Level("L2", "CUDA", "L1", ("L2",),
          "GPU(s), driver against torch's CUDA, the ext's archs (read from the .so) against the GPU"),
    Level("L3", "ops load", "L1", ("L3", "L3-info"),
          "mmcv._ext and mmcv.ops import, every DT_NEEDED library loads; then get_compiler_version, "
          "get_compiling_cuda_version and collect_env (they segfault when the ext and torch disagree "
          "on compiler or ABI), in a part of their own"),
    Level("L4", "ops run", "L3", ("L4",),
          "ops against known values, mmcv's CPU kernel (on a GPU) and torchvision: the quick set, or "
          "with --l4 complete every op mmcv.ops exports, each with what it was compared with"),
    Level("L5", "train", "L4", ("L5", "L5-detector"),
          "a few optimiser steps of a tiny DeformConv2d + RoIAlign model (the loss must fall); "
          "--model's detectors in a part of their own, --nproc's ranks under torchrun"),
    Level("L6", "checkpoints", "L4", ("L6",),
          "that model (and --model's detectors) through mmengine's Runner: saved, loaded, resumed, "
          "tested and fine-tuned from, each in a fresh process"),
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
