"""Issue 43 item 3: where an mmcv compile unit's CPU goes (mmstack_lab.build_cost.unit_anatomy).

A real tiny compile through the recipe's flags (mmcv_unit_flags.json): a C++ unit with g++
(-E line origins, -fsyntax-only, -ftime-report phases) and a CUDA unit with nvcc --time (host
and device phases), each with its helper-header floor; the committed result agrees with itself
and records no machine paths; bad input is one line and exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mmstack_lab.build_cost.unit_anatomy import anatomy, flags, summary

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "lab" / "results" / "cpu-dev" / "build-unit-anatomy" / "anatomy.json"
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


def tiny_tree(root: Path) -> Path:
    """An mmcv-shaped tree: the two helper headers (std headers standing in for torch's) and a unit of each kind."""
    csrc = root / "mmcv" / "ops" / "csrc"
    (csrc / "common").mkdir(parents=True)
    (csrc / "pytorch").mkdir()
    (csrc / "common" / "pytorch_cpp_helper.hpp").write_text(
        "#pragma once\n#include <map>\n#include <string>\n#include <vector>\n"
    )
    (csrc / "common" / "pytorch_cuda_helper.hpp").write_text("#pragma once\n#include <vector>\n")
    (csrc / "pytorch" / "unit.cpp").write_text(
        '#include "pytorch_cpp_helper.hpp"\nint count(const std::map<std::string, std::vector<int>>& m) { return int(m.size()); }\n'
    )
    (csrc / "pytorch" / "unit.cu").write_text(
        '#include "pytorch_cuda_helper.hpp"\n__global__ void twice(float* x) { x[threadIdx.x] *= 2.f; }\n'
    )
    return root


def tools(tmp: Path) -> dict[str, str]:
    return {
        "torch": str(tmp / "torch"),
        "prefix": str(tmp),
        "python_include": str(tmp),
        "cuda_home": str(CUDA_HOME),
        "cuda_include": str(CUDA_HOME / "targets" / "x86_64-linux" / "include"),
        "cuda_libs_include": str(CUDA_HOME / "targets" / "x86_64-linux" / "include"),
    }


def test_flags_are_the_build_ninja_ones():
    f = flags()
    # what torch's cpp_extension and the recipe put on every unit
    assert {"-std=c++17", "-fopenmp", "-O2", "-fPIC", "-DMMCV_WITH_CUDA", "-DTORCH_EXTENSION_NAME=_ext"} <= set(
        f["cxx"]
    )
    assert {"--expt-relaxed-constexpr", "-std=c++17", "-gencode=arch=compute_{arch},code=sm_{arch}"} <= set(f["cuda"])
    assert f["nvcc_append"] == ["-Xfatbin", "-compress-all", "--compress-mode=size"]


@pytest.mark.skipif(
    shutil.which("g++") is None or not (CUDA_HOME / "bin" / "nvcc").is_file(), reason="needs g++ and nvcc"
)
def test_tiny_units_compile_and_split_their_time(tmp_path):
    tree = tiny_tree(tmp_path / "tree")
    data = anatomy(tree, ["pytorch/unit.cpp", "pytorch/unit.cu"], tools(tmp_path), "90", floor=True)
    cpp, cu = data["units"]["pytorch/unit.cpp"], data["units"]["pytorch/unit.cu"]
    assert cpp["cpu_s"]["full"] > 0 and cpp["cpu_s"]["parse"] > 0 and cpp["object_bytes"] > 0
    # the unit's own line and the std headers' many
    assert cpp["lines"]["mmcv"] >= 1 and cpp["lines"]["system"] > 1000 and cpp["lines"]["torch"] == 0
    assert "phase parsing" in cpp["time_report"]["phases_s"]
    assert {"cicc", "ptxas", "cudafe++", "gcc (compiling)"} <= set(cu["phases_ms"])
    assert 0 < cu["host_share"] < 1 and 0 < cu["device_share"] < 1 and cu["host_share"] + cu["device_share"] <= 1.001
    assert set(data["floor"]) == {".cpp", ".cu"} and data["summary"] == summary(data)
    assert 0 < data["summary"][".cpp"]["floor_share"] <= 1


def test_committed_result_agrees_with_itself():
    doc = json.loads(RESULT.read_text())
    assert doc["arch"] == "90" and doc["summary"] == summary(doc)
    kinds = {Path(u).suffix for u in doc["units"]}
    assert kinds == {".cpp", ".cu"} and set(doc["floor"]) == kinds
    for unit, row in doc["units"].items():
        if unit.endswith(".cpp"):
            assert row["cpu_s"]["preprocess"] < row["cpu_s"]["parse"] < row["cpu_s"]["full"]
            assert row["lines"]["torch"] > row["lines"]["mmcv"]
        else:
            assert "cicc" in row["phases_ms"] and "ptxas" in row["phases_ms"]
    text = RESULT.read_text()
    assert "/tmp/" not in text and "/root/" not in text and "/usr/" not in text


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmstack_lab.build_cost.unit_anatomy",
            "--src",
            str(tmp_path),
            "--units",
            "pytorch/x.cpp",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "--src" in run.stderr
    tree = tiny_tree(tmp_path / "tree")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mmstack_lab.build_cost.unit_anatomy",
            "--src",
            str(tree),
            "--torch-python",
            sys.executable,
            "--units",
            "x.cpp",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
