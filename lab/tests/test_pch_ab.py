"""Issue 43 item 3: a precompiled pytorch_cpp_helper.hpp for mmcv's C++ units (mmstack_lab.build_cost.pch_ab).

A real tiny A/B: gcc builds the .gch with the units' flags, uses it (gcc -H says so), and the
objects with and without it carry the same code and data; the committed result agrees with
itself; bad input is one line and exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mmstack_lab.build_cost.pch_ab import HEADER, ab, pch_command

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "lab" / "results" / "cpu-dev" / "build-unit-anatomy" / "pch_ab.json"
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


def test_pch_command_drops_the_unit_and_dep_file():
    cmd = ["g++", "-MMD", "-MF", "x.o.d", "-O2", "-Ifoo", "-c", "unit.cpp", "-o", "x.o", "-std=c++17"]
    assert pch_command(cmd, Path("h.hpp"), Path("h.hpp.gch")) == [
        "g++",
        "-x",
        "c++-header",
        "-O2",
        "-Ifoo",
        "-std=c++17",
        "h.hpp",
        "-o",
        "h.hpp.gch",
    ]


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_tiny_pch_is_used_and_changes_no_code(tmp_path):
    csrc = tmp_path / "tree" / "mmcv" / "ops" / "csrc"
    (csrc / "common").mkdir(parents=True)
    (csrc / "pytorch" / "cpu").mkdir(parents=True)
    (tmp_path / "tree" / HEADER).write_text(
        "#pragma once\n#include <map>\n#include <string>\n#include <vector>\n#include <algorithm>\n"
    )
    body = 'int count(std::vector<int> v) { std::sort(v.begin(), v.end()); std::map<int, std::string> m; m[v[0]] = "x"; return int(m.size()); }\n'
    (csrc / "pytorch" / "a.cpp").write_text('// licence\n#include "pytorch_cpp_helper.hpp"\n' + body)
    (csrc / "pytorch" / "cpu" / "b.cpp").write_text(
        '#include "pytorch_cpp_helper.hpp"\n' + body.replace("count", "other")
    )
    tools = {
        "torch": str(tmp_path / "torch"),
        "prefix": str(tmp_path),
        "python_include": str(tmp_path),
        "cuda_home": str(CUDA_HOME),
        "cuda_include": str(CUDA_HOME / "include"),
        "cuda_libs_include": str(CUDA_HOME / "include"),
    }
    data = ab(tmp_path / "tree", ["pytorch/a.cpp", "pytorch/cpu/b.cpp"], tools, rounds=1)
    assert data["order"] == "ABBA" and data["pch"]["bytes"] > 0
    for row in data["units"].values():
        assert len(row["cpu_s"]["A"]) == len(row["cpu_s"]["B"]) == 2
        assert row["same_code_and_data"] is True
    assert data["summary"]["all_same_code_and_data"] is True


def test_committed_result_agrees_with_itself():
    doc = json.loads(RESULT.read_text())
    rows = doc["units"]
    a = sum(r["median_A_s"] for r in rows.values())
    b = sum(r["median_B_s"] for r in rows.values())
    assert doc["summary"]["saving"] == round(1 - b / a, 3)
    assert doc["summary"]["all_same_code_and_data"] == all(r["same_code_and_data"] for r in rows.values())
    for row in rows.values():
        assert len(row["cpu_s"]["A"]) == len(row["cpu_s"]["B"]) == doc["order"].count("A")
    text = RESULT.read_text()
    assert "/tmp/" not in text and "/root/" not in text and "/usr/" not in text


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "mmstack_lab.build_cost.pch_ab", "--src", str(tmp_path), "--units", "pytorch/x.cpp"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1 and "--src" in run.stderr


PATCH = ROOT / "recipes" / "mmcv" / "patches" / "0015-precompile-cpp-helper.patch"
RUN = ROOT / "lab" / "results" / "h100" / "perf-run2"
BUILT = ROOT / "lab" / "results" / "cpu-dev" / "proof-cpu-proposed90"


def test_0015_entered_after_the_gpu_run_of_this_very_diff():
    """perf-run2 seeded the sm_90 mmcv built with 0015 on the CPU machine; its whole test section and
    the installed ladder passed on the H100. A build-only patch: no A/B of its own there."""
    from support.gpu_entry import check_tested

    assert check_tested(RUN, PATCH, package_file="mmcv-2.2.0-cuda130_sm90_py312_h360a1f8_500.conda") is None
    # the CPU build that made it read the same file, and took less CPU than the recipe without it
    def sha(listing: Path) -> str:
        return dict(line.split()[::-1] for line in listing.read_text().splitlines())["mmcv/0015-precompile-cpp-helper.patch"]

    assert sha(BUILT / "P" / "proposed.txt") == sha(RUN / "proposed.txt")


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_0015_applies_on_top_of_the_recipes_patches_without_fuzz(tmp_path):
    from mmstack_lab.standin.offline import patched_sdist

    work = patched_sdist("mmcv", tmp_path)  # the recipe's patches in order, 0015 last, --fuzz=0
    text = (work / "setup.py").read_text()
    compile(text, "setup.py", "exec")
    assert "def precompile_cpp_helper(" in text and "gch = precompile_cpp_helper(self.compiler, sources" in text
    assert "os.remove(gch)" in text and "'-x', 'c++-header'" in text
    # the header it precompiles is the one the C++ units include first, and a .gch never ships
    assert (work / HEADER).is_file()
    assert ".gch" not in (work / "MANIFEST.in").read_text()
    # a build-only patch: no `patch_ab:` line, so the proof's patchab stage has nothing of it to time
    assert not any(line.startswith("patch_ab:") for line in PATCH.read_text().splitlines())
