"""mmstack_lab.build_cost.ext_sections: where two builds of mmcv's _ext differ (issue 43 item 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mmstack_lab.build_cost import ext_sections

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "lab" / "results" / "cpu-dev" / "build-reproducibility" / "ext_sections.json"


def test_sections_reads_every_section_of_a_real_elf_file():
    blob = Path(sys.executable).resolve().read_bytes()
    secs = ext_sections.sections(blob)
    assert ".text" in secs and secs[".text"]["size"] > 0 and len(secs[".text"]["sha256"]) == 64


def test_the_patterns_find_a_build_folder_and_nvcc_temp_names():
    blob = b"x/rattler-build_mmcv_1796487776/work/a.cu\0_GLOBAL__sub_I_tmpxft_0001a2b3_00000000_7\0"
    assert ext_sections.WORK_DIR.findall(blob) == [b"rattler-build_mmcv_1796487776"]
    assert len(ext_sections.TMPXFT.findall(blob)) == 1


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mmstack_lab.build_cost.ext_sections", str(tmp_path / "x.conda")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "not a .conda" in proc.stderr


def test_the_committed_comparison_shows_each_build_embeds_its_own_work_folder():
    """Two builds of the same compiled sources (morning, evening) are not byte-identical: each
    embeds its own rattler-build work folder, and .text keeps its size while its bytes change."""
    doc = json.loads(RESULT.read_text())
    pkgs = doc["packages"]
    assert not doc["identical_bytes"]
    assert len({p["work_dirs"][0] for p in pkgs.values()}) == len(pkgs)
    assert all(len(p["work_dirs"]) == 1 and p["work_dir_strings"] > 1000 for p in pkgs.values())
    assert ".text" in doc["same_size_sections_differing"]
