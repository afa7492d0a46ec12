"""L3's glibc check (issue 26): an _ext whose GLIBC_x.y symbols are newer than the `__glibc`
floor its conda package declares fails L3, with a diagnosis and its fix; real objects, real
conda-meta records."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from mmstack.verify import diagnose

CHILD = Path(__file__).resolve().parents[1] / "src" / "mmstack" / "verify" / "_ladder_child.py"


def _child():
    spec = importlib.util.spec_from_file_location("_ladder_child_under_test", CHILD)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _prefix_with_ext(tmp_path: Path, declared: str | None) -> tuple[Path, Path]:
    """A conda-style prefix: mmcv's _ext (compiled here, needing GLIBC_2.32) and its conda-meta record."""
    if not shutil.which("gcc"):
        pytest.skip("no gcc on this machine")
    if tuple(int(x) for x in os.confstr("CS_GNU_LIBC_VERSION").split()[-1].split(".")) < (2, 32):
        pytest.skip("this glibc is older than 2.32")
    prefix = tmp_path / "prefix"
    ext = prefix / "lib" / "python3.11" / "site-packages" / "mmcv" / "_ext.cpython-311-x86_64-linux-gnu.so"
    ext.parent.mkdir(parents=True)
    src = tmp_path / "ext.c"
    src.write_text("#include <sys/single_threaded.h>\nint st(void) { return __libc_single_threaded; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(ext), str(src)], check=True)
    (prefix / "conda-meta").mkdir()
    depends = ["python >=3.11,<3.12.0a0"] + ([f"__glibc >={declared},<3.0.a0"] if declared else [])
    (prefix / "conda-meta" / "mmcv-2.2.0-cpu_py311_h0_0.json").write_text(json.dumps({
        "name": "mmcv", "version": "2.2.0", "build": "cpu_py311_h0_0", "depends": depends,
        "files": [ext.relative_to(prefix).as_posix()]}))
    return prefix, ext


def test_a_package_declaring_an_older_glibc_than_its_ext_needs_fails_with_the_fix(tmp_path):
    prefix, ext = _prefix_with_ext(tmp_path, "2.17")
    evidence, failure = _child().glibc_check(str(ext), str(prefix))
    assert evidence["glibc_needed"] == "2.32" and evidence["glibc_declared"] == "2.17"
    assert evidence["package"] == "mmcv-2.2.0-cpu_py311_h0_0"
    assert failure == ("mmcv._ext needs glibc 2.32 (GLIBC_2.32 symbols) but its package declares __glibc >=2.17 "
                       "(mmcv-2.2.0-cpu_py311_h0_0)")
    diag = diagnose.diagnose(failure)
    assert diag.rule == "glibc-floor-understated", diag
    assert "sysroot_linux-64 2.17" in diag.fix and "2.32" in diag.fix


@pytest.mark.parametrize("declared", ["2.32", "2.36", None])
def test_an_honest_or_absent_floor_passes(tmp_path, declared):
    prefix, ext = _prefix_with_ext(tmp_path, declared)
    evidence, failure = _child().glibc_check(str(ext), str(prefix))
    assert failure is None and evidence["glibc_needed"] == "2.32" and evidence["glibc_declared"] == declared


def test_outside_a_conda_prefix_nothing_is_declared(tmp_path):
    prefix, ext = _prefix_with_ext(tmp_path, "2.17")
    shutil.rmtree(prefix / "conda-meta")
    assert _child().declared_glibc(str(ext), str(prefix)) == (None, None)
