"""`mmstack verify`: the real ladder on a real mmcv, fault injection, and L2's decision."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mmstack.verify import ladder
from mmstack.verify.ladder import decide_cuda, parse_levels
from mmstack.verify.levels import L4_SETS

ROOT = Path(__file__).resolve().parents[1]
FAULTS = ROOT / "tests" / "data" / "faults"


def verify(*args: str, pythonpath: Path | None = None, timeout: float = 120):
    env = {**os.environ, "COLUMNS": "200"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath)] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, "-m", "mmstack.cli", "verify", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=ROOT)
    return proc


def levels_of(proc) -> dict:
    return {lv["level"]: lv for lv in json.loads(proc.stdout)["levels"]}


# -- the real thing ----------------------------------------------------------------------------------


@pytest.mark.slow  # five child processes, each importing torch (30-60 s on a 2-core CI machine)
def test_cpu_ladder_passes_on_a_real_mmcv(real_mmcv_python):
    proc = verify("--json", "--python", real_mmcv_python, timeout=600)
    out = levels_of(proc)
    for level in ("L1", "L3", "L4", "L5"):
        assert out[level]["status"] == "PASS", (level, out[level]["reason"], out[level]["diagnosis"],
                                                out[level]["evidence"])
    if out["L2"]["status"] == "SKIP":  # a CPU install, or no GPU on this machine
        assert out["L2"]["reason"], "a skip states its reason"
    else:
        assert out["L2"]["status"] == "PASS", out["L2"]
    assert proc.returncode == 0, proc.stderr
    l3 = out["L3"]["evidence"]
    assert l3["info"]["compiler"] and "collect_env" in l3["info"]
    assert not l3["load"].get("missing_libraries"), l3["load"]
    assert any("libc10" in name for name in l3["load"]["needed"])  # DT_NEEDED read from the ELF
    l4 = {r["op"]: r for r in out["L4"]["evidence"]["ops"]}
    assert list(l4) == list(L4_SETS["quick"])  # quick: a named subset of the complete checks
    for op, r in l4.items():
        assert r["status"] == "pass" and "known-values" in r["references"], (op, r)
    losses = out["L5"]["evidence"]["losses"]
    assert losses[-1] < losses[0]


def test_table_output_on_a_real_mmcv(real_mmcv_python):
    proc = verify("--levels", "L1", "--python", real_mmcv_python)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "L1" in proc.stdout and "PASS" in proc.stdout and "mmcv 2." in proc.stdout
    assert "all requested levels pass" in proc.stderr


# -- fault injection: stand-in mmcv packages first on the path ------------------------------------------


def test_segfault_on_import_is_an_L1_fail_and_the_ladder_finishes():
    proc = verify("--json", pythonpath=FAULTS / "segv_import")
    assert proc.returncode == 1
    out = levels_of(proc)
    l1 = out["L1"]
    assert l1["status"] == "FAIL" and "SIGSEGV" in l1["reason"]
    assert l1["evidence"]["signal"] == "SIGSEGV" and l1["evidence"]["step"] == "import mmcv"
    assert "Segmentation fault" in l1["evidence"]["output_tail"]  # faulthandler's stack
    assert l1["diagnosis"]["rule"] == "crash" and "import mmcv" in l1["diagnosis"]["cause"]
    assert [out[lv]["status"] for lv in ("L2", "L3", "L4", "L5")] == ["NOT RUN"] * 4
    assert out["L2"]["reason"] == "needs L1, which failed"


def test_hang_is_a_timeout_fail():
    proc = verify("--json", "--timeout", "2", pythonpath=FAULTS / "hang_import")
    assert proc.returncode == 1
    out = levels_of(proc)
    assert out["L1"]["status"] == "FAIL" and out["L1"]["evidence"]["timed_out"] is True
    assert "timed out in import mmcv" in out["L1"]["reason"]
    assert out["L1"]["diagnosis"]["rule"] == "hang" and "--timeout" in out["L1"]["diagnosis"]["fix"]
    assert out["L3"]["status"] == "NOT RUN"


def test_undefined_torch_symbol_is_an_abi_mismatch():
    proc = verify("--json", "--levels", "L1,L3,L4,L5", pythonpath=FAULTS / "undefined_symbol")
    assert proc.returncode == 1
    out = levels_of(proc)
    assert out["L1"]["status"] == "PASS"
    l3 = out["L3"]
    assert l3["status"] == "FAIL" and "undefined symbol" in l3["reason"]
    assert l3["diagnosis"]["rule"] == "torch-abi-mismatch"
    assert "_ZN3c10" in l3["diagnosis"]["cause"] and "rebuild mmcv against" in l3["diagnosis"]["fix"]
    assert out["L4"]["status"] == "NOT RUN" and out["L4"]["reason"] == "needs L3, which failed"
    assert out["L5"]["status"] == "NOT RUN"


def test_no_kernel_image_is_an_L4_fail_naming_the_arch_fix():
    proc = verify("--json", "--levels", "L1,L3,L4,L5", pythonpath=FAULTS / "no_kernel_image")
    assert proc.returncode == 1
    out = levels_of(proc)
    assert out["L3"]["status"] == "PASS", out["L3"]
    l4 = out["L4"]
    assert l4["status"] == "FAIL" and "no kernel image" in l4["reason"]
    ops = {r["op"]: r for r in l4["evidence"]["ops"]}
    assert list(ops) == list(L4_SETS["quick"]) and l4["evidence"]["mode"] == "quick"  # every op was tried
    assert all(r["status"] == "fail" and "no kernel image" in r["reason"] for r in ops.values())  # each error kept
    assert l4["diagnosis"]["rule"] == "no-kernel-image"
    assert "TORCH_CUDA_ARCH_LIST" in l4["diagnosis"]["fix"]
    assert out["L5"]["status"] == "NOT RUN"


def test_segfault_in_get_compiler_version_keeps_the_rest_of_L3():
    proc = verify("--json", "--levels", "L1,L3,L4,L5", pythonpath=FAULTS / "compiler_segv")
    assert proc.returncode == 1
    out = levels_of(proc)
    l3 = out["L3"]
    assert l3["status"] == "FAIL" and l3["reason"] == "crashed with SIGSEGV in get_compiler_version"
    assert l3["diagnosis"]["rule"] == "compiler-abi-segfault"
    assert "C++ runtime" in l3["diagnosis"]["cause"] and "_GLIBCXX_USE_CXX11_ABI" in l3["diagnosis"]["fix"]
    # the load child ran apart from the crash: its evidence survives
    assert l3["evidence"]["load"]["ext_import"] == "ok" and l3["evidence"]["load"]["ops_import"] == "ok"
    assert l3["evidence"]["info"]["signal"] == "SIGSEGV"
    assert out["L4"]["status"] == "NOT RUN" and out["L5"]["status"] == "NOT RUN"


@pytest.fixture
def ext_missing_cudnn(tmp_path) -> Path:
    """A real ELF mmcv/_ext whose DT_NEEDED names libcudnn.so.8, which is then removed."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("needs a C compiler to build the stand-in ext")
    pkg = tmp_path / "mmcv"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('__version__ = "2.2.0"\n')
    (pkg / "ops").mkdir()
    (pkg / "ops" / "__init__.py").write_text("from .. import _ext  # noqa: F401\n")
    lib = tmp_path / "libcudnn.so.8"
    (tmp_path / "dep.c").write_text("int cudnnGetVersion(void) { return 8000; }\n")
    (tmp_path / "ext.c").write_text("int cudnnGetVersion(void);\nint use(void) { return cudnnGetVersion(); }\n")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcudnn.so.8", "-o", str(lib), str(tmp_path / "dep.c")],
                   check=True)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(pkg / f"_ext{suffix}"), str(tmp_path / "ext.c"),
                    "-Wl,--no-as-needed", str(lib), "-lc"], check=True)
    lib.unlink()
    return tmp_path


def test_missing_library_names_the_package(ext_missing_cudnn):
    proc = verify("--json", "--levels", "L1,L3", pythonpath=ext_missing_cudnn)
    assert proc.returncode == 1
    l3 = levels_of(proc)["L3"]
    assert l3["status"] == "FAIL"
    load = l3["evidence"]["load"]
    assert "libcudnn.so.8" in load["needed"] and "libcudnn.so.8" in load["missing_libraries"]
    assert load["libraries"]["libc.so.6"].startswith("/")  # found by the loader, with its path
    assert l3["diagnosis"]["rule"] == "missing-library"
    assert "libcudnn.so.8" in l3["diagnosis"]["cause"] and "install cudnn" in l3["diagnosis"]["fix"]


@pytest.fixture(scope="module")
def cxx_objects(tmp_path_factory) -> dict:
    """Two small C++ shared objects using std::ostringstream: libstdc++ shared, and static."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("needs g++ to build the C++ stand-ins")
    d = tmp_path_factory.mktemp("cxx")
    src = d / "v.cpp"
    src.write_text('#include <sstream>\nstd::string v() { std::ostringstream s; s << "GCC " << __GNUC__; return s.str(); }\n')
    out = {}
    for kind, flags in (("shared", []), ("static", ["-static-libstdc++"])):
        so = d / f"{kind}.so"
        proc = subprocess.run([cxx, "-shared", "-fPIC", *flags, "-o", str(so), str(src)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"g++ cannot link {kind} libstdc++ here: {proc.stderr.strip()[-200:]}")
        out[kind] = str(so)
    return out


def test_libstdcxx_linkage(cxx_objects):
    assert ladder.libstdcxx_linkage(cxx_objects["shared"]) == "shared"
    assert ladder.libstdcxx_linkage(cxx_objects["static"]) == "static"
    assert ladder.libstdcxx_linkage(str(FAULTS / "README.md")) is None  # not ELF


def test_l3_crash_with_a_static_libstdcxx_names_it(cxx_objects):
    """What an H200 showed: the ext loads, get_compiler_version segfaults, the ext has its own libstdc++."""
    lad = ladder._Ladder(python=sys.executable, timeout=60, expect_gpu=False, env=None)
    load = ladder.ChildRun("L3", 0, 1.0, done=True, evidence={"ext_path": cxx_objects["static"], "ext_import": "ok"})
    info = ladder.ChildRun("L3-info", -11, 1.0, step="get_compiler_version", output="Fatal Python error: Segmentation fault")
    result = lad.l3(load, info)
    assert result.status == "FAIL" and result.reason == "crashed with SIGSEGV in get_compiler_version"
    assert result.evidence["load"]["libstdcxx"] == "static"
    assert result.diagnosis.rule == "static-libstdcxx"
    load.evidence["ext_path"] = cxx_objects["shared"]
    assert lad.l3(load, info).diagnosis.rule == "compiler-abi-segfault"
    info = ladder.ChildRun("L3-info", 0, 1.0, done=True, evidence={"compiler": "GCC 13.3"})
    load.evidence["ext_path"] = cxx_objects["static"]
    passed = lad.l3(load, info)
    assert passed.status == "PASS" and "static libstdc++" in passed.reason


# -- options -------------------------------------------------------------------------------------------


def test_bad_levels_and_bad_python_are_bad_input():
    proc = verify("--levels", "L1,L9")
    assert proc.returncode == 2 and "unknown level 'L9'" in proc.stderr
    proc = verify("--python", "/nonexistent/python")
    assert proc.returncode == 2 and "/nonexistent/python" in proc.stderr


def test_parse_levels():
    assert parse_levels(None) == ladder.LEVELS
    assert parse_levels("l3, L1,4") == ("L1", "L3", "L4")
    assert parse_levels("all") == ladder.LEVELS


def test_ladder_imports_with_the_stdlib_alone():
    # -S: no site-packages; the checkout's src/ only, through PYTHONPATH
    code = ("import sys; import mmstack.verify.ladder, mmstack.verify.diagnose;"
            "bad = {'pydantic', 'rich', 'typer', 'elftools'} & set(sys.modules); assert not bad, bad")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.returncode == 0, proc.stderr


def test_both_processes_read_one_level_table():
    """levels.py is the one table: the child runs a function for each of its parts (and doctor's
    fingerprint), and the parent's names are the table's."""
    from mmstack.verify import levels

    spec = importlib.util.spec_from_file_location("_ladder_child_under_test", ladder.CHILD)
    child = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(child)
    assert set(child.RUNNERS) == {"doctor", *levels.all_parts()}  # a part without its function fails the import
    assert child.RUNNERS["L3-info"] is child.level_l3_info and child.RUNNERS["doctor"] is child.fingerprint
    assert child.LEVEL_TABLE.L4_SETS == levels.L4_SETS
    assert (ladder.LEVELS, ladder.TITLES, ladder.NEEDS, ladder.PARTS) == (levels.LEVELS, levels.TITLES, levels.NEEDS,
                                                                          levels.PARTS)
    assert [levels.level_of(p) for p in levels.all_parts()] == ["L1", "L2", "L3", "L3", "L4", "L5", "L5", "L6"]
    assert set(levels.OPTIONAL_PARTS) <= set(levels.all_parts()) and set(levels.EXTENDED_BY) >= set(levels.OPTIONAL_PARTS.values())


def test_child_entry_imports_only_stdlib_torch_and_mmcv():
    tree = ast.parse(ladder.CHILD.read_text())
    allowed = set(sys.stdlib_module_names) | {"torch", "torchvision", "mmcv", "mmengine", "__future__"}
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        for name in names:
            assert name.split(".")[0] in allowed, name


# -- L2's decision (pure) ------------------------------------------------------------------------------

H100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}


def l2(**kw):
    ev = {"torch_version": "2.5.1", "torch_cuda": "12.4", "driver": "575.51.03", "driver_cuda": "12.9",
          "cuda_available": True, "devices": [dict(H100)]}
    ev.update(kw)
    return ev


@pytest.mark.parametrize(
    "ev, listing, expect_gpu, status, coverage, problem",
    [
        (l2(), {"sass": ["8.0", "9.0"], "ptx": []}, False, "PASS", "native", None),
        (l2(), {"sass": ["8.0", "8.6"], "ptx": []}, False, "FAIL", "none", "no kernel image"),
        (l2(), {"sass": ["8.0"], "ptx": ["8.0"]}, False, "PASS", "ptx-jit", None),
        (l2(devices=[{"name": "RTX 4090", "compute_capability": "8.9"}]), {"sass": ["8.6"], "ptx": []},
         False, "PASS", "lower-minor", None),
        (l2(), {"sass": [], "ptx": []}, False, "FAIL", None, "holds no CUDA code"),
        (l2(torch_cuda=None, cuda_available=False, devices=None, driver=None), {}, False, "SKIP", None, None),
        (l2(torch_cuda=None, cuda_available=False, devices=None, driver=None), {}, True, "FAIL", None, "CPU build"),
        (l2(cuda_available=False, devices=None, driver=None, driver_cuda=None), {}, False, "SKIP", None, None),
        (l2(cuda_available=False, devices=None, driver=None, driver_cuda=None), {}, True, "FAIL", None, "no NVIDIA"),
        (l2(torch_cuda="12.9", cuda_available=False, devices=None, driver="470.57.02", driver_cuda=None), {},
         False, "FAIL", None, "driver version is insufficient"),
    ],
)
def test_l2_decision(ev, listing, expect_gpu, status, coverage, problem):
    got, reason, prob, _extra = decide_cuda(ev, listing, expect_gpu=expect_gpu)
    assert got == status, reason
    assert reason
    if coverage:
        assert ev["devices"][0]["coverage"] == coverage
    assert (prob is None) == (problem is None) and (problem is None or problem in prob), prob


def test_l2_driver_too_old_diagnosis_names_the_driver_needed():
    ev = l2(torch_cuda="12.9", cuda_available=False, devices=None, driver="470.57.02", driver_cuda=None)
    _status, reason, _problem, extra = decide_cuda(ev, {}, expect_gpu=True)
    assert extra["driver_needed"] == "525.60.13"
    assert "470.57.02" in reason and "525.60.13" in reason
