"""STAND-IN BUILDER (development and CI only): a small channel for `mmstack channel page` and the test receipts.

- `deps`: fake_channel's STAND-IN conda-forge (python, pytorch, cuda-version, cuda-arch, ...) without mmcv;
- `channel`: mmcv 2.2.0 packages with the matrix's build strings, build numbers and run requirements
  (fake_channel.mmcv_depends), each holding a real shared object that nvcc compiled from
  tests/data/fatbin/kernel.cu for the row's arch list (so the page reads a real fatbin), plus the
  CPU build (no kernels) and a noarch mmstack; indexed by mmstack's own `channel index`.
- a receipt for the sm90 build made from what the H200 run in lab/results/h200/recipe-run7 recorded
  (its machine, ladder levels and upstream counts), attached to this STAND-IN package file: the
  machine part says so (`recorded_from`).

Nothing here is a product default.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from mmstack_lab.paths import ROOT
from mmstack_lab.standin import fake_channel

KERNEL = ROOT / "tests" / "data" / "fatbin" / "kernel.cu"
RECORDED = ROOT / "lab" / "results" / "h200" / "recipe-run7"
# arch tags of the matrix (python 3.11, CUDA 12.9) the channel holds, and the nvcc 13 targets each is compiled
# for: the row's own list, but the fat build without what nvcc 13 dropped (5.0, 6.0, 7.0)
ROWS = ("cpu", "sm89", "sm90", "all")
FAT_SUBSET = "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
STAND_IN_MACHINE = f"STAND-IN: recorded on the H200 ({RECORDED.relative_to(ROOT)}), attached to a test package"
_TS = datetime(2025, 11, 1, tzinfo=timezone.utc)


def _gencode(arch_list: str) -> list[str]:
    from mmstack.facts.arch import gencode_flags, parse_arch_list

    return gencode_flags(parse_arch_list(arch_list))


def _rows():
    from mmstack.facts.gpus import load
    from mmstack.variants.matrix import CONFIG_FILE, load_matrix

    rows = load_matrix(load(), ROOT / CONFIG_FILE)
    return rows, {v.arch_tag: v for v in rows if v.python == "3.11" and (v.cuda in (None, "12.9"))}


def _compile(arch_list: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["nvcc", "-shared", "-Xcompiler", "-fPIC", *_gencode(arch_list), str(KERNEL), "-o", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed: {proc.stderr.strip()[-400:]}")
    return dest


def build(tmp: Path) -> dict:
    """{'channel': Path, 'deps': Path, 'files': {arch_tag: package file name}}; needs nvcc on PATH."""
    from rattler_build import assemble_package

    from mmstack.builder.channel import index_channel

    if shutil.which("nvcc") is None:
        raise FileNotFoundError("nvcc is not on PATH")
    rows, picked = _rows()
    deps = fake_channel.build_channel(tmp / "deps", [p for p in fake_channel.standard_packages(rows)
                                                     if p.name not in ("mmcv", "mmstack")])
    channel = tmp / "channel"
    for sub in ("linux-64", "noarch"):
        (channel / sub).mkdir(parents=True, exist_ok=True)
    staged = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = {tag: pool.submit(_compile, FAT_SUBSET if tag == "all" else picked[tag].arch_list,
                                 tmp / "files" / tag / "lib" / "python3.11" / "site-packages" / "mmcv"
                                 / "_ext.cpython-311-x86_64-linux-gnu.so")
                for tag in ROWS if tag != "cpu"}
        for tag, job in jobs.items():
            job.result()
            staged[tag] = tmp / "files" / tag
    files = {}
    for tag in ROWS:
        v = picked[tag]
        pkg = fake_channel.Pkg("mmcv", "2.2.0", f"{v.build_string_prefix}_py311", depends=fake_channel.mmcv_depends(v),
                               build_number=v.build_number)
        out = assemble_package(name="mmcv", version="2.2.0", target_platform="linux-64", build_string=pkg.build_string,
                               output_dir=str(channel / "linux-64"), depends=list(pkg.depends), build_number=pkg.build_number,
                               compression_level=1, timestamp=_TS, detect_prefix=False, license="Apache-2.0",
                               summary=f"{fake_channel.STAND_IN}: mmcv {tag} with a real nvcc object",
                               files_dir=str(staged[tag]) if tag in staged else None, files=None if tag in staged else [])
        files[tag] = Path(out.path).name
    mm = fake_channel.Pkg("mmstack", "0.1.0", "pyh", subdir="noarch", noarch="python", depends=("python >=3.10",))
    out = assemble_package(name="mmstack", version="0.1.0", target_platform="noarch", build_string=mm.build_string,
                           output_dir=str(channel / "noarch"), files=[], depends=list(mm.depends), noarch="python",
                           compression_level=1, timestamp=_TS, detect_prefix=False, summary=fake_channel.STAND_IN)
    files["mmstack"] = Path(out.path).name
    index_channel(channel)
    return {"channel": channel, "deps": deps, "files": files}


def recorded_h200() -> tuple[dict, list[dict]]:
    """(machine part, test result documents) as the H200 run recorded them."""
    from mmstack.builder import receipt
    from mmstack.commands.ladder_cmds import ladder_summary

    doctor = json.loads((RECORDED / "doctor_sm90.json").read_text())["fingerprint"]
    machine = receipt.machine(doctor["gpus"], source=doctor["gpu_source"], cuda_runtime=doctor["torch"]["torch_cuda"])
    machine["recorded_from"] = STAND_IN_MACHINE
    ladder = ladder_summary(json.loads((RECORDED / "verify_installed_sm90.json").read_text()))
    built = json.loads((RECORDED / "build_sm90.json").read_text())["packages"][0]
    return machine, [{"kind": "ladder", **ladder}, *built["test_results"]]


def write_h200_receipt(channel: Path, file: str) -> Path:
    from mmstack.builder import receipt

    pkg = channel / "linux-64" / file
    machine, docs = recorded_h200()
    name, version, build = file.removesuffix(".conda").rsplit("-", 2)
    doc = receipt.make(pkg, name=name, version=version, build_string=build, subdir="linux-64", test_results=docs,
                       machine_part=machine, tests_passed=None, seconds=0.0, via="mmstack_lab.standin.page_channel")
    return receipt.write(pkg, doc)
