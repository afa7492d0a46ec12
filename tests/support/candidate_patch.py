"""A mmdet/mmcv patch of ours against the installed package: the same script on each side (an overlay
of the installed package with the patch applied, or reversed where the installed package carries it
already, as mmstack_lab.ops.patch_ab makes it), and every case's result equal. tests/test_mmdet_*_patch.py
use it for their patches."""

from __future__ import annotations

from pathlib import Path

from mmstack_lab.ops import patch_ab

# The comparison scripts' digest (dtype, shape, sha256 of the bytes) of tensors, lists and dicts of
# them: equal digests, equal bit for bit. A script starts with it: `SCRIPT = DIGEST + r"""..."""`. The
# children run with the lab on their PYTHONPATH (patch_ab's child_env), so it is the case modules' own.
DIGEST = r"""
import hashlib
import torch
from mmstack_lab.common.case_digests import tensors as digest
"""


def released_equals_patched(patch: Path, python: str, script: str, dest: Path, *, package: str = "mmdet") -> dict:
    """Run `script` (printing a JSON object of lists of case results) released and patched; assert
    the installed package carries the patch exactly when the recipe lists it (patches/, not
    proposed/) and that each case is equal; return the released side."""
    over = patch_ab.overlay(patch, dest, python, package=package)
    # the overlay is the side the installed package is not: a recipe patch is reversed there
    assert over.side == ("released" if patch.parent.name == "patches" else "patched")
    sides = patch_ab.each_side(python, over, script, timeout=600)
    released, patched = sides["released"], sides["patched"]
    assert released.keys() == patched.keys()
    for part in released:
        for i, (a, b) in enumerate(zip(released[part], patched[part], strict=True)):
            assert a == b, f"{part}, case {i}: released {a} patched {b}"
    return released
