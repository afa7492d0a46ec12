"""Issue 43 item 3: a source patch's A/B on compile units (mmstack_lab.build_cost.patch_units_ab).

A real tiny A/B: a patch that trims a helper header's includes, compiled ABBA with the recipe's
flags; the objects carry the same code; a patch that does not apply and bad input are one line
and exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mmstack_lab.build_cost.patch_units_ab import ab
from mmstack_lab.build_cost.unit_anatomy import Failed

CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
PATCH = """--- a/mmcv/ops/csrc/common/helper.hpp
+++ b/mmcv/ops/csrc/common/helper.hpp
@@ -1,4 +1,3 @@
 #pragma once
-#include <map>
 #include <string>
 #include <vector>
"""


def tree(root: Path) -> Path:
    csrc = root / "mmcv" / "ops" / "csrc"
    (csrc / "common").mkdir(parents=True)
    (csrc / "pytorch").mkdir()
    (csrc / "common" / "helper.hpp").write_text("#pragma once\n#include <map>\n#include <string>\n#include <vector>\n")
    (csrc / "pytorch" / "unit.cpp").write_text(
        '#include "helper.hpp"\nint n(const std::vector<std::string>& v) { return int(v.size()); }\n'
    )
    return root


def tools(tmp: Path) -> dict[str, str]:
    inc = str(CUDA_HOME / "targets" / "x86_64-linux" / "include")
    return {
        "torch": str(tmp / "torch"),
        "prefix": str(tmp),
        "python_include": str(tmp),
        "cuda_home": str(CUDA_HOME),
        "cuda_include": inc,
        "cuda_libs_include": inc,
    }


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("patch") is None, reason="needs g++ and GNU patch")
def test_tiny_patch_ab_same_code(tmp_path):
    patch = tmp_path / "0099-fewer-includes.patch"
    patch.write_text(PATCH)
    data = ab(tree(tmp_path / "src"), patch, ["pytorch/unit.cpp"], tools(tmp_path), "90", rounds=1)
    row = data["units"]["pytorch/unit.cpp"]
    assert data["order"] == "ABBA" and data["patch"] == patch.name
    assert len(row["cpu_s"]["A"]) == len(row["cpu_s"]["B"]) == 2 and row["median_A_s"] > 0
    assert row["same_code_and_data"] is True and data["summary"]["all_same_code_and_data"] is True
    # A is the tree as given: the patch went to the copy only
    assert "<map>" in (tmp_path / "src" / "mmcv" / "ops" / "csrc" / "common" / "helper.hpp").read_text()


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")
def test_patch_that_does_not_apply_is_refused(tmp_path):
    patch = tmp_path / "bad.patch"
    patch.write_text(PATCH.replace("-#include <map>", "-#include <set>"))
    with pytest.raises(Failed, match="does not apply"):
        ab(tree(tmp_path / "src"), patch, ["pytorch/unit.cpp"], tools(tmp_path), "90", rounds=1)


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for argv in (
        ["--src", str(tmp_path), "--patch", "x.patch"],
        ["--src", str(tree(tmp_path / "t")), "--patch", str(tmp_path / "none.patch")],
    ):
        run = subprocess.run(
            [sys.executable, "-m", "mmstack_lab.build_cost.patch_units_ab", *argv, "--units", "pytorch/unit.cpp"],
            capture_output=True,
            text=True,
        )
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1


def test_committed_diet_ab_agrees_with_itself_and_names_its_patch():
    res = Path(__file__).resolve().parents[1] / "results" / "cpu-dev" / "build-unit-anatomy"
    doc = json.loads((res / "cu_helper_diet_ab.json").read_text())
    assert (res / doc["patch"]).is_file()  # the prototype's diff lies beside its A/B
    rows = doc["units"]
    a = sum(r["median_A_s"] for r in rows.values())
    b = sum(r["median_B_s"] for r in rows.values())
    assert doc["summary"]["saving"] == round(1 - b / a, 3) and b < a
    assert doc["summary"]["all_identical_bytes"] is False  # same code, not the same bytes (README)
    for row in rows.values():
        assert len(row["cpu_s"]["A"]) == len(row["cpu_s"]["B"]) == doc["order"].count("A")
    text = (res / "cu_helper_diet_ab.json").read_text()
    assert "/tmp/" not in text and "/root/" not in text and "/usr/" not in text


@pytest.mark.skipif(
    shutil.which("patch") is None or not (CUDA_HOME / "bin" / "nvcc").is_file(), reason="needs nvcc and GNU patch"
)
def test_a_cu_patch_that_changes_no_code_is_judged_same_code(tmp_path):
    root = tree(tmp_path / "src")
    (root / "mmcv" / "ops" / "csrc" / "pytorch" / "k.cu").write_text(
        "// one\n__global__ void twice(float* x) { x[threadIdx.x] *= 2.f; }\n"
    )
    patch = tmp_path / "comment.patch"
    patch.write_text(
        "--- a/mmcv/ops/csrc/pytorch/k.cu\n+++ b/mmcv/ops/csrc/pytorch/k.cu\n@@ -1,2 +1,2 @@\n-// one\n+// two\n __global__ void twice(float* x) { x[threadIdx.x] *= 2.f; }\n"
    )
    row = ab(root, patch, ["pytorch/k.cu"], tools(tmp_path), "90", rounds=1)["units"]["pytorch/k.cu"]
    # nvcc's objects differ in their tmpxft temp name only, which same_code sets aside
    assert row["same_code_and_data"] is True
