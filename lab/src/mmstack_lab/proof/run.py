"""The GPU proof's driver: run stages of the registry (stages.py) and hand the results back.

On the build machine (no GPU, 2 cores here): compile the packages with their tests skipped, into
.carry/packages for the next GPU call to carry:

    PY=/path/to/venv-with-the-GPU-machine's-torch/bin/python  # same torch and CUDA: the same ABI
    $PY -m mmstack_lab.proof.run --where cpu --carry .carry --res /tmp/cpub/res --work /tmp/cpub/w \\
        --packages-to .carry/packages

On the lent GPU machine (a device call; $OUT set): the stand-in channel, the carried packages, their
test sections on the GPU, the installed ladder and L6, in one foreground call:

    python -m mmstack_lab.proof.run --where gpu --carry .carry --stages "standin seed test install90 ckpt"

`--start S` detaches the run (setsid) and collects for S seconds; `--collect S` collects again on the
same warm machine. Results: RES/STATUS (one line per stage boundary), RES/machine.txt, one file per
command (RES/<name>.json or .out, .err, <name>_time.json), handed back as one $OUT/res.tgz at every
stage boundary with our packages under $OUT/packages. A stage whose `needs` did not run in this
call or an earlier one on the same machine (WORK/.done-<stage>) is refused before anything runs.

Run with lab/src and the checkout's src/ on PYTHONPATH where the lab is not installed (the device):
`PYTHONPATH=lab/src python -m mmstack_lab.proof.run ...`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mmstack_lab.proof.context import Run, machine_facts
from mmstack_lab.proof.stages import BY_NAME, CPU_DEFAULT, GPU_DEFAULT, plan

ROOT = Path(__file__).resolve().parents[4]
DETACHED_LOG = "/tmp/gpu-proof.out"
CARRIED = ("wheels", "sdist", "site.tar.xz", "packages", "proposed")  # the carry's parts the stages read


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0


def _machine_txt(r: Run) -> None:
    lines = []
    for cmd in (["nvidia-smi", "--query-gpu=name,compute_cap,driver_version,memory.total", "--format=csv,noheader"],
                ["nvcc", "--version"], ["gcc", "--version"]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()
        except FileNotFoundError:
            out = [f"{cmd[0]}: not found"]
        lines += out[-2:] if cmd[0] == "nvcc" else out[:1]
    f = r.facts
    lines += [f"python {f['python_full']} torch {f['torch_full']} cuda {f['cuda_full']}", f"cores: {os.cpu_count()}",
              f"variant: {' '.join(r.variant())}", f"test sections in the builds: {'yes' if r.test else 'no (--no-test)'}"]
    commit = r.root / ".gpu-commit"
    lines.append("tree: " + (commit.read_text().splitlines()[0] if commit.is_file() else "(no .gpu-commit)"))
    here = subprocess.run(["bash", str(r.root / "lab" / "gpu" / "tree-digest.sh")], capture_output=True, text=True).stdout.strip()
    sent = next((ln.split()[1] for ln in (commit.read_text().splitlines() if commit.is_file() else []) if ln.startswith("digest ")), "")
    state = ("matches .gpu-commit" if sent == here else
             ".gpu-commit has no digest: unchecked" if not sent else f"STALE: .gpu-commit names {sent}")
    lines.append(f"tree_digest: {here} ({state})")
    (r.res / "machine.txt").write_text("\n".join(lines) + "\n")


def _unpack_site(r: Run) -> None:
    """py-rattler(-build), zstandard and their pure dependencies from the carry, into WORK/site (not into the builds)."""
    r.site.mkdir(parents=True, exist_ok=True)
    archive = r.carry / "site.tar.xz"
    if archive.is_file():
        subprocess.run(["tar", "xJf", str(archive), "-C", str(r.site), "--strip-components=1"], check=True)
    wheels = [str(p) for pat in ("py_rattler*.whl", "pydantic*.whl", "annotated_types*.whl", "typing_inspection*.whl",
                                 "pyelftools*.whl") for p in sorted((r.carry / "wheels").glob(pat))]
    if wheels:
        subprocess.run([r.py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
                        "--upgrade", "--target", str(r.site), *wheels], check=True)


def execute(r: Run, names: list[str], *, packages_to: Path | None = None, rehearse: bool = False) -> int:
    stages = plan(names)
    done = {p.name.removeprefix(".done-") for p in r.work.glob(".done-*")}
    missing = [f"{s.name} needs {n}" for s in stages for n in s.needs if n not in names and n not in done]
    if missing:
        r.status("FAIL plan: " + "; ".join(missing) + " (run those stages first, on this machine)")
        return 2
    if rehearse:
        r.status("REHEARSAL: GPU stages run without a GPU (their GPU levels fail or skip); nothing here is a GPU result")
        # the solver sees the sm_90 GPU install90's packages target, with the driver of the venv torch's
        # CUDA, as conda and pixi do under these overrides (a CPU-only torch sets none: install90 then fails)
        if r.facts.get("cuda"):
            os.environ.setdefault("CONDA_OVERRIDE_CUDA", r.facts["cuda"])
            os.environ.setdefault("CONDA_OVERRIDE_CUDA_ARCH", "9.0")
        r.status("REHEARSAL: " + " ".join(f"{k}={os.environ[k]}" for k in ("CONDA_OVERRIDE_CUDA", "CONDA_OVERRIDE_CUDA_ARCH")
                                          if k in os.environ))
    elif "gpu" in {s.where for s in stages} and not _has_gpu():
        r.status("FAIL plan: " + ", ".join(s.name for s in stages if s.where == "gpu") + " need a GPU; this machine has none")
        return 2
    rc_all = 0
    for s in stages:
        r.status(f"{s.name}: {s.summary}")
        started = time.monotonic()
        rc = s.run(r)
        r.status(f"{s.name} rc={rc} in {time.monotonic() - started:.0f}s")
        if rc == 0:
            (r.work / f".done-{s.name}").touch()
        elif s.name in ("standin", "seed"):
            return rc  # nothing after these can run
        rc_all = rc_all or rc
    if packages_to is not None:
        packages_to.mkdir(parents=True, exist_ok=True)
        for p in r.ours():
            shutil.copy2(p, packages_to / p.name)
        r.status(f"packages: {', '.join(p.name for p in r.ours())} -> {packages_to}")
    r.status("end")
    return rc_all


def _without(argv: list[str], *options: str) -> list[str]:
    """argv less each named option and its value (`--opt V` or `--opt=V`)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in options:
            skip = True
        elif not a or a.split("=", 1)[0] in options:
            continue
        else:
            out.append(a)
    return out


def _stable_copy(r: Run) -> tuple[Path, Path]:
    """The checkout and the carry, copied to WORK/tree and WORK/carry for a detached run.

    The device tool copies the working tree (and every carried path) afresh on each call, so a
    later `--collect` call replaces the directory a detached run started from: its cwd is then a
    deleted directory, and each process it starts after that fails (rattler's "Could not retrieve
    the current directory", oneMKL's "Cannot load libtorch_cpu.so"; both seen on the H100,
    lab/results/h100/recipe-run10). A copy outside the checkout is left alone by later calls.
    """
    tree, carry = r.work / "tree", r.work / "carry"
    for dst in (tree, carry):
        shutil.rmtree(dst, ignore_errors=True)
    r.work.mkdir(parents=True, exist_ok=True)
    shutil.copytree(r.root, tree, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__", ".venv", ".carry*", ".gpu-tree*", ".*_cache"))
    carry.mkdir()
    for name in CARRIED:  # what the stages read from the carry, nothing else of the folder it is in
        src = r.carry / name
        if src.is_dir():
            shutil.copytree(src, carry / name, symlinks=True)
        elif src.is_file():
            shutil.copy2(src, carry / name)
    return tree, carry


def _batches(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(b) for b in text.replace(",", " ").split())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive batch sizes, e.g. '8 16'")
    return sizes


def _collect(r: Run, seconds: float) -> int:
    until = time.monotonic() + seconds
    while not (r.res / "DONE").exists() and time.monotonic() < until:
        time.sleep(2)
    r.hand_back(r.out or Path("/tmp/out"))
    status = (r.res / "STATUS").read_text() if (r.res / "STATUS").is_file() else ""
    print(f"--- done={'yes' if (r.res / 'DONE').exists() else 'no'}\n{status[-3000:]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--where", choices=("cpu", "gpu"), help="the default stage set (default: gpu if a GPU is present)")
    ap.add_argument("--stages", help=f"space- or comma-separated, from: {' '.join(BY_NAME)}")
    ap.add_argument("--carry", type=Path, default=Path(os.environ.get("CARRY", ROOT.parent)))
    ap.add_argument("--res", type=Path, default=Path(os.environ.get("RES", "/tmp/res")))
    ap.add_argument("--work", type=Path, default=Path(os.environ.get("WORK", "/tmp/gp")))
    ap.add_argument("--py", default=os.environ.get("PY", sys.executable), help="the interpreter whose torch the builds use")
    ap.add_argument("--no-test", action="store_true", help="builds skip their test sections (default with --where cpu)")
    ap.add_argument("--proposed", action="store_true", help="mmcv and mmdet builds apply recipes/*/proposed/*.patch too; "
                    "on the GPU, seed takes $CARRY/proposed's builds in place of the same packages in $CARRY/packages")
    ap.add_argument("--ptx-arch", default="8.0", help="the ptx stage builds '<ARCH>+PTX' (e.g. 8.9 for the rtx4090 row)")
    ap.add_argument("--detprocs", type=_batches, default=(8, 16, 2), metavar="BATCHES",
                    help="the detprocs stage's batch sizes, in order (default: '8 16 2')")
    ap.add_argument("--pairs", type=int, default=10, help="the detprocs stage's ABBA process pairs per batch size")
    ap.add_argument("--test-only", default="", metavar="NAMES",
                    help="the test stage tests these of our packages only, e.g. 'mmdet' (default: every one)")
    ap.add_argument("--patchab-only", default="", metavar="NAMES",
                    help="the patchab stage runs these candidates only, by package and number, e.g. 'mmdet-0009' "
                    "(default: every one with a patch_ab: line)")
    ap.add_argument("--rehearse", action="store_true",
                    help="run GPU stages on a machine without one (plumbing only; results say REHEARSAL)")
    ap.add_argument("--packages-to", type=Path, help="copy our built packages here at the end (e.g. .carry/packages)")
    ap.add_argument("--start", type=float, metavar="S", help="run detached, then collect for S seconds")
    ap.add_argument("--collect", type=float, metavar="S", help="collect a detached run for S seconds")
    args = ap.parse_args(argv)
    where = args.where or ("gpu" if _has_gpu() else "cpu")
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    r = Run(root=ROOT, carry=args.carry.resolve(), res=args.res, work=args.work, py=args.py,
            test=not (args.no_test or where == "cpu"), proposed=args.proposed, ptx_arch=args.ptx_arch,
            detprocs_batches=args.detprocs, detprocs_pairs=args.pairs,
            test_only=tuple(args.test_only.replace(",", " ").split()),
            patchab_only=tuple(args.patchab_only.replace(",", " ").split()),
            out=None if (args.start or args.collect) else out)
    if args.collect is not None:
        r.out = out
        return _collect(r, args.collect)
    if args.start is not None:
        shutil.rmtree(r.res, ignore_errors=True)
        r.res.mkdir(parents=True)
        tree, carry = _stable_copy(r)
        cmd = [sys.executable, "-m", "mmstack_lab.proof.run", *_without(argv or sys.argv[1:], "--start", "--carry"),
               "--carry", str(carry)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "lab" / "src"),
                                                             *filter(None, [os.environ.get("PYTHONPATH", "")])])}
        with open(DETACHED_LOG, "w") as log:
            subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                             cwd=tree, env=env)
        r.out = out
        return _collect(r, args.start)
    r.res.mkdir(parents=True, exist_ok=True)
    r.work.mkdir(parents=True, exist_ok=True)
    (r.res / "DONE").unlink(missing_ok=True)
    names = (args.stages or " ".join(CPU_DEFAULT if where == "cpu" else GPU_DEFAULT)).replace(",", " ").split()
    try:
        plan(names)
    except ValueError as exc:
        print(f"mmstack_lab.proof.run: --stages: {exc}", file=sys.stderr)
        return 2
    try:
        if os.environ.get("SKIP_PIP") is None:
            _unpack_site(r)
        r.facts = machine_facts(r.root, r.py)
        _machine_txt(r)
        return execute(r, names, packages_to=args.packages_to, rehearse=args.rehearse)
    finally:
        (r.res / "DONE").touch()
        r.hand_back()


if __name__ == "__main__":
    raise SystemExit(main())
