"""The GPU proof's stages, one registry: name, where it runs, what it needs, what it does and writes.

Packages are compiled on a CPU machine and tested on the GPU machine: the `cpu` stages build
recipes/ with their test sections skipped (`mmstack build --no-test`) into a channel whose packages
travel as $CARRY/packages; the `gpu` stages put them into the GPU machine's channel (`seed`), run
each package's whole test section there (`test`: `mmstack test`, the GPU levels and upstream's
tests on the GPU), install and climb the ladder, and measure. `standin` runs on both (each machine
assembles its own conda-forge stand-in from its own CPython, torch and CUDA toolkit). Nothing edits
a recipe's text but the copy's patch list (`--proposed`, through YAML).

Each stage: `name`, `where` ("cpu", "gpu" or "both"), `needs` (stages whose output it reads, in this
call or an earlier one on the same machine), `summary` (one line), `outputs` (result files, globs
under RES), `docs` (the docs table its results feed, if any), and `run(Run) -> int`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mmstack_lab.proof.context import Run


@dataclass(frozen=True)
class Stage:
    name: str
    where: str  # "cpu": the build machine (also runs on the GPU one); "gpu": needs the GPU; "both"
    summary: str
    run: Callable[[Run], int]
    needs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    docs: str | None = None


# --- the stand-in channel and the recipes --------------------------------------------------------

def _standin(r: Run) -> int:
    cmd = [r.py, "-m", "mmstack_lab.standin.bootstrap_cuda", str(r.standin), "--wheels", str(r.carry / "wheels"),
           "--json", str(r.res / "standin.json")]
    env = {**r.mm_env(), "PYTHONPATH": r.lab_pythonpath()}
    return r.sh("standin_log", cmd, env=env, timed="standin_time")


def _offline_recipes(r: Run) -> int:
    """Copies of the recipes that download a source: the carried sdist (same sha256) as a file:// URL."""
    cache = r.work / "cache"
    (cache / "sdist").mkdir(parents=True, exist_ok=True)
    for f in (r.carry / "sdist").glob("*.tar.gz"):
        shutil.copy2(f, cache / "sdist" / f.name)
    shutil.rmtree(r.recipes, ignore_errors=True)
    code = ("import sys\nfrom pathlib import Path\nfrom mmstack_lab.standin import offline\n"
            "root, w = Path(sys.argv[1]), Path(sys.argv[2])\n"
            "for n in ('mmengine', 'mmcv', 'mmdet'):\n"
            "    offline.offline_recipe_for(n, root / 'recipes' / n, w / n)\n")
    env = {**r.mm_env(), "MMSTACK_TEST_CACHE": str(cache)}
    rc = r.sh("offline_recipes", [r.py, "-c", code, str(r.root), str(r.recipes)], env=env)
    if rc == 0 and r.proposed:
        rc = _add_proposed(r)
    return rc


def _add_proposed(r: Run) -> int:
    """--proposed: recipes/<name>/proposed/*.patch appended to the copy's source patches (YAML)."""
    import yaml

    lines = []
    for name in ("mmcv", "mmdet"):
        recipe = r.recipes / name / "recipe.yaml"
        doc = yaml.safe_load(recipe.read_text())
        sources = doc["source"] if isinstance(doc["source"], list) else [doc["source"]]
        for patch in sorted((r.root / "recipes" / name / "proposed").glob("*.patch")):
            shutil.copy2(patch, r.recipes / name / "patches" / patch.name)
            sources[0].setdefault("patches", []).append(f"patches/{patch.name}")
            lines.append(f"{hashlib.sha256(patch.read_bytes()).hexdigest()} {name}/{patch.name}")
        recipe.write_text(yaml.safe_dump(doc, sort_keys=False))
    (r.res / "proposed.txt").write_text("".join(f"{x}\n" for x in lines))
    return 0


# --- builds (the CPU machine's work) --------------------------------------------------------------

def _build(r: Run, tag: str, recipe: Path, *extra: str, test: bool | None = None) -> int:
    """One timed `mmstack build` into the channel with its full log; tests as the run says."""
    test = r.test if test is None else test
    args = ["build", "--root", str(r.root), "--source-channel", str(r.standin), "--channel", str(r.channel),
            "--recipe", str(recipe), "--log", str(r.res / f"rattler-build-{tag}.log"), "--json",
            *r.variant(), *extra, *([] if test else ["--no-test"])]
    rc = r.sh(f"build_{tag}", r.mm(*args), env=r.mm_env(), timed=f"build_time_{tag}")
    r.status(f"{tag} build rc={rc}{'' if test else ' (--no-test: the GPU machine runs the tests)'}")
    return rc


def _noarch_min(r: Run) -> tuple[str, ...]:
    # the stand-in channel has only this machine's python: the noarch recipes' python_min follows it
    return ("--env", "h100", "--variant", f"python_min={r.facts['python']}")


def _units(r: Run, tag: str, tree: Path) -> None:
    """Per-unit compile times from the kept build tree's ninja log (the lab's ninja_units.py)."""
    logs = list(tree.rglob(".ninja_log"))
    if logs:
        r.sh(f"units_{tag}", [r.py, str(r.root / "lab/src/mmstack_lab/build_cost/ninja_units.py"), str(logs[0]),
                              "--json", "--top", "1000"])


def _mmcv(r: Run, tag: str, *variant: str) -> int:
    tree = r.work / f"work{tag}"
    shutil.rmtree(tree, ignore_errors=True)
    rc = _build(r, tag, r.recipes / "mmcv", "--env", "h100", "--keep-build", "--work-dir", str(tree), *variant)
    _units(r, tag, tree)
    shutil.rmtree(tree, ignore_errors=True)
    return rc


def _fat_arch_list(r: Run) -> str:
    code = "from mmstack_lab.standin.bootstrap_cuda import cf_arch_list; print(cf_arch_list())"
    return subprocess.run([r.py, "-c", code], capture_output=True, text=True, check=True,
                          env={**r.mm_env(), "PYTHONPATH": r.lab_pythonpath()}).stdout.strip()


def _ptx_tag(r: Run) -> str:
    return "sm" + r.ptx_arch.replace(".", "") + "ptx"


STAGES_BUILD = (
    Stage("standin", "both", "the conda-forge stand-in channel from this machine's CPython, torch and CUDA "
          "toolkit (every package says STAND-IN)", _standin,
          outputs=("standin.json", "standin_time.json")),
    Stage("recipes", "both", "offline copies of the recipes that download a source (the carried sdists, same "
          "sha256, as file:// URLs); only builds need them", _offline_recipes, outputs=("offline_recipes.out",)),
    Stage("noarch", "cpu", "recipes/mmstack (noarch), with its tests (CPU-only)",
          lambda r: _build(r, "noarch", r.root / "recipes" / "mmstack", *_noarch_min(r), test=True),
          needs=("standin",), outputs=("build_noarch.json",)),
    Stage("mmengine", "cpu", "recipes/mmengine (noarch: safe checkpoint loading)",
          lambda r: _build(r, "mmengine", r.recipes / "mmengine", *_noarch_min(r)),
          needs=("standin", "recipes", "noarch"), outputs=("build_mmengine.json",)),
    Stage("sm90", "cpu", "recipes/mmcv for this machine's CUDA and sm_90 (the h100 row's arch set)",
          lambda r: _mmcv(r, "sm90"), needs=("standin", "recipes", "noarch"),
          outputs=("build_sm90.json", "units_sm90.json"), docs="build-time"),
    Stage("ptx", "cpu", "recipes/mmcv for '<ptx_arch>+PTX' (runs on the H200 through the driver's JIT)",
          lambda r: _mmcv(r, _ptx_tag(r), "--variant", f"mmcv_arch_list={r.ptx_arch}+PTX",
                          "--variant", f"arch_tag={_ptx_tag(r)}", "--variant", f"cuda_arch_min={r.ptx_arch}"),
          needs=("standin", "recipes", "noarch"), outputs=("build_sm*ptx.json",)),
    Stage("fat", "cpu", "recipes/mmcv's fat variant (the stand-in pytorch's arch list)",
          lambda r: _mmcv(r, "fat", "--variant", f"mmcv_arch_list={_fat_arch_list(r)}", "--variant", "arch_tag=all",
                          "--variant", "cuda_arch_min=none", "--variant", "mmcv_priority=1"),
          needs=("standin", "recipes", "noarch"), outputs=("build_fat.json", "units_fat.json")),
    Stage("mmdet", "cpu", "recipes/mmdet (noarch; its tests train Faster R-CNN on an mmcv: the test stage)",
          lambda r: _build(r, "mmdet", r.recipes / "mmdet", *_noarch_min(r)),
          needs=("standin", "recipes", "mmengine"), outputs=("build_mmdet.json",)),
)


# --- the GPU machine's work ----------------------------------------------------------------------

def _package_name(path: Path) -> str:
    return path.name.rsplit("-", 2)[0]  # name-version-build.conda


def carried_packages(r: Run) -> list[Path]:
    """$CARRY/packages; with --proposed, $CARRY/proposed's builds (made with recipes/*/proposed/*.patch)
    in place of the packages of the same name, so a GPU run tests the candidates and nothing else changes."""
    carried = sorted((r.carry / "packages").glob("*.conda"))
    if not r.proposed:
        return carried
    instead = sorted((r.carry / "proposed").glob("*.conda"))
    names = {_package_name(p) for p in instead}
    return sorted([p for p in carried if _package_name(p) not in names] + instead, key=lambda p: p.name)


def _seed(r: Run) -> int:
    """The carried packages ($CARRY/packages, built on the CPU machine) into this machine's channel."""
    carried = carried_packages(r)
    if not carried:
        r.status("seed: no carried packages")
        return 1
    # add_packages moves what it is given: copies, so the carry stays whole (a rehearsal runs on it)
    staging = r.work / "seed-staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    pkgs = [Path(shutil.copy2(p, staging / p.name)) for p in carried]
    # the channel holds this call's packages and no others: a warm machine keeps the last call's
    # channel, and perf-run2's `test` tested the earlier call's mmcv beside the candidate (same variant,
    # same result files: the later one's replaced the candidate's). add_packages' index drops the
    # removed files' rows.
    stale = [p for p in r.ours() if p.name not in {c.name for c in carried}]
    for p in stale:
        p.unlink()
    if stale:
        r.status(f"seed: removed {len(stale)} package(s) an earlier call left in the channel "
                 f"({', '.join(p.name for p in stale)})")
    code = ("import sys\nfrom mmstack.builder import channel\nchannel.ensure_channel(sys.argv[1], create=True)\n"
            "for p in channel.add_packages(sys.argv[1], sys.argv[2:]):\n    print(p.name)\n")
    # which file each seeded package was, by content: a --proposed build has the same file name as
    # the recipe's package it stands in for, so the name alone does not say which one a run tested
    (r.res / "seeded.json").write_text(json.dumps(
        [{"file": p.name, "from": p.parent.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
         for p in carried], indent=2) + "\n")
    rc = r.sh("seed", [r.py, "-c", code, str(r.channel), *map(str, pkgs)], env=r.mm_env())
    r.status(f"seed: {len(pkgs)} carried packages ({', '.join(p.name for p in pkgs)}) rc={rc}")
    return rc


def _test(r: Run) -> int:
    """Each of our packages' whole test section on this machine (`mmstack test`), mmcv before mmdet
    (--test-only: those named only, e.g. the one a candidate patch changes)."""
    order = {"mmstack": 0, "mmengine": 1, "mmcv": 2, "mmdet": 3}
    rc_all = 0
    ours = [p for p in r.ours() if not r.test_only or p.name.split("-")[0] in r.test_only]
    if not ours:
        r.status(f"test: no package of ours named {' '.join(r.test_only)} in the channel")
        return 1
    for pkg in sorted(ours, key=lambda p: (order.get(p.name.split("-")[0], 9), p.name)):
        tag = pkg.name.split("-")[0] + ("_" + pkg.name.split("-")[2].split("_py")[0] if pkg.name.startswith("mmcv-") else "")
        rc = r.sh(f"test_{tag}", r.mm("test", str(pkg), "--channel", str(r.channel), "--source-channel", str(r.standin),
                                      "--log", str(r.res / f"rattler-test-{tag}.log"), "--json"),
                  env=r.mm_env(), timed=f"test_time_{tag}")
        r.status(f"test {pkg.name} rc={rc}")
        rc_all = rc_all or rc
    return rc_all


def _verify_prefix(r: Run, tag: str, *specs: str) -> int:
    """Install SPECS into a fresh prefix with py-rattler; the ladder, L4 complete, doctor, fatbin there."""
    prefix = r.prefix(tag)
    shutil.rmtree(prefix, ignore_errors=True)
    code = ("import json, sys, time\nfrom mmstack.builder import channel\n"
            "ch, boot, prefix, specs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]\n"
            "t = time.monotonic()\nrecs = channel.install(specs, [ch, boot], prefix)\n"
            "print(json.dumps({'specs': specs, 'seconds': round(time.monotonic() - t, 1), 'installed': recs}, indent=1))\n")
    r.sh(f"install_{tag}", [r.py, "-c", code, str(r.channel), str(r.standin), str(prefix), *specs], env=r.mm_env())
    mm = str(prefix / "bin" / "mmstack")
    if not Path(mm).exists():
        r.status(f"FAIL install {tag}: {r.tail(f'install_{tag}', 5)}")
        return 1
    env = r.prefix_env(prefix)
    rc = r.sh(f"verify_installed_{tag}", [mm, "verify", "--expect-gpu", "--levels", "L1,L2,L3,L4,L5",
                                          "--model", "faster-rcnn,faster-rcnn-mdconv", "--json"], env=env, timed=f"verify_time_{tag}")
    rc = r.sh(f"l4complete_{tag}", [mm, "verify", "--expect-gpu", "--levels", "L1,L2,L3,L4", "--l4", "complete",
                                    "--json"], env=env) or rc
    r.sh(f"doctor_{tag}", [mm, "doctor", "--json"], env=env)
    ext = subprocess.run([str(prefix / "bin" / "python"), "-c",
                          "import importlib.util as u; print(u.find_spec('mmcv._ext').origin)"],
                         capture_output=True, text=True, env=env).stdout.strip()
    if ext:
        r.sh(f"fatbin_{tag}", [mm, "fatbin", ext, "--json"], env=env)
        if shutil.which("cuobjdump"):
            r.sh(f"cuobjdump_{tag}", ["cuobjdump", "--list-elf", "--list-ptx", ext])
    r.status(f"verify {tag} rc={rc}")
    return rc


def _ckpt(r: Run) -> int:
    prefix = r.prefix("sm90")
    rc = r.sh("ckpt_sm90", [str(prefix / "bin" / "mmstack"), "verify", "--expect-gpu", "--levels", "L6", "--model",
                            "faster-rcnn,faster-rcnn-mdconv", "--timeout", "500", "--json"], env=r.prefix_env(prefix))
    r.status(f"ckpt rc={rc}")
    return rc


def _gpu_name() -> str:
    """This machine's GPU as nvidia-smi names it (the device tool lends H100s and H200s alike); H200
    where none answers (a rehearsal)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        out = []
    return out[0].strip() if out else "H200"


def _installptx(r: Run) -> int:
    tag = _ptx_tag(r)
    cuda = r.facts["cuda"]
    r.sh(f"arch_check_{tag}", r.mm("arch", "check", "--gpu", _gpu_name(), "--arch-list", f"{r.ptx_arch}+PTX", "--cuda",
                                   cuda, "--json"), env=r.mm_env())
    return _verify_prefix(r, tag, f"mmcv ==2.2.0 cuda*_{tag}_*", "mmdet", "mmstack", f"python {r.facts['python']}.*")


def _jit(r: Run) -> int:
    """What the driver's JIT costs a PTX-only build: first kernel (fresh processes) and the complete L4,
    with the JIT cache disabled (every launch compiles) and with a cache the first run fills, against
    the native sm_90 build under the same two settings."""
    rc_all = 0
    for tag in (_ptx_tag(r), "sm90"):
        prefix = r.prefix(tag)
        if not (prefix / "bin" / "mmstack").exists():
            r.status(f"jit: no {tag} prefix (run install90 / installptx first)")
            rc_all = 1
            continue
        cache = r.work / f"jitcache-{tag}"
        shutil.rmtree(cache, ignore_errors=True)
        for mode, extra in (("cold", {"CUDA_CACHE_DISABLE": "1"}), ("warm", {"CUDA_CACHE_PATH": str(cache)})):
            env = {**r.lab_env(prefix), **extra}
            rc_all = r.sh(f"jit_startup_{mode}_{tag}", [str(prefix / "bin" / "python"), "-m",
                          "mmstack_lab.overhead.bench_startup", "--device", "cuda", "--runs", "5", "--json"],
                          env=env, timeout=300) or rc_all
            for run in (1, 2) if mode == "warm" else (1,):
                rc_all = r.sh(f"jit_l4_{mode}{run}_{tag}", [str(prefix / "bin" / "mmstack"), "verify", "--expect-gpu",
                              "--levels", "L1,L2,L3,L4", "--l4", "complete", "--json"], env=env, timeout=300,
                              timed=f"jit_l4_time_{mode}{run}_{tag}") or rc_all
    r.status(f"jit rc={rc_all}")
    return rc_all


def _lab(r: Run, name: str, module: str, *args: str, timeout: float = 300) -> int:
    """A lab tool in the sm_90 prefix's python, the machine's torchvision on a side path."""
    prefix = r.prefix("sm90")
    tv = _torchvision_dir(r)
    rc = r.sh(name, [str(prefix / "bin" / "python"), "-m", module, *args],
              env=r.lab_env(prefix, *([tv] if tv else [])), timeout=timeout)
    r.status(f"{name} rc={rc}")
    return rc


def _torchvision_dir(r: Run) -> Path | None:
    """torchvision is not in the prefix: the machine's own (built for the same torch), alone on a path."""
    found = subprocess.run([r.py, "-c", "import torchvision, os; print(os.path.dirname(torchvision.__file__))"],
                           capture_output=True, text=True)
    if found.returncode != 0:
        return None
    side = r.work / "tvonly"
    side.mkdir(parents=True, exist_ok=True)
    link = side / "torchvision"
    if not link.exists():
        link.symlink_to(found.stdout.strip())
    return side


def _patchab(r: Run) -> int:
    rc_all = 0
    for p in sorted([*(r.root / "recipes/mmcv/proposed").glob("*.patch"), *(r.root / "recipes/mmdet/proposed").glob("*.patch")]):
        if not any(line.startswith("patch_ab:") for line in p.read_text().splitlines()):
            continue  # Python-level candidates name their A/B; CUDA ones need --proposed builds
        n = f"{p.parent.parent.name}-{p.stem}"
        if r.patchab_only and not any(n.startswith(f"{only}-") or n == only for only in r.patchab_only):
            continue
        rc_all = _lab(r, f"patchab_{n}", "mmstack_lab.ops.patch_ab", "--patch", str(p), "--device", "cuda", "--upstream",
                      str(r.carry / "sdist" / "mmcv-2.2.0.github.tar.gz"), "--json", timeout=_patchab_timeout(p)) or rc_all
    return rc_all


def _patchab_timeout(patch: Path) -> int:
    """600 s, and a minute more for each detector process pair the candidate's header asks for (a pair is two
    fresh children of ~25 s each on an H100)."""
    from mmstack_lab.ops.patch_ab import header_args

    args = header_args(patch)
    pairs = int(args[args.index("--detector-processes") + 1]) if "--detector-processes" in args else 0
    return 600 + 60 * pairs


def _detprocs(r: Run) -> int:
    rc_all, pairs = 0, r.detprocs_pairs
    for bs in r.detprocs_batches:
        rc_all = _lab(r, f"detprocs_bs{bs}_sm90", "mmstack_lab.detector.bench_detector", "--device", "cuda", "--batch-size",
                      str(bs), "--iters", "10", "--repeats", "2", "--processes", str(pairs), "--json",
                      timeout=60 * pairs + 60) or rc_all
    return rc_all


def _bench(r: Run) -> int:
    rc = _lab(r, "ops_full_sm90", "mmstack_lab.ops.bench_ops", "--device", "cuda", "--full", "--json", timeout=240)
    for bs in (2, 8, 16):
        rc = _lab(r, f"detector_bs{bs}_sm90", "mmstack_lab.detector.bench_detector", "--device", "cuda", "--batch-size",
                  str(bs), "--repeats", "3", "--iters", "10", "--json", timeout=240) or rc
        rc = _lab(r, f"stages_bs{bs}_sm90", "mmstack_lab.detector.detector_stages", "--device", "cuda", "--batch-size",
                  str(bs), "--json", timeout=180) or rc
    rc = _lab(r, "profile_sm90", "mmstack_lab.detector.profile_detector", "--device", "cuda", "--iters", "10", timeout=180) or rc
    return _lab(r, "profile_bs8_sm90", "mmstack_lab.detector.profile_detector", "--device", "cuda", "--iters", "5",
                "--batch-size", "8", timeout=180) or rc


SM90_SPECS = ("mmcv ==2.2.0 cuda*_sm90_*", "mmdet", "mmstack", "pytest")
STAGES_GPU = (
    Stage("seed", "gpu", "the packages the CPU machine built ($CARRY/packages) into this machine's channel", _seed,
          needs=("standin",), outputs=("seed.out",)),
    Stage("test", "gpu", "each package's whole test section on the GPU (`mmstack test`: ladder, upstream's tests, "
          "fatbin; mmdet's detector training on the mmcv)", _test, needs=("seed",),
          outputs=("test_*.json", "test_time_*.json")),
    Stage("install90", "gpu", "the sm_90 mmcv, mmdet and mmstack into a fresh prefix; verify L1-L5 with both "
          "detectors, L4 complete, doctor, fatbin", lambda r: _verify_prefix(r, "sm90", *SM90_SPECS, f"python {r.facts['python']}.*"),
          needs=("seed",), outputs=("verify_installed_sm90.json", "l4complete_sm90.json", "fatbin_sm90.json")),
    Stage("ckpt", "gpu", "verify L6 in the sm_90 prefix: checkpoints saved, loaded, resumed, tested, fine-tuned "
          "from an old-format file, with both detectors", _ckpt, needs=("install90",),
          outputs=("ckpt_sm90.json",), docs="gpu-checkpoints"),
    Stage("installptx", "gpu", "the '<ptx_arch>+PTX' mmcv installed and verified (through the driver's JIT), with "
          "`arch check`'s prediction", _installptx, needs=("seed",), outputs=("verify_installed_sm*ptx.json",)),
    Stage("jit", "gpu", "what the driver's JIT costs the '<ptx_arch>+PTX' build against native sm_90: first kernel "
          "in fresh processes and the complete L4, JIT cache off and warm", _jit, needs=("install90", "installptx"),
          outputs=("jit_startup_*.json", "jit_l4_*.json", "jit_l4_time_*.json")),
    Stage("nmsanatomy", "gpu", "released against patched nms kernels, step by step", lambda r: _lab(
          r, "nms_anatomy", "mmstack_lab.ops.nms_anatomy", "--sdist", str(r.carry / "sdist/mmcv-2.2.0.tar.gz"), "--json",
          timeout=400), needs=("install90",), outputs=("nms_anatomy.json",), docs="h200-nms-anatomy"),
    Stage("patchab", "gpu", "each Python-level candidate patch (recipes/*/proposed with a patch_ab: line) against "
          "the installed sm_90 mmcv", _patchab, needs=("install90",), outputs=("patchab_*.json",)),
    Stage("opsnms", "gpu", "nms, its compiled op alone (kept indices), nms and batched_nms against "
          "torchvision's, also with the same dets, 100 to 100k boxes",
          lambda r: _lab(r, "ops_nms_sm90", "mmstack_lab.ops.bench_ops", "--device", "cuda", "--full", "--only",
                         "nms,nms_indices,nms_dets,batched_nms,batched_nms_dets", "--json", timeout=300),
          needs=("install90",), outputs=("ops_nms_sm90.json",)),
    Stage("opsnmsci", "gpu", "nms and batched_nms at 100 and 1,000 boxes against torchvision's (also with the same "
          "dets, and the compiled op alone): 21 ABBA pairs a row, the ratio's 95% interval",
          lambda r: _lab(r, "ops_nms_paired_sm90", "mmstack_lab.ops.bench_ops", "--device", "cuda", "--full", "--only",
                         "nms,nms_indices,nms_dets,batched_nms,batched_nms_dets", "--nms-sizes", "100,1000",
                         "--paired", "--repeats", "21", "--json", timeout=300),
          needs=("install90",), outputs=("ops_nms_paired_sm90.json",)),
    Stage("detops", "gpu", "what each detector stage dispatches and where the host waits, batch 2 and 8",
          lambda r: _lab(r, "detector_ops_bs2_sm90", "mmstack_lab.detector.detector_ops", "--device", "cuda",
                         "--batch-size", "2", "--json", timeout=240)
          or _lab(r, "detector_ops_bs8_sm90", "mmstack_lab.detector.detector_ops", "--device", "cuda",
                  "--batch-size", "8", "--json", timeout=240),
          needs=("install90",), outputs=("detector_ops_bs*_sm90.json",), docs="detector-ops"),
    Stage("runneroh", "gpu", "what mmengine's Runner, hooks, logging and the DataLoader add per iteration",
          lambda r: _lab(r, "runner_overhead_sm90", "mmstack_lab.detector.runner_overhead", "--device", "cuda", "--json"),
          needs=("install90",), outputs=("runner_overhead_sm90.json",)),
    Stage("detprocs", "gpu", "mmdet against torchvision in fresh child processes, ABBA, at each --detprocs batch size (95% intervals)",
          _detprocs, needs=("install90",), outputs=("detprocs_bs*_sm90.json",), docs="detector-processes"),
    Stage("bench", "gpu", "ops against torchvision, detector it/s and stages at batch 2, 8, 16, profiles", _bench,
          needs=("install90",), outputs=("ops_full_sm90.json", "detector_bs*_sm90.json"), docs="ops-now"),
)

STAGES: tuple[Stage, ...] = STAGES_BUILD + STAGES_GPU
BY_NAME = {s.name: s for s in STAGES}
# what the two machines run by default: the build machine compiles, the GPU machine tests
CPU_DEFAULT = ("standin", "recipes", "noarch", "mmengine", "sm90", "mmdet")
GPU_DEFAULT = ("standin", "seed", "test", "install90", "ckpt")


def plan(names: list[str]) -> list[Stage]:
    """The named stages in registry order; an unknown name is a ValueError naming the known ones."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    return [s for s in STAGES if s.name in names]
