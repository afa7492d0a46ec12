"""mmstack.facts.fatbin against real objects: nvcc compiles tests/data/fatbin/kernel.cu for chosen
targets, and the listing must name exactly those targets."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from support.cli import mmstack

from mmstack.errors import BadInput
from mmstack.facts.fatbin import FatbinEntry, ObjectListing, list_fatbins, summarize

ROOT = Path(__file__).resolve().parents[1]

KERNEL = Path(__file__).parent / "data" / "fatbin" / "kernel.cu"
SO = ["-shared", "-Xcompiler", "-fPIC"]
PLUS_PTX = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_80,code=compute_80"]

# name -> (nvcc flags, expected SASS, expected PTX, needs a newer nvcc than CUDA 12.0)
TARGETS = {
    "sm80_ptx80": ([*SO, *PLUS_PTX], ("8.0",), ("8.0",), False),
    "sm90": ([*SO, "-gencode", "arch=compute_90,code=sm_90"], ("9.0",), (), False),
    "sm120_sm90a": (
        [*SO, "-gencode", "arch=compute_120,code=sm_120", "-gencode", "arch=compute_90a,code=sm_90a"],
        ("9.0a", "12.0"),
        (),
        True,
    ),
    "compressed": ([*SO, *PLUS_PTX, "-Xfatbin", "-compress-all"], ("8.0",), ("8.0",), False),
    "sm100f": ([*SO, "-gencode", "arch=compute_100f,code=sm_100f"], ("10.0f",), (), True),
    "ptx120a_uncompressed": (
        [*SO, "-gencode", "arch=compute_120a,code=compute_120a", "-compress-mode=none"],
        (),
        ("12.0a",),
        True,
    ),
    # -rdc object: its fatbin sits in __nv_relfatbin, which the runtime does not load directly
    "rdc_object": (["-c", "-rdc=true", *PLUS_PTX], (), (), False),
}


@pytest.fixture(scope="session")
def built(tmp_path_factory) -> dict[str, Path | str]:
    """Compile every target once, in parallel; a target this nvcc rejects maps to its error text."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: these tests compile real CUDA objects")
    out = tmp_path_factory.mktemp("fatbin")
    procs = {}
    for name, (flags, *_rest) in TARGETS.items():
        suffix = ".o" if "-c" in flags else ".so"
        target = out / f"{name}{suffix}"
        cmd = ["nvcc", *flags, str(KERNEL), "-o", str(target)]
        procs[name] = (target, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = {}
    for name, (target, proc) in procs.items():
        output, _ = proc.communicate()
        results[name] = target if proc.returncode == 0 else output.strip() or f"nvcc exited {proc.returncode}"
    return results


def _object(built, name: str) -> Path:
    result = built[name]
    if isinstance(result, Path):
        return result
    if TARGETS[name][3]:
        pytest.skip(f"this nvcc cannot build {name}: {result.splitlines()[-1]}")
    pytest.fail(f"nvcc failed on {name}: {result}")


def _one(listings: list[ObjectListing]) -> ObjectListing:
    assert len(listings) == 1, listings
    return listings[0]


@pytest.mark.parametrize("name", [n for n in TARGETS if n != "rdc_object"])
def test_lists_exactly_the_compiled_targets(built, name):
    path = _object(built, name)
    listing = _one(list_fatbins(path))
    _flags, sass, ptx, _new = TARGETS[name]
    assert listing.path == str(path)
    assert (listing.sass, listing.ptx) == (sass, ptx)
    assert {e.kind for e in listing.entries} == {k for k, archs in (("sass", sass), ("ptx", ptx)) if archs}
    assert all(e.size > 0 and e.section == ".nv_fatbin" for e in listing.entries)


def test_compress_all_marks_every_entry(built):
    listing = _one(list_fatbins(_object(built, "compressed")))
    assert listing.compressed
    assert all(e.compressed for e in listing.entries)


def test_sass_is_stored_uncompressed_by_default(built):
    # nvcc 12.8+/13 compress PTX by default (zstd) but leave SASS as it is
    listing = _one(list_fatbins(_object(built, "sm80_ptx80")))
    assert not any(e.compressed for e in listing.entries if e.kind == "sass")
    plain = _one(list_fatbins(_object(built, "ptx120a_uncompressed")))
    assert not plain.compressed


def test_compressed_payload_is_smaller(built):
    plain = _one(list_fatbins(_object(built, "sm80_ptx80")))
    packed = _one(list_fatbins(_object(built, "compressed")))
    assert sum(e.size for e in packed.entries if e.kind == "sass") < sum(
        e.size for e in plain.entries if e.kind == "sass"
    )


def test_relocatable_fatbin_is_listed_but_not_counted(built):
    listing = _one(list_fatbins(_object(built, "rdc_object")))
    assert {(e.kind, e.arch, e.section) for e in listing.entries} == {
        ("sass", "8.0", "__nv_relfatbin"),
        ("ptx", "8.0", "__nv_relfatbin"),
    }
    assert (listing.sass, listing.ptx) == ((), ())


def test_cpu_shared_object_has_no_entries(tmp_path):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build a CPU-only shared object")
    source = tmp_path / "cpu.c"
    source.write_text("int answer(void) { return 42; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", str(source), "-o", str(tmp_path / "cpu.so")], check=True)
    listing = _one(list_fatbins(tmp_path / "cpu.so"))
    assert listing.entries == () and listing.sass == () and not listing.compressed


def test_wheel_lists_each_shared_object(built, tmp_path):
    wheel = tmp_path / "mmcv-2.2.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(_object(built, "sm80_ptx80"), "mmcv/_ext.cpython-311-x86_64-linux-gnu.so")
        zf.write(_object(built, "sm90"), "mmcv.libs/libextra.so.1")
        zf.writestr("mmcv/__init__.py", "")
        zf.writestr("mmcv/not_elf.so", "a text file named like a shared object")
    listings = list_fatbins(wheel)
    assert [(x.path, x.sass, x.ptx) for x in listings] == [
        (f"{wheel}!mmcv/_ext.cpython-311-x86_64-linux-gnu.so", ("8.0",), ("8.0",)),
        (f"{wheel}!mmcv.libs/libextra.so.1", ("9.0",), ()),
    ]


def test_tar_bz2_package(built, tmp_path):
    package = tmp_path / "mmcv-2.2.0-cuda130_py311_0.tar.bz2"
    with tarfile.open(package, "w:bz2") as tar:
        tar.add(_object(built, "sm120_sm90a"), "lib/python3.11/site-packages/mmcv/_ext.so")
    listing = _one(list_fatbins(package))
    assert listing.path == f"{package}!lib/python3.11/site-packages/mmcv/_ext.so"
    assert listing.sass == ("9.0a", "12.0")


def _tar_zst(members: dict[str, Path]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for arcname, source in members.items():
            tar.add(source, arcname)
    try:
        import zstandard
    except ImportError:
        if shutil.which("zstd") is None:
            pytest.skip("neither the zstandard module nor the zstd command is here to build a .conda")
        return subprocess.run(["zstd", "-q", "-c"], input=raw.getvalue(), capture_output=True, check=True).stdout
    return zstandard.ZstdCompressor().compress(raw.getvalue())


@pytest.fixture()
def conda_package(built, tmp_path) -> Path:
    """A .conda built by hand the way conda-package-handling lays one out."""
    package = tmp_path / "mmcv-2.2.0-cuda130_sm90_py311_0.conda"
    so = _object(built, "sm120_sm90a")
    with zipfile.ZipFile(package, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("metadata.json", json.dumps({"conda_pkg_format_version": 2}))
        zf.writestr("info-mmcv-2.2.0-cuda130_sm90_py311_0.tar.zst", _tar_zst({"info/index.json": KERNEL}))
        zf.writestr(
            "pkg-mmcv-2.2.0-cuda130_sm90_py311_0.tar.zst",
            _tar_zst({"lib/python3.11/site-packages/mmcv/_ext.cpython-311-x86_64-linux-gnu.so": so}),
        )
    return package


def test_conda_package(conda_package):
    listing = _one(list_fatbins(conda_package))
    assert listing.path == f"{conda_package}!lib/python3.11/site-packages/mmcv/_ext.cpython-311-x86_64-linux-gnu.so"
    assert (listing.sass, listing.ptx) == (("9.0a", "12.0"), ())


def test_conda_package_without_zstandard_uses_the_zstd_command(conda_package, monkeypatch):
    if shutil.which("zstd") is None:
        pytest.skip("no zstd command to fall back on")
    monkeypatch.setitem(sys.modules, "zstandard", None)  # makes `import zstandard` raise ImportError
    assert _one(list_fatbins(conda_package)).sass == ("9.0a", "12.0")


def test_conda_package_without_any_zstd_says_how_to_fix(conda_package, monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(BadInput) as caught:
        list_fatbins(conda_package)
    assert caught.value.fix == "pip install zstandard" and str(conda_package) in str(caught.value)


def test_not_an_elf_file_is_bad_input(tmp_path):
    path = tmp_path / "notes.so"
    path.write_text("not an ELF object\n")
    with pytest.raises(BadInput) as caught:
        list_fatbins(path)
    assert caught.value.exit_code == 2 and str(path) in str(caught.value)


def test_missing_file_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        list_fatbins(tmp_path / "absent.so")


def test_truncated_fatbin_is_bad_input(built, tmp_path):
    from elftools.elf.elffile import ELFFile

    path = tmp_path / "broken.so"
    shutil.copy(_object(built, "sm90"), path)
    with open(path, "rb") as f:
        offset = ELFFile(f).get_section_by_name(".nv_fatbin")["sh_offset"]
    with open(path, "r+b") as f:
        f.seek(offset + 8)
        f.write(struct.pack("<Q", 1 << 40))  # the first container now claims a terabyte
    with pytest.raises(BadInput, match="overruns") as caught:
        list_fatbins(path)
    assert str(path) in str(caught.value)


def test_summarize_is_json_and_unions_archs(built):
    listings = [*list_fatbins(_object(built, "sm90")), *list_fatbins(_object(built, "sm80_ptx80"))]
    summary = json.loads(json.dumps(summarize(listings)))
    assert summary["sass"] == ["8.0", "9.0"] and summary["ptx"] == ["8.0"]
    assert [f["sass"] for f in summary["files"]] == [["9.0"], ["8.0"]]
    assert {"kind", "arch", "compressed", "size", "section"} <= set(summary["files"][0]["entries"][0])


def test_archs_sort_numerically():
    entries = tuple(FatbinEntry("sass", a, False, 1) for a in ("12.0", "9.0a", "8.6", "10.0f", "9.0", "8.6"))
    assert ObjectListing("x.so", entries).sass == ("8.6", "9.0", "9.0a", "10.0f", "12.0")


@pytest.mark.parametrize("name, expect, code, words", [
    ("sm80_ptx80", "8.0+PTX", 0, "matches 8.0+PTX"),
    ("sm80_ptx80", "8.0", 1, "PTX 8.0 not in the list"),
    ("sm90", "9.0", 0, "matches 9.0"),
    ("sm90", "8.9;9.0", 1, "SASS 8.9 missing"),
    ("compressed", "sm_80 compute_80", 0, "matches"),
])
def test_expect_compares_the_ext_to_an_arch_list(built, name, expect, code, words):
    """`mmstack fatbin --expect LIST`: what recipes/mmcv's test runs on every CUDA build."""
    rc, _, err = mmstack("fatbin", "--expect", expect, str(_object(built, name)))
    assert rc == code, err
    assert words in err


def test_expect_with_a_malformed_list_is_bad_input(built):
    rc, _, err = mmstack("fatbin", "--expect", "8.9.1", str(_object(built, "sm90")))
    assert rc == 2 and "--expect" in err


# -- `mmstack arch check --package`: the reader's answer for a GPU ---------------------------------


def _check(gpu: str, package: Path) -> tuple[int, dict]:
    code, out, err = mmstack("arch", "check", "--gpu", gpu, "--package", str(package), "--json")
    assert code in (0, 1), err
    return code, json.loads(out)


def test_package_check_on_a_wheel_the_weakest_object_decides(built, tmp_path):
    wheel = tmp_path / "mmcv-2.2.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(_object(built, "sm80_ptx80"), "mmcv/_ext.cpython-311-x86_64-linux-gnu.so")
        zf.write(_object(built, "sm90"), "mmcv.libs/libextra.so.1")
    code, a = _check("H100", wheel)  # _ext: only PTX 8.0 runs on 9.0; libextra: sm_90
    assert (code, a["verdict"]) == (0, "ptx-jit") and "_ext" in a["reason"]
    assert [f["verdict"] for f in a["files"]] == ["ptx-jit", "native"]
    code, a = _check("RTX 3090", wheel)  # libextra's sm_90 cannot run on 8.6
    assert (code, a["verdict"]) == (1, "will-not-run") and "libextra.so.1" in a["reason"] and "8.6" in a["fix"]


def test_package_check_on_conda_and_tar_bz2(conda_package, built, tmp_path):
    assert _check("RTX 5090", conda_package)[1]["verdict"] == "native"
    assert _check("H100", conda_package)[1]["verdict"] == "native"  # sm_90a is exactly 9.0
    code, a = _check("B200", conda_package)  # neither sm_90a nor sm_120 runs on 10.0
    assert (code, a["verdict"]) == (1, "will-not-run") and "b200" in a["fix"]
    package = tmp_path / "mmcv-2.2.0-cuda130_py311_0.tar.bz2"
    with tarfile.open(package, "w:bz2") as tar:
        tar.add(_object(built, "sm90"), "lib/python3.11/site-packages/mmcv/_ext.so")
    assert _check("GH200", package)[1]["verdict"] == "native"
    code, out, _ = mmstack("arch", "check", "--cc", "9.0", "--package", str(_object(built, "sm90")))
    assert code == 0 and "native" in out


def test_package_check_on_our_own_cpu_build():
    from mmstack_lab.standin.bootstrap import CACHE_ROOT  # the test cache (MMSTACK_TEST_CACHE honoured)

    builds = sorted(CACHE_ROOT.glob("**/mmcv-*cpu*.conda")) if CACHE_ROOT.is_dir() else []
    if not builds:
        pytest.skip(f"no mmcv CPU .conda from the e2e build under {CACHE_ROOT} yet")
    code, a = _check("RTX 4090", builds[0])
    assert (code, a["verdict"]) == (1, "no-cuda-code") and "rtx4090" in a["fix"]


# -- third-party CUDA wheels, measured once into lab/results (docs/gpus.md) -------------------

RESULT = ROOT / "lab" / "results" / "cpu-dev" / "package_coverage.json"
WHEEL_DIRS = [Path(p) for p in (os.environ.get("MMSTACK_TEST_WHEELS", ""), "/opt/pypi-more/files") if p]


def _wheel(name: str) -> Path:
    for d in WHEEL_DIRS:
        if (d / name).is_file():
            return d / name
    pytest.skip(f"{name} is not on this machine (MMSTACK_TEST_WHEELS=DIR points at one)")


def _measured() -> dict:
    return {p["file"]: p for p in json.loads(RESULT.read_text())["packages"]}


@pytest.mark.parametrize("name", list(json.loads(RESULT.read_text())["packages"][i]["file"] for i in range(3)))
def test_committed_result_matches_the_wheel(name):
    """Re-read each measured wheel (when present): the same archs per CUDA object as committed."""
    wheel = _wheel(name)
    if wheel.stat().st_size > 100_000_000 and not os.environ.get("MMSTACK_TEST_LARGE_WHEELS"):
        pytest.skip(f"{name} is {wheel.stat().st_size // 1_000_000} MB: set MMSTACK_TEST_LARGE_WHEELS=1 to re-read it")
    got = [(lst.path.split("!", 1)[-1], list(lst.sass), list(lst.ptx)) for lst in list_fatbins(wheel) if lst.sass or lst.ptx]
    want = [(o["path"], o["sass"], o["ptx"]) for o in _measured()[name]["cuda_objects"]]
    assert got == want


@pytest.mark.parametrize("gpu, code, verdict, words", [
    ("Tesla T4", 0, "native", ""),
    ("RTX 4090", 0, "lower-minor", "_C_stable.so"),  # no sm_89 in torchvision's own ops: runs sm_86 SASS
    ("GTX 1080", 1, "will-not-run", "_C_stable.so"),  # Pascal: no sm_6x, no PTX below 12.0
    ("Jetson T5000", 1, "will-not-run", "_C_stable.so"),  # 11.0: PTX 12.0 never runs backwards
    ("GB10", 0, "lower-minor", "_C_stable.so"),
])
def test_torchvision_wheel(gpu, code, verdict, words):
    wheel = _wheel("torchvision-0.29.1-cp311-cp311-manylinux_2_28_x86_64.whl")
    got, a = _check(gpu, wheel)
    assert (got, a["verdict"]) == (code, verdict) and words in a["reason"]
    if verdict == "will-not-run":
        assert "CUDA" in a["fix"]


def test_torch_wheel_linalg_leaves_turing_out():
    wheel = _wheel("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl")
    if not os.environ.get("MMSTACK_TEST_LARGE_WHEELS"):
        pytest.skip("torch's wheel is 555 MB: set MMSTACK_TEST_LARGE_WHEELS=1 (about 10 s)")
    code, a = _check("Tesla T4", wheel)
    assert (code, a["verdict"]) == (1, "will-not-run") and "libtorch_cuda_linalg.so" in a["reason"]


def test_docs_gpus_md_is_generated_from_the_committed_result():
    from mmstack_lab.arch import package_coverage
    assert (ROOT / "docs" / "gpus.md").read_text() == package_coverage.render(json.loads(RESULT.read_text()))


# -- per kernel bundle: a .so of two translation units, one built for fewer GPUs -------------------


@pytest.fixture(scope="module")
def mixed_so(tmp_path_factory) -> Path:
    """kernel.cu for sm_80 + sm_90 and a renamed copy for sm_80 only, linked into one .so by nvcc (whose
    device-link step adds a stub bundle of its own default arch that defines no kernel)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: these tests compile real CUDA objects")
    out = tmp_path_factory.mktemp("mixed")
    second = out / "second.cu"
    second.write_text(KERNEL.read_text().replace("launch_add", "launch_sub").replace("add", "sub"))
    for src, gencode in ((KERNEL, ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"]),
                         (second, ["-gencode", "arch=compute_80,code=sm_80"])):
        subprocess.run(["nvcc", "-Xcompiler", "-fPIC", "-c", str(src), "-o", str(out / f"{src.stem}.o"), *gencode],
                       check=True, capture_output=True)
    subprocess.run(["nvcc", "-shared", str(out / "kernel.o"), str(out / "second.o"), "-o", str(out / "mixed.so")],
                   check=True, capture_output=True)
    return out / "mixed.so"


def test_bundles_are_listed_with_their_kernels(mixed_so):
    listing = _one(list_fatbins(mixed_so))
    kernels = [b for b in listing.bundles if not b.empty]
    assert [(b.sass, b.kernels) for b in kernels] == [(("8.0", "9.0"), ("_Z3addPfPKfi",)), (("8.0",), ("_Z3subPfPKfi",))]
    assert all(b.label.startswith(".nv_fatbin+") for b in listing.bundles)
    assert set(listing.sass) >= {"8.0", "9.0"}  # the union alone would call it native on 9.0
    stubs = [b for b in listing.bundles if b.empty]
    assert all(not b.kernels and not b.ptx for b in stubs)


def test_package_verdict_is_the_worst_bundles_and_names_it(mixed_so):
    code, a = _check("H100", mixed_so)
    assert (code, a["verdict"]) == (1, "will-not-run")
    failing = [b for b in a["files"][0]["bundles"] if b["verdict"] == "none"]
    assert [b["kernels"] for b in failing] == [["_Z3subPfPKfi"]]
    assert a["files"][0]["failing_bundles"] == [failing[0]["label"]]
    assert f"1 of 2 kernel bundles have no code for 9.0: {failing[0]['label']} (_Z3subPfPKfi" in a["reason"]
    code, a = _check("A100", mixed_so)  # both bundles carry sm_80; the stub is not judged
    assert (code, a["verdict"]) == (0, "native") and "kernel bundles" not in a["reason"]


# -- NVIDIA's own lister agrees: cuobjdump (the pinned nvidia-cuda-cuobjdump wheel of the test extra) --

def _cuobjdump():
    from mmstack_lab.arch.vendor_check import find_cuobjdump

    tool = find_cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump: pip install the test extra (nvidia-cuda-cuobjdump)")
    return tool


@pytest.mark.parametrize("name", [n for n in TARGETS if n != "rdc_object"])
def test_every_entry_is_what_cuobjdump_lists(built, name):
    from mmstack_lab.arch.vendor_check import mmstack_entries, vendor_entries

    tool, path = _cuobjdump(), _object(built, name)
    theirs = vendor_entries(tool, path)
    assert theirs, f"cuobjdump listed nothing in {name}"
    # the same (kind, arch) entries, as many of each (cuobjdump drops a family cubin's 'f': sm_100 for 10.0f)
    assert mmstack_entries(path) == theirs
    _flags, sass, ptx, _new = TARGETS[name]
    assert {a for (k, a) in theirs if k == "sass"} == {a.removesuffix("f") for a in sass}
    assert {a for (k, a) in theirs if k == "ptx"} == {a.removesuffix("f") for a in ptx}


def test_a_linked_object_with_a_device_link_stub_agrees_with_cuobjdump(mixed_so):
    from mmstack_lab.arch.vendor_check import mmstack_entries, vendor_entries

    theirs = vendor_entries(_cuobjdump(), mixed_so)
    assert mmstack_entries(mixed_so) == theirs and sum(theirs.values()) >= 3


def test_an_object_without_cuda_code_lists_nothing_for_either(tmp_path):
    from mmstack_lab.arch.vendor_check import mmstack_entries, vendor_entries

    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    src = tmp_path / "plain.c"
    src.write_text("int f(void) { return 1; }\n")
    so = tmp_path / "plain.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(so)], check=True)
    assert not vendor_entries(_cuobjdump(), so) and not mmstack_entries(so)
