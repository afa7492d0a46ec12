"""A build and a rebuild of the mmcv recipe through rattler-build with the CI's ccache (issue 24).

    python -m mmstack_lab.build_cost.ccache_recipe --channel BOOTSTRAP_CHANNEL \
        [--ccache /usr/bin/ccache] --json > lab/results/cpu-dev/ccache_recipe.json

(the offline recipe copy comes from mmstack_lab.standin.offline, beside the stand-in channel's builders.)

ccache_rebuild.py measured recipes/mmcv/build.sh with ccache settings in its environment. A real
build runs inside rattler-build, which clears the environment (CCACHE_* gone, HOME set to the
work directory) but keeps the caller's PATH after its own environments; scripts/ccache-wrapper.sh
writes a `ccache` that carries its settings, and the generated CI puts it first on PATH. This
builds the recipe's CPU variant (`mmstack build` internals: builder.recipes.run_build, the real
engine, the recipe's tests skipped: they do not compile) twice with the wrapper on PATH and one
cache:

  cold   empty cache, a fresh work directory
  warm   the same variant again in another fresh work directory (rattler-build's new build id)

Per build: wall and CPU seconds, ccache's counters for it, and the `_ext` .so in the package:
its sha256, its GNU build-id, and the sha256 with the build-id zeroed. `warm_same_ext` says
whether the rebuild packaged a byte-identical `_ext`; `warm_same_ext_but_build_id` whether it
did apart from the 20 bytes of the GNU build-id, where two builds in two directories were seen
to differ. The channel is a bootstrap channel of lab/src/mmstack_lab/standin/bootstrap.py (STAND-INs for
conda-forge: the result says so). One run each; no claim about noise. Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

from mmstack_lab.build_cost.ccache_rebuild import _cpu_children, _delta, ccache_stats
from mmstack_lab.paths import ROOT


def ext_digests(conda: Path) -> dict | None:
    """The one mmcv/_ext*.so inside a .conda (zip of zstd tars): its sha256, its GNU build-id, and
    the sha256 with the build-id's bytes zeroed (two builds of the recipe in two directories were
    seen to differ in the build-id alone; what the linker hashed differently is not established)."""
    import zstandard
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import NoteSection

    with zipfile.ZipFile(conda) as z:
        for name in z.namelist():
            if name.startswith("pkg-") and name.endswith(".tar.zst"):
                raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(z.read(name)))
                with tarfile.open(fileobj=raw, mode="r|") as tar:
                    for m in tar:
                        if "/mmcv/_ext" in m.name and m.name.endswith(".so"):
                            member = tar.extractfile(m)
                            if member is None:
                                raise ValueError(f"{conda}: {m.name} is not a regular file in the package")
                            data = bytearray(member.read())
                            break
                    else:
                        return None
                break
        else:
            return None
    full = hashlib.sha256(data).hexdigest()
    build_id = None
    section = ELFFile(io.BytesIO(bytes(data))).get_section_by_name(".note.gnu.build-id")
    if isinstance(section, NoteSection):
        for note in section.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                build_id = note["n_desc"]
                start = section["sh_offset"] + section["sh_size"] - len(build_id) // 2
                data[start:start + len(build_id) // 2] = bytes(len(build_id) // 2)
    return {"sha256": full, "build_id": build_id, "sha256_without_build_id": hashlib.sha256(data).hexdigest()}


def build(name: str, base: Path, channel: Path, wrapper_env: dict, ccache: str) -> dict:
    from mmstack.builder import recipes
    from mmstack_lab.standin import offline

    work = base / f"work-{name}"  # a new directory per build
    work.mkdir()
    recipe = offline.offline_recipe_for("mmcv", ROOT / "recipes" / "mmcv", work / "recipes" / "mmcv")
    config = ROOT / "conda_build_config.yaml"
    gcc = subprocess.run(["gcc", "-dumpversion"], capture_output=True, text=True, check=True).stdout.strip().split(".")[0]
    before = ccache_stats(ccache, wrapper_env)
    cpu0, t0 = _cpu_children(), time.perf_counter()
    built = recipes.run_build(recipe_dir=recipe, variant_config=config, channel_dir=work / "channel", env="cpu",
                              select={"python": "3.11"}, overrides={"c_compiler_version": gcc, "cxx_compiler_version": gcc},
                              extra_channels=[channel], test=False, work_dir=work, log_file=base / f"{name}.log")
    wall, cpu = time.perf_counter() - t0, _cpu_children() - cpu0
    (pkg,) = [p for p in built if p.name == "mmcv"]
    return {"build": name, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "package": pkg.path.name,
            "ccache": _delta(ccache_stats(ccache, wrapper_env), before), "ext": ext_digests(pkg.path)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channel", type=Path, required=True, help="a bootstrap channel (lab/src/mmstack_lab/standin/bootstrap.py)")
    ap.add_argument("--ccache", default=shutil.which("ccache"), help="the ccache executable (default: on PATH)")
    ap.add_argument("--keep", type=Path, help="keep the work tree (logs, cache) here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not args.ccache or not os.access(args.ccache, os.X_OK):
        print(f"ccache_recipe.py: --ccache {args.ccache!r} is not an executable ccache; install ccache", file=sys.stderr)
        return 2
    if not (args.channel / "noarch" / "repodata.json").is_file():
        print(f"ccache_recipe.py: --channel {args.channel} has no noarch/repodata.json: pass a bootstrap channel "
              "(~/.cache/mmstack-tests/bootstrap-*)", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="ccache-recipe-", dir=args.keep))
    try:
        cache, wrap = base / "cache", base / "wrapper"
        subprocess.run(["bash", str(ROOT / "scripts" / "ccache-wrapper.sh"), str(cache), str(base), str(wrap), args.ccache],
                       check=True, capture_output=True)
        wrapper_env = {**os.environ, "CCACHE_DIR": str(cache)}
        os.environ["PATH"] = f"{wrap}{os.pathsep}{os.environ['PATH']}"  # rattler-build keeps it
        builds = [build(name, base, args.channel.resolve(), wrapper_env, args.ccache) for name in ("cold", "warm")]
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    cold, warm = builds
    version = subprocess.run([args.ccache, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    hits = lambda b: b["ccache"].get("direct_cache_hit", 0) + b["ccache"].get("preprocessed_cache_hit", 0)  # noqa: E731
    result = {
        "what": "the mmcv recipe's CPU variant built twice through rattler-build (py-rattler-build) with "
                "scripts/ccache-wrapper.sh first on PATH and one cache: cold, then warm in a new work directory",
        "stand_in": f"host requirements from {args.channel.name}, STAND-INs for conda-forge (lab/src/mmstack_lab/standin/bootstrap.py)",
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "ccache": version, "builds": builds,
        "warm_over_cold_wall": round(warm["wall_s"] / cold["wall_s"], 3),
        "warm_all_hits": warm["ccache"].get("cache_miss", 0) == 0 and hits(warm) > 0,
        "cold_misses": cold["ccache"].get("cache_miss", 0),
        "warm_same_ext": bool(cold["ext"]) and cold["ext"]["sha256"] == warm["ext"]["sha256"],
        "warm_same_ext_but_build_id": bool(cold["ext"]) and (
            cold["ext"]["sha256_without_build_id"] == warm["ext"]["sha256_without_build_id"]),
        "command": "python -m mmstack_lab.build_cost.ccache_recipe --channel BOOTSTRAP_CHANNEL --json",
    }
    print(json.dumps(result, indent=1) if args.json else
          f"cold {cold['wall_s']} s, warm {warm['wall_s']} s ({result['warm_over_cold_wall']}x); "
          f"warm hits {hits(warm)}, misses {warm['ccache'].get('cache_miss', 0)}; same _ext: {result['warm_same_ext']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
