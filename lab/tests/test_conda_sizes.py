"""mmstack_lab.build_cost.conda_sizes (issue 24, fat-build size): where an mmcv .conda's bytes are.

nvcc compiles tests/data/fatbin/kernel.cu into a shared object for two SASS targets, with the
recipe's `-Xfatbin -compress-all`; the object goes into a .conda laid out as conda's v2 format is
(a zip of metadata.json and zstd tar archives `pkg-*` and `info-*`) under the name mmcv's `_ext`
has. The script must find the `_ext`, its `.nv_fatbin` section and each arch's stored bytes.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import zstandard

ROOT = Path(__file__).resolve().parents[2]
MODULE = "mmstack_lab.build_cost.conda_sizes"
KERNEL = ROOT / "tests" / "data" / "fatbin" / "kernel.cu"
EXT = "lib/python3.12/site-packages/mmcv/_ext.cpython-312-x86_64-linux-gnu.so"


def _tar_zst(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return zstandard.ZstdCompressor(level=3).compress(raw.getvalue())


def test_a_package_of_a_real_ext_is_split_into_device_code_per_arch(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: this test compiles a real CUDA object")
    so = tmp_path / "ext.so"
    subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                    "-gencode", "arch=compute_90,code=sm_90", "-Xfatbin", "-compress-all", str(KERNEL), "-o", str(so)],
                   check=True, capture_output=True)
    conda = tmp_path / "mmcv-2.2.0-cuda130_test_0.conda"
    stem = conda.name[:-len(".conda")]
    with zipfile.ZipFile(conda, "w") as z:
        z.writestr("metadata.json", json.dumps({"conda_pkg_format_version": 2}))
        z.writestr(f"pkg-{stem}.tar.zst", _tar_zst({EXT: so.read_bytes(), "lib/python3.12/site-packages/mmcv/version.py": b"x\n"}))
        z.writestr(f"info-{stem}.tar.zst", _tar_zst({"info/index.json": b"{}"}))
    done = subprocess.run([sys.executable, "-m", MODULE, str(conda)], capture_output=True, text=True, check=True)
    (pkg,) = json.loads(done.stdout)["packages"]
    assert pkg["conda_bytes"] == conda.stat().st_size and pkg["files"] == 2
    assert pkg["ext"] == EXT and pkg["ext_bytes"] == so.stat().st_size
    assert sorted(pkg["stored_by_arch"]) == ["8.0", "9.0"] and all(v > 0 for v in pkg["stored_by_arch"].values())
    # the section holds the entries and their container headers: at least their bytes, less than the file
    assert sum(pkg["stored_by_arch"].values()) <= pkg["nv_fatbin_bytes"] < pkg["ext_bytes"]


def test_anything_but_a_conda_file_is_refused_with_exit_2(tmp_path):
    wheel = tmp_path / "mmcv-2.2.0-cp312-cp312-linux_x86_64.whl"
    wheel.write_bytes(b"PK")
    done = subprocess.run([sys.executable, "-m", MODULE, str(wheel)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "not a .conda file" in done.stderr


def test_bench_arch_sets_refuses_an_unknown_config_with_exit_2(tmp_path):
    """mmstack_lab.build_cost.bench_arch_sets (the per-unit numbers beside these sizes): a config it does not
    have is one line and exit 2, before anything is unpacked or compiled."""
    done = subprocess.run([sys.executable, "-m", "mmstack_lab.build_cost.bench_arch_sets", "--sdist", str(tmp_path / "none.tar.gz"),
                           "--torch-include", str(tmp_path), "--config", "fat+zstd"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--config fat+zstd is not one of" in done.stderr
