"""What a compiler cache saves when mmcv's ops are built again, and whether it is sound (issue 24).

    python -m mmstack_lab.build_cost.ccache_rebuild --sdist mmcv-2.2.0.tar.gz [--arch-list 9.0] [--jobs N] \
        --json > lab/results/cpu-dev/ccache_rebuild.json

torch's cpp_extension (2.13 here) starts every compile through `ccache` (or `sccache`) when one is
on PATH (`_wrap_compiler`; TORCH_NO_COMPILER_WRAPPER turns it off), and takes nvcc from
PYTORCH_NVCC when that is set. So the recipe's own build script needs no change for a cache:
what decides whether it helps is where the cache lives and whether the build paths repeat.
rattler-build puts every build in a new directory (`rattler-build_mmcv_<build id>`), and the
compile lines hold those absolute paths; CCACHE_BASEDIR set to the directory above the builds
makes ccache hash them relative to the compile's working directory, so a build in a new
directory can hit (CCACHE_NOHASHDIR too: the sysconfig `-g` comes before the recipe's `-g0`).

The sdist is unpacked and patched with recipes/mmcv/patches (as the recipes do), then
recipes/mmcv/build.sh (the recipes' one build script) runs three times, each in a fresh copy
of the patched tree at a new path, each installing into its own --target directory:

  cold     empty cache: what a first build costs with the wrapper (every unit a miss)
  warm     the same flags in a new directory: what a rebuild saves (every unit should hit)
  changed  one compile flag different (MMCV_WITH_OPENMP=0 drops -fopenmp, patch 0004): every
           unit must miss, else objects built with other flags would be reused (unsound)

Per build: wall and CPU seconds, ccache's own counters for that build (hits, misses, what it
could not cache), and the sha256 of the _ext .so it installed; `warm_same_ext` says whether the
warm build's _ext is byte-identical to the cold one's. With --arch-list (CUDA: needs nvcc and a
CUDA torch) the `changed` build changes the arch list instead (MMSTACK_ARCH_LIST, the recipes'
knob), the case the matrix's per-generation variants exercise. Timings are one run each; no
claim is made about noise. Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from mmstack_lab.paths import ROOT

RECIPE = ROOT / "recipes" / "mmcv"


class BadInput(Exception):
    pass


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def ccache_stats(ccache: str, env: dict) -> dict[str, int]:
    """ccache's counters (`--print-stats`: one `name<TAB>value` per line)."""
    out = subprocess.run([ccache, "--print-stats"], env=env, capture_output=True, text=True, check=True).stdout
    stats = {}
    for line in out.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().lstrip("-").isdigit():
            stats[name] = int(value)
    return stats


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    keys = ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss", "could_not_use_precompiled_header",
            "unsupported_compiler_option", "unsupported_source_language", "called_for_link",
            "called_for_preprocessing", "compiler_check_failed", "no_input_file", "multiple_source_files",
            "autoconf_test", "bad_compiler_arguments", "internal_error", "error_hashing_extra_file")
    d = {k: after.get(k, 0) - before.get(k, 0) for k in keys}
    return {k: v for k, v in d.items() if v or k in ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")}


def prepare(sdist: Path, work: Path) -> Path:
    """The sdist unpacked and patched as the recipes do (patch -p1, every numbered patch in order)."""
    with tarfile.open(sdist) as tf:
        tf.extractall(work / "unpacked", filter="data")
    (src,) = [p for p in (work / "unpacked").iterdir() if p.is_dir()]
    for patch in sorted((RECIPE / "patches").glob("0*.patch")):
        subprocess.run(["patch", "-p1", "-s", "--fuzz=0", "-i", str(patch)], cwd=src, check=True)
    return src


def ext_sha256(target: Path) -> str | None:
    found = sorted((target / "mmcv").glob("_ext*.so"))
    return hashlib.sha256(found[0].read_bytes()).hexdigest() if len(found) == 1 else None


def build(name: str, pristine: Path, work: Path, env: dict, ccache: str, log: Path) -> dict:
    src = work / f"build-{name}" / "src"  # a new path per build, as rattler-build's build ids give
    shutil.copytree(pristine, src, symlinks=True)
    target = work / f"build-{name}" / "site"
    env = {**env, "SRC_DIR": str(src), "PIP_TARGET": str(target), "PYTHONPATH": str(target)}
    before = ccache_stats(ccache, env)
    cpu0, t0 = _cpu_children(), time.perf_counter()
    with log.open("w") as fh:
        rc = subprocess.run(["bash", str(RECIPE / "build.sh")], cwd=src, env=env, stdout=fh,
                            stderr=subprocess.STDOUT).returncode
    wall, cpu = time.perf_counter() - t0, _cpu_children() - cpu0
    ninja = next(src.rglob("build.ninja"), None)
    wrapped = ninja is not None and any(line.startswith(("cxx = ", "nvcc = ")) and "ccache" in line
                                        for line in ninja.read_text().splitlines())
    return {"build": name, "rc": rc, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "ccache": _delta(ccache_stats(ccache, env), before), "compiler_wrapped_by_ccache": wrapped,
            "ext_sha256": ext_sha256(target)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=Path, required=True, help="mmcv-2.2.0.tar.gz (PyPI)")
    ap.add_argument("--arch-list", default="", help="CUDA arch list (e.g. 9.0); empty: the CPU build")
    ap.add_argument("--changed-arch-list", default="8.0+PTX", help="with --arch-list: the `changed` build's list")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--ccache", default=shutil.which("ccache"), help="the ccache executable (default: on PATH)")
    ap.add_argument("--keep", type=Path, help="keep the work tree (logs, build trees) here")
    ap.add_argument("--json", action="store_true", help="print the result JSON")
    args = ap.parse_args()
    try:
        if not args.sdist.is_file():
            raise BadInput(f"--sdist {args.sdist}: no such file; give the mmcv 2.2.0 sdist from PyPI")
        if not args.ccache or not shutil.which(args.ccache):
            raise BadInput("--ccache: no ccache executable found; install ccache or pass its path")
        if shutil.which("patch") is None:
            raise BadInput("patch: GNU patch is not on PATH; install it (the recipes apply their patches with it)")
        if args.jobs < 1:
            raise BadInput(f"--jobs {args.jobs}: expected 1 or more")
    except BadInput as exc:
        print(f"ccache_rebuild.py: {exc}", file=sys.stderr)
        return 2

    ccache = shutil.which(args.ccache)
    work = Path(tempfile.mkdtemp(prefix="ccache-rebuild-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    pristine = prepare(args.sdist, work)
    # ccache first on PATH: torch's cpp_extension finds it there and wraps cxx (and nvcc)
    path = f"{Path(ccache).parent}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CCACHE_", "PIP_")) and k not in (
        "TORCH_NO_COMPILER_WRAPPER", "PYTORCH_NVCC", "PYTHONPATH", "CONDA_BUILD", "PREFIX", "SP_DIR")}
    env = {**base, "PATH": path, "PYTHON": sys.executable, "CPU_COUNT": str(args.jobs),
           "CCACHE_DIR": str(work / "cache"), "CCACHE_BASEDIR": str(work), "CCACHE_NOHASHDIR": "1",
           "CCACHE_MAXSIZE": "20G"}
    if args.arch_list:
        env["MMSTACK_ARCH_LIST"] = args.arch_list
        env["PYTORCH_NVCC"] = f"{ccache} {shutil.which('nvcc') or 'nvcc'}"
    else:
        env["FORCE_CUDA"] = "0"
    subprocess.run([ccache, "--zero-stats"], env=env, check=True, capture_output=True)

    changed_env, changed_what = dict(env), ""
    if args.arch_list:
        changed_env["MMSTACK_ARCH_LIST"] = args.changed_arch_list
        changed_what = f"MMSTACK_ARCH_LIST {args.arch_list} -> {args.changed_arch_list}"
    else:
        changed_env["MMCV_WITH_OPENMP"] = "0"
        changed_what = "MMCV_WITH_OPENMP=0 (no -fopenmp, patch 0004)"
    builds = [build("cold", pristine, work, env, ccache, work / "cold.log"),
              build("warm", pristine, work, env, ccache, work / "warm.log"),
              build("changed", pristine, work, changed_env, ccache, work / "changed.log")]
    by = {b["build"]: b for b in builds}
    hits = lambda b: b["ccache"].get("direct_cache_hit", 0) + b["ccache"].get("preprocessed_cache_hit", 0)  # noqa: E731
    version = subprocess.run([ccache, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    import torch

    doc = {
        "what": "recipes/mmcv/build.sh three times through ccache (cold, warm in a new directory, one flag changed)",
        "command": "python -m mmstack_lab.build_cost.ccache_rebuild --sdist mmcv-2.2.0.tar.gz"
                   + (f" --arch-list {args.arch_list}" if args.arch_list else "") + f" --jobs {args.jobs} --json",
        "machine": {"cores": os.cpu_count(), "jobs": args.jobs, "python": platform.python_version(),
                    "torch": torch.__version__, "ccache": version,
                    "variant": f"CUDA {args.arch_list}" if args.arch_list else "CPU (FORCE_CUDA=0)"},
        "ccache_config": {k: v for k, v in env.items() if k.startswith("CCACHE_") and k not in ("CCACHE_DIR", "CCACHE_BASEDIR")}
        | {"CCACHE_BASEDIR": "the directory above the three build directories"},
        "changed": changed_what,
        "builds": builds,
        "warm_over_cold_wall": round(by["warm"]["wall_s"] / by["cold"]["wall_s"], 3) if by["cold"]["wall_s"] else None,
        "warm_all_hits": by["warm"]["ccache"].get("cache_miss", 0) == 0 and hits(by["warm"]) > 0,
        "changed_all_misses": hits(by["changed"]) == 0 and by["changed"]["ccache"].get("cache_miss", 0) > 0,
        "warm_same_ext": by["cold"]["ext_sha256"] is not None and by["cold"]["ext_sha256"] == by["warm"]["ext_sha256"],
    }
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(doc, indent=1) if args.json else
          "\n".join(f"{b['build']}: rc {b['rc']}, {b['wall_s']} s wall, {b['cpu_s']} CPU-s, ccache {b['ccache']}"
                    for b in builds))
    return 0 if all(b["rc"] == 0 for b in builds) else 1


if __name__ == "__main__":
    sys.exit(main())
