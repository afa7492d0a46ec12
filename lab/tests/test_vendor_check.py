"""mmstack_lab.arch.vendor_check on a real nvcc-built object: both listers agree, arch check's verdict
per GPU matches what the same rules give from cuobjdump's entries, and bad input is one line, exit 2."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from mmstack_lab.arch import vendor_check

KERNEL = Path(__file__).resolve().parents[2] / "tests" / "data" / "fatbin" / "kernel.cu"


@pytest.fixture(scope="module")
def so(tmp_path_factory) -> Path:
    if shutil.which("nvcc") is None or vendor_check.find_cuobjdump() is None:
        pytest.skip("needs nvcc and cuobjdump (the test extra's nvidia-cuda-cuobjdump)")
    out = tmp_path_factory.mktemp("vendor") / "k.so"
    subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_89,code=sm_89",
                    "-gencode", "arch=compute_89,code=compute_89", str(KERNEL), "-o", str(out)],
                   check=True, capture_output=True)
    return out


def test_an_sm89_plus_ptx_object_agrees_and_each_verdict_matches(so, tmp_path):
    out = tmp_path / "r.json"
    rc = vendor_check.main([str(so), "--gpu", "RTX 4090", "--gpu", "H200", "--gpu", "A100", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert rc == 0 and doc["cuobjdump"].startswith("13.")
    (pkg,) = doc["packages"]
    assert pkg["all_agree"] and pkg["objects"][0]["cuobjdump"] == {"ptx 8.9": 1, "sass 8.9": 2}  # + the device-link stub's cubin
    said = {g["gpu"]: (g["arch_check_exit"], g["from_cuobjdump"], g["agree"]) for g in pkg["gpus"]}
    assert said == {"RTX 4090": (0, "native", True), "H200": (0, "ptx-jit", True), "A100": (1, "none", True)}


def test_a_missing_package_is_one_line_and_exit_2(tmp_path, capsys):
    if vendor_check.find_cuobjdump() is None:
        pytest.skip("needs cuobjdump")
    assert vendor_check.main([str(tmp_path / "nope.conda")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.conda" in err[0] and "fix:" in err[0]
