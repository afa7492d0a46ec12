"""STAND-IN CHANNEL (development, CI and device runs only): conda-forge's CUDA parts, from this machine.

`recipes/mmcv` built for a CUDA variant needs conda-forge's `pytorch` (a cuda13x build),
`cuda-nvcc` (compiler('cuda')), the `-dev` packages of its host section and `cuda-version`. A
machine without conda-forge (the lent H200 has no network) can still run that build through the
real rattler-build engine with a channel assembled from what the machine has, the way
mmstack_lab.standin.bootstrap assembles the CPU one (its wheel repacking, recipe building and
indexing are reused here):

- `python`: a venv-style prefix over this interpreter's base CPython (`sys._base_executable`):
  bin/pythonX.Y plus `pyvenv.cfg` pointing at the base, so the stdlib, headers and sysconfig are the
  base's own. Works for a distribution's patched /usr python (Debian/Ubuntu: dist-packages
  schemes), which cannot be copied into a prefix. Only runs on this machine. Plus `python_abi`.
- `libtorch`: the installed torch, repacked file by file from its installed RECORD, and every
  `nvidia-*`/`cuda-*`/`triton` distribution it requires (cuBLAS, cuDNN, NCCL, ...), each repacked
  the same way under its PyPI name; `pytorch` (build string `cuda130_standin_py312_h…`) on top,
  with conda-forge's run_exports (`pytorch >=X.Y,<X.Y+1`) and an activation script exporting
  CF_TORCH_CUDA_ARCH_LIST (from torch.cuda.get_arch_list()) as conda-forge's pytorch does; the
  installed torchvision, if any, as `torchvision`. Installed distributions depend on what their
  own metadata requires (under this channel's names), so `pip check` holds in any environment.
- the CUDA toolkit nvcc belongs to, laid out as conda-forge lays it out (`targets/x86_64-linux`):
  `cuda-nvcc-tools` (nvcc, ptxas, nvvm, headers), `cuda-nvcc_linux-64` (activation behaving like
  conda-forge's: -ccbin=$CXX, the host prefix's targets dir on nvcc's and the C/C++ compilers'
  include and library paths, run_exports `cuda-version`), `cuda-nvcc`, `cuda-cudart-dev`, and
  `libcublas-dev`, `libcusparse-dev`, `libcurand-dev`, `libcusolver-dev` (headers of the matching
  nvidia-* distribution), `cuda-version`.
- `cuda-arch` (CEP 46's metapackage), one per version conda-forge publishes
  (tests/data/solver_selection/cuda-arch-versions.toml), built through rattler-build from a recipe
  with conda-forge's metadata: noarch generic, run-export `cuda-arch >=<version>`, run constraint
  `__cuda_arch <version>.*`. recipes/mmcv's per-generation builds take it in host.
- `gcc_linux-64`/`gxx_linux-64`/`sysroot_linux-64`: activation pointing at the system gcc/g++ with
  conda-forge's default flags (-O2 -fPIC ...), so host code is optimised as in a conda-forge build.
- every package of bootstrap.WHEELS: the installed distribution when this interpreter has it,
  else the wheel of that name in `wheel_dir` (the wheels carried to the device).

Every package says STAND-IN in about.summary and about.description; the recipe-built ones also
carry `extra: mmstack-stand-in`. Nothing here is a product default.

    python -m mmstack_lab.standin.bootstrap_cuda DEST [--wheels DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from mmstack_lab.paths import ROOT
from mmstack_lab.standin import bootstrap
from mmstack_lab.standin.bootstrap import PY, PY_ABI, PY_PIN, PY_TAG, STAMP, BootstrapUnavailable, Wheel

STAND_IN = "STAND-IN (mmstack_lab.standin.bootstrap_cuda)"
TARGETS = "targets/x86_64-linux"
# torch requirements left out of the stand-in pytorch (none: pip check in the recipe's tests
# sees every requirement of torch's metadata).
LEFT_OUT: set[str] = set()
# What torch requires that is repacked with it (the rest comes from bootstrap.WHEELS).
TORCH_CLOSURE = ("nvidia-", "cuda-", "triton")
# conda-forge -dev package -> the nvidia-* distribution whose headers it carries
DEV_FROM_WHEEL = {
    "libcublas-dev": "nvidia-cublas",
    "libcusparse-dev": "nvidia-cusparse",
    "libcurand-dev": "nvidia-curand",
    "libcusolver-dev": "nvidia-cusolver",
    "libcufft-dev": "nvidia-cufft",
    "libnvjitlink-dev": "nvidia-nvjitlink",
    "cuda-nvrtc-dev": "nvidia-cuda-nvrtc",
}
# The compiler's own files in the toolkit's bin/ (the rest of bin/ is profilers, debuggers, ...)
NVCC_BIN = ("nvcc", "nvcc.profile", "ptxas", "fatbinary", "nvlink", "cudafe++", "bin2c", "crt",
            "__nvcc_device_query", "cu++filt", "nvdisasm", "cuobjdump")
Log = bootstrap.Log


# what the proof's summary names as the stand-in's builder (run as `python -m ...` or imported)
_BUILT_BY = __spec__.name if __spec__ is not None else "mmstack_lab.standin.bootstrap_cuda"

def about(what: str) -> dict:
    return {"summary": f"{STAND_IN}: {what}",
            "description": f"{STAND_IN}. Not the conda-forge package of this name: {what}. "
                           "Assembled offline from this machine's files for a test build."}


# ---------------------------------------------------------------------------------------------
# entry point


def build_channel(dest: Path, *, wheel_dir: Path | None = None, log: Log = print) -> dict:
    """Assemble the stand-in channel at `dest` (replaced if present); return a summary dict."""
    started = time.monotonic()
    toolkit = find_toolkit()
    torch_dist = _dist("torch")
    if torch_dist is None:
        raise BootstrapUnavailable(f"{sys.executable} has no torch installed")
    cuda_version = _torch_cuda_version()
    dest = Path(dest).resolve()
    work = Path(tempfile.mkdtemp(prefix=".tmp-standin-", dir=dest.parent))
    timings: dict[str, float] = {}

    def step(name, fn, *args, **kwargs):
        t = time.monotonic()
        out = fn(*args, **kwargs)
        timings[name] = round(time.monotonic() - t, 1)
        log(f"stand-in channel: {name} in {timings[name]:.0f}s")
        return out

    try:
        channel = work / "channel"
        for sub in ("linux-64", "noarch"):
            (channel / sub).mkdir(parents=True)
        step("python", build_python_venv, channel, work / "py")
        step("compiler stubs", build_compiler_stubs, channel, work / "recipes")
        step("wheels", repack_wheels, channel, work / "stage", wheel_dir=wheel_dir, log=log)
        cuda_dists = step("pytorch", repack_torch, channel, work / "stage", work / "recipes", cuda_version=cuda_version, log=log)
        step("cuda toolkit", build_toolkit, channel, work / "recipes", toolkit=toolkit, cuda_version=cuda_version)
        step("cuda dev", build_dev_packages, channel, toolkit=toolkit, cuda_version=cuda_version)
        step("cuda-arch", build_cuda_arch, channel, work / "recipes")
        step("index", bootstrap.index, channel)
        if dest.exists():
            shutil.rmtree(dest)
        channel.rename(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    packages = sorted(
        ({"file": f"{p.parent.name}/{p.name}", "bytes": p.stat().st_size} for p in dest.glob("*/*.conda")),
        key=lambda d: str(d["file"]))
    summary = {
        "channel": str(dest), "stand_in": True, "built_by": _BUILT_BY,
        "python": sys.version.split()[0], "base_python": _base_python(),
        "torch": torch_dist.version, "torch_cuda": cuda_version, "toolkit": str(toolkit),
        "nvcc": _nvcc_version(toolkit), "cuda_distributions": cuda_dists, "left_out": sorted(LEFT_OUT),
        "seconds": round(time.monotonic() - started, 1), "step_seconds": timings, "packages": packages,
    }
    (dest / "stand-in.json").write_text(json.dumps(summary, indent=1))
    return summary


def find_toolkit() -> Path:
    """The toolkit that nvcc on PATH (or $CUDA_HOME/bin/nvcc) belongs to, by nvcc's real path."""
    nvcc = shutil.which("nvcc") or (os.environ.get("CUDA_HOME") and str(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc"))
    if not nvcc or not Path(nvcc).is_file():
        raise BootstrapUnavailable("no nvcc on PATH and no $CUDA_HOME/bin/nvcc")
    root = Path(nvcc).resolve().parent.parent
    if not (root / TARGETS / "include" / "cuda_runtime.h").is_file():
        # nvcc on PATH may be a wrapper script (this development machine's /usr/local/bin/nvcc
        # execs /usr/local/cuda-13.0/bin/nvcc): nvcc's dry run names the directory it runs from
        root = _nvcc_home(nvcc) or root
    if not (root / TARGETS / "include" / "cuda_runtime.h").is_file():
        raise BootstrapUnavailable(f"{root} has no {TARGETS}/include/cuda_runtime.h")
    return root


def _nvcc_home(nvcc: str) -> Path | None:
    """The toolkit root of the nvcc a wrapper runs, from `nvcc --dryrun`'s `_HERE_` line."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cu"
        src.write_text("")
        out = subprocess.run([nvcc, "--dryrun", "-c", str(src), "-o", str(Path(tmp) / "probe.o")],
                             capture_output=True, text=True)
    m = re.search(r"^#\$ _HERE_=(.+)$", out.stdout + out.stderr, re.M)
    return Path(m.group(1).strip()).resolve().parent if m else None


# ---------------------------------------------------------------------------------------------
# python


def build_python_venv(channel: Path, work: Path) -> None:
    """`python` as a venv-style prefix over the base interpreter, and `python_abi`."""
    import rattler_build

    base = Path(getattr(sys, "_base_executable", "") or sys.executable).resolve()
    version = ".".join(str(p) for p in sys.version_info[:3])
    stage = work / "python"
    (stage / "bin").mkdir(parents=True)
    shutil.copy2(base, stage / "bin" / f"python{PY}")
    for alias in ("python3", "python"):
        os.symlink(f"python{PY}", stage / "bin" / alias)
    (stage / "pyvenv.cfg").write_text(
        f"home = {base.parent}\ninclude-system-site-packages = false\nversion = {version}\n"
        f"executable = {base}\n# {STAND_IN}: a venv over {base}\n")
    site = stage / "lib" / f"python{PY}" / "site-packages"
    site.mkdir(parents=True)
    (site / "README.txt").write_text(f"{STAND_IN}: site-packages of a venv-style prefix over {base}\n")
    rattler_build.assemble_package(
        name="python", version=version, target_platform="linux-64",
        build_string=f"h{_short(str(base) + sys.version)}_0_cpython", output_dir=channel / "linux-64",
        files_dir=stage, timestamp=STAMP, compression_level=1,
        **about(f"CPython {version}: a venv-style prefix over {base} (its stdlib, headers and libpython)"),
    )
    empty = work / "empty"
    empty.mkdir()
    rattler_build.assemble_package(
        name="python_abi", version=PY, target_platform="linux-64", build_string=f"8_cp{PY_TAG}",
        output_dir=channel / "linux-64", files_dir=empty, constrains=[f"python {PY}.* *_cpython"],
        timestamp=STAMP, **about("python_abi"),
    )


# ---------------------------------------------------------------------------------------------
# installed distributions and carried wheels


def repack_wheels(channel: Path, stage: Path, *, wheel_dir: Path | None, log: Log = print) -> list[str]:
    """Every bootstrap.WHEELS entry: installed here -> repacked from its RECORD, else a carried wheel."""
    missing, done = [], []
    torch_dist = _dist("torch")
    known = _known_names(cuda_closure(torch_dist) if torch_dist else [])
    for wheel in bootstrap.WHEELS:
        dist = _dist(wheel.pypi)
        if dist is not None:
            # the installed set is consistent as pip resolved it: its own requirements, unpinned
            names = _conda_depends(dist, known, log)
            repack_installed(dist, Wheel(wheel.pypi, dist.version, wheel.conda, names), channel, stage)
            done.append(f"{wheel.name}={dist.version} (installed)")
            continue
        whl = _find_any_wheel(wheel_dir, wheel) if wheel_dir else None
        if whl is None:
            missing.append(f"{wheel.pypi}=={wheel.version}")
            continue
        version = whl.name.split("-")[1]
        bootstrap.repack_wheel(whl, Wheel(wheel.pypi, version, wheel.conda, wheel.depends), channel, stage, log=log)
        done.append(f"{wheel.name}={version} (wheel)")
    if missing:
        raise BootstrapUnavailable(f"neither installed nor a wheel in {wheel_dir}: {', '.join(missing)}")
    return done


def repack_installed(dist: metadata.Distribution, wheel: Wheel, channel: Path, stage_root: Path, *,
                     build_string: str | None = None, extra_depends: tuple[str, ...] = (),
                     extra_files: tuple[tuple[Path, str], ...] = (), what: str = "") -> Path:
    """An installed distribution as a conda package, file by file from its RECORD.

    Files under its site-packages dir keep their place there; files in the environment's bin/
    (console scripts) go to bin/ with a `#!/usr/bin/env python` shebang. Pure distributions (no
    shared objects) become noarch: python, the others linux-64 for this python.
    """
    import rattler_build

    site_dir = Path(str(dist.locate_file(""))).resolve()
    bin_dir = Path(sys.prefix).resolve() / "bin"
    entries: list[tuple[Path, str]] = []
    for f in dist.files or []:
        if "__pycache__" in f.parts:
            continue
        path = Path(str(dist.locate_file(f)))
        if not path.is_file():
            continue
        real = path.resolve() if not path.is_symlink() else path.parent.resolve() / path.name
        if real.is_relative_to(site_dir):
            entries.append((path, real.relative_to(site_dir).as_posix()))
        elif real.is_relative_to(bin_dir):
            entries.append((path, "bin/" + real.name))
    if not entries:
        raise BootstrapUnavailable(f"{dist.metadata['Name']} {dist.version}: no files in its RECORD")
    pure = not any(".so" in Path(dest).name for _, dest in entries)
    stage = stage_root / f"{wheel.pypi}-{dist.version}"
    shutil.rmtree(stage, ignore_errors=True)
    files = []
    for src, rel in entries:
        if rel.startswith("bin/"):
            src = _with_env_shebang(src, stage / rel)
            rel = ("python-scripts/" if pure else "bin/") + rel[4:]
        elif not pure:
            rel = f"lib/python{PY}/site-packages/{rel}"
        else:
            rel = f"site-packages/{rel}"
        files.append(rattler_build.FileEntry.from_paths(src, rel))
    for src, rel in extra_files:
        files.append(rattler_build.FileEntry.from_paths(src, rel))
    # pip leaves a distribution whose INSTALLER is not its own alone
    files = [f for f in files if not str(f.destination).endswith(".dist-info/INSTALLER")]
    installer = stage / "INSTALLER"
    installer.parent.mkdir(parents=True, exist_ok=True)
    installer.write_text("conda\n")
    prefix = "site-packages" if pure else f"lib/python{PY}/site-packages"
    for dist_info in sorted({rel.split("/")[0] for _, rel in entries if rel.split("/")[0].endswith(".dist-info")}):
        files.append(rattler_build.FileEntry.from_paths(installer, f"{prefix}/{dist_info}/INSTALLER"))
    digest = _short(f"{dist.metadata['Name']}-{dist.version}-{sys.prefix}")
    if pure:
        depends = [f"python >={PY}", *wheel.depends, *extra_depends]
        build_string = build_string or f"pyh{digest}_0"
        subdir = "noarch"
    else:
        depends = [PY_PIN, PY_ABI, *wheel.depends, *extra_depends]
        build_string = build_string or f"py{PY_TAG}h{digest}_0"
        subdir = "linux-64"
    out = rattler_build.assemble_package(
        name=wheel.name, version=wheel.version, target_platform=subdir, build_string=build_string,
        output_dir=channel / subdir, files=files, depends=depends, noarch="python" if pure else None,
        compression_level=1, timestamp=STAMP, detect_prefix=False,
        **about(what or f"the installed PyPI distribution {dist.metadata['Name']} {dist.version}, repacked from its RECORD"),
    )
    shutil.rmtree(stage, ignore_errors=True)
    return out.path


def repack_torch(channel: Path, stage: Path, recipes: Path, *, cuda_version: str, log: Log = print) -> list[str]:
    """The installed torch: its files as `libtorch`, `pytorch` (cudaXYZ build string, run_exports,
    CF_TORCH_CUDA_ARCH_LIST activation) on top, its nvidia-*/cuda-*/triton closure, torchvision."""
    torch_dist = _dist("torch")
    if torch_dist is None:
        raise BootstrapUnavailable("torch is not installed in this interpreter: the stand-in pytorch repacks it")
    closure = cuda_closure(torch_dist)
    known = _known_names(closure)
    names = []
    for dist in closure:
        name = _canon(dist.metadata["Name"])
        t = time.monotonic()
        repack_installed(dist, Wheel(name, dist.version, depends=_conda_depends(dist, known, log)), channel, stage)
        log(f"  repacked {name} {dist.version} in {time.monotonic() - t:.0f}s")
        names.append(f"{name}={dist.version}")
    tag = "cuda" + cuda_version.replace(".", "")
    version = torch_dist.version.split("+")[0]
    major, minor = (int(x) for x in version.split(".")[:2])
    build = f"{tag}_standin_py{PY_TAG}_h{_short(torch_dist.version + sys.prefix)}_0"
    t = time.monotonic()
    repack_installed(
        torch_dist, Wheel("torch", version, "libtorch", _conda_depends(torch_dist, known, log)), channel, stage,
        build_string=build,
        # torch asks for cuda-toolkit[cublas,...]: the extras' libraries are what it loads
        extra_depends=(*(n.split("=")[0] for n in names), f"cuda-version >={cuda_version},<{int(cuda_version.split('.')[0]) + 1}"),
        what=f"the whole installed torch {torch_dist.version} (CUDA {cuda_version}: python and C++ files), repacked "
             f"from its RECORD; its nvidia-*/cuda-*/triton distributions are separate stand-ins",
    )
    log(f"  repacked torch {torch_dist.version} as libtorch in {time.monotonic() - t:.0f}s")
    recipe_dir = recipes / "pytorch"
    recipe_dir.mkdir(parents=True)
    (recipe_dir / "activate.sh").write_text(_TORCH_ACTIVATE.format(stand_in=STAND_IN, arch_list=cf_arch_list()))
    (recipe_dir / "deactivate.sh").write_text(_TORCH_DEACTIVATE.format(stand_in=STAND_IN))
    (recipe_dir / "recipe.yaml").write_text(_PYTORCH_RECIPE.format(
        stand_in=STAND_IN, version=version, build=build, py=PY, py_next=f"{sys.version_info.major}.{sys.version_info.minor + 1}",
        py_tag=PY_TAG, major=major, minor=minor, next_minor=minor + 1, torch=torch_dist.version, cuda=cuda_version))
    bootstrap._build_recipe(recipe_dir, channel, log=log)
    vision = _dist("torchvision")
    if vision is not None:
        repack_installed(vision, Wheel("torchvision", vision.version.split("+")[0], depends=_conda_depends(vision, known, log)),
                         channel, stage, build_string=f"{tag}_standin_py{PY_TAG}_h{_short(vision.version + sys.prefix)}_0")
        names.append(f"torchvision={vision.version}")
    return names


def _known_names(closure: list[metadata.Distribution]) -> dict[str, str]:
    """PyPI name (canonical) -> conda name, for everything this channel holds."""
    known = {_canon(w.pypi): w.name for w in bootstrap.WHEELS}
    known.update({_canon(d.metadata["Name"]): _canon(d.metadata["Name"]) for d in closure})
    known.update({"torch": "pytorch", "torchvision": "torchvision"})
    return known


def _conda_depends(dist: metadata.Distribution, known: dict[str, str], log: Log = print) -> tuple[str, ...]:
    """The distribution's own requirements (those that apply here) under this channel's names."""
    out, unknown = [], []
    for name in _requirement_names(dist, follow_extras=False):
        key = _canon(name)
        if key in known:
            if known[key] not in out:
                out.append(known[key])
        else:
            unknown.append(key)
    if unknown:
        log(f"  {dist.metadata['Name']}: requirements not in the channel: {', '.join(sorted(set(unknown)))}")
    return tuple(out)


_PYTORCH_RECIPE = """\
# {stand_in}: conda-forge's pytorch package over the installed torch {torch} (libtorch holds its files).
package:
  name: pytorch
  version: "{version}"
build:
  number: 0
  string: {build}
  script:
    content: |
      mkdir -p "$PREFIX/etc/conda/activate.d" "$PREFIX/etc/conda/deactivate.d"
      cp "$RECIPE_DIR/activate.sh" "$PREFIX/etc/conda/activate.d/pytorch_activate.sh"
      cp "$RECIPE_DIR/deactivate.sh" "$PREFIX/etc/conda/deactivate.d/pytorch_deactivate.sh"
requirements:
  run:
    - libtorch =={version} {build}
    - python >={py},<{py_next}.0a0
    - python_abi {py}.* *_cp{py_tag}
  run_exports:
    weak:
      # pytorch-cpu-feedstock: pin_subpackage('pytorch', max_pin='x.x')
      - pytorch >={major}.{minor}.0,<{major}.{next_minor}.0a0
about:
  summary: "{stand_in}: pytorch {version} (CUDA {cuda}) over the installed torch {torch}"
  description: "{stand_in}. Not conda-forge's pytorch: the torch installed on this machine, repacked; run_exports and CF_TORCH_CUDA_ARCH_LIST activation as conda-forge's."
extra:
  mmstack-stand-in: "true"
"""


def cuda_closure(dist: metadata.Distribution) -> list[metadata.Distribution]:
    """The installed nvidia-*/cuda-* distributions `dist` requires, directly or through them."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [dist]
    while todo:
        d = todo.pop()
        for name in _requirement_names(d):
            key = _canon(name)
            if key in seen or key in LEFT_OUT or not key.startswith(TORCH_CLOSURE):
                continue
            found = _dist(key)
            if found is None:
                raise BootstrapUnavailable(f"torch needs {key}, which is not installed")
            seen[key] = found
            todo.append(found)
    return [seen[k] for k in sorted(seen)]


# ---------------------------------------------------------------------------------------------
# toolkit


def build_toolkit(channel: Path, recipes: Path, *, toolkit: Path, cuda_version: str) -> None:
    """cuda-version, cuda-nvcc_linux-64 (activation, run_exports), cuda-nvcc (rattler-build recipe);
    cuda-nvcc-tools (the compiler's files, assembled)."""
    import rattler_build

    nvcc_version = _nvcc_version(toolkit)
    major = int(cuda_version.split(".")[0])
    files = []
    for name in NVCC_BIN:
        src = toolkit / "bin" / name
        if src.exists():
            files += _tree_entries(src, f"bin/{name}")
    files += _tree_entries(toolkit / "nvvm", "nvvm")
    files += _tree_entries(toolkit / TARGETS / "include", f"{TARGETS}/include")
    for lib in ("libcudadevrt.a", "libcudart_static.a", "libculibos.a"):
        if (toolkit / TARGETS / "lib" / lib).is_file():
            files.append(rattler_build.FileEntry.from_paths(toolkit / TARGETS / "lib" / lib, f"{TARGETS}/lib/{lib}"))
    rattler_build.assemble_package(
        name="cuda-nvcc-tools", version=nvcc_version, target_platform="linux-64",
        build_string="mmstack_standin_0", output_dir=channel / "linux-64", files=files,
        depends=[f"cuda-version >={cuda_version},<{major + 1}"], compression_level=1, timestamp=STAMP,
        detect_prefix=False, **about(f"nvcc {nvcc_version}, ptxas, nvvm and the toolkit headers, copied from {toolkit}"),
    )
    recipe_dir = recipes / "cuda"
    recipe_dir.mkdir(parents=True)
    (recipe_dir / "activate.sh").write_text(_NVCC_ACTIVATE.format(stand_in=STAND_IN, targets=TARGETS))
    (recipe_dir / "recipe.yaml").write_text(_TOOLKIT_RECIPE.format(
        stand_in=STAND_IN, cuda=cuda_version, nvcc=nvcc_version, major=major, next=major + 1,
        toolkit=toolkit, gcc=bootstrap.system_gcc_version()))
    bootstrap._build_recipe(recipe_dir, channel, log=print)


CUDA_ARCH_VERSIONS = ROOT / "tests" / "data" / "solver_selection" / "cuda-arch-versions.toml"


def build_cuda_arch(channel: Path, recipes: Path) -> None:
    """cuda-arch per conda-forge version, from a recipe written like conda-forge's (staged-recipes
    recipes/cuda-arch/recipe.yaml): its run-export and run constraint, noarch generic."""
    import tomllib

    spec = tomllib.loads(CUDA_ARCH_VERSIONS.read_text())
    recipe_dir = recipes / "cuda-arch"
    recipe_dir.mkdir(parents=True)
    outputs = "".join(_CUDA_ARCH_OUTPUT.format(stand_in=STAND_IN, version=v,
                                               run_export=spec["run_exports"][0].format(version=v),
                                               constraint=spec["run_constraints"][0].format(version=v))
                      for v in spec["versions"])
    (recipe_dir / "recipe.yaml").write_text(_CUDA_ARCH_RECIPE.format(stand_in=STAND_IN, source=spec["source"]) + outputs)
    bootstrap._build_recipe(recipe_dir, channel, log=print)


_CUDA_ARCH_RECIPE = """\
# {stand_in}: conda-forge's cuda-arch metapackage ({source}).
recipe:
  name: mmstack-standin-cuda-arch
  version: "1"
extra:
  mmstack-stand-in: "true"
outputs:
"""

_CUDA_ARCH_OUTPUT = """\
  - package:
      name: cuda-arch
      version: "{version}"
    build:
      number: 0
      string: mmstack_standin_0
      noarch: generic
    requirements:
      run_exports:
        - "{run_export}"
      run_constraints:
        - "{constraint}"
    about:
      summary: "{stand_in}: cuda-arch {version}, a minimum supported CUDA compute capability"
      description: "{stand_in}. conda-forge's cuda-arch metadata: installable only where __cuda_arch is {version}."
"""


def build_dev_packages(channel: Path, *, toolkit: Path, cuda_version: str) -> None:
    """cuda-cudart-dev (toolkit headers + libcudart) and the lib*-dev headers of nvidia-* wheels."""
    import rattler_build

    major = int(cuda_version.split(".")[0])
    pin = f"cuda-version >={cuda_version},<{major + 1}"
    lib = toolkit / TARGETS / "lib"
    files = _tree_entries(toolkit / TARGETS / "include", f"{TARGETS}/include")
    for so in sorted(lib.glob("libcudart.so*")):
        files.append(rattler_build.FileEntry.from_paths(so, f"{TARGETS}/lib/{so.name}"))
        files.append(rattler_build.FileEntry.from_paths(so, f"lib/{so.name}"))
    stubs = lib / "stubs"
    if stubs.is_dir():
        files += _tree_entries(stubs, f"{TARGETS}/lib/stubs")
    rattler_build.assemble_package(
        name="cuda-cudart-dev", version=_nvcc_version(toolkit), target_platform="linux-64",
        build_string="mmstack_standin_0", output_dir=channel / "linux-64", files=files, depends=[pin],
        compression_level=1, timestamp=STAMP, detect_prefix=False,
        **about(f"the CUDA runtime headers and libcudart from {toolkit}"),
    )
    for name, pypi in DEV_FROM_WHEEL.items():
        dist = _dist(pypi)
        if dist is None:
            continue
        headers = []
        for f in dist.files or []:
            parts = f.parts
            if "include" in parts and not f.name.endswith(".pyc"):
                rel = "/".join(parts[parts.index("include") + 1:])
                headers.append(rattler_build.FileEntry.from_paths(Path(str(dist.locate_file(f))), f"{TARGETS}/include/{rel}"))
        if not headers:
            continue
        rattler_build.assemble_package(
            name=name, version=dist.version, target_platform="linux-64", build_string="mmstack_standin_0",
            output_dir=channel / "linux-64", files=headers, depends=[pin, f"{pypi} =={dist.version}"],
            compression_level=1, timestamp=STAMP, detect_prefix=False,
            **about(f"the headers of the installed {pypi} {dist.version}"),
        )


# ---------------------------------------------------------------------------------------------
# compilers


def build_compiler_stubs(channel: Path, recipes: Path) -> None:
    gcc, gxx = bootstrap._compilers()
    recipe_dir = recipes / "stubs"
    recipe_dir.mkdir(parents=True)
    sysroots = "".join(_SYSROOT_OUTPUT.format(stand_in=STAND_IN, sysroot=v, floor=bootstrap.stand_in_glibc_floor(v))
                       for v in bootstrap.SYSROOT_VERSIONS)
    (recipe_dir / "recipe.yaml").write_text(_STUBS_RECIPE.format(
        stand_in=STAND_IN, gcc=gcc, gxx=gxx, gcc_version=bootstrap.system_gcc_version()) + sysroots
        + bootstrap.RUNTIME_OUTPUTS.format(stand_in=STAND_IN, gcc=gcc, gxx=gxx, gcc_version=bootstrap.system_gcc_version()))
    bootstrap._build_recipe(recipe_dir, channel, log=print)


# conda-forge's gcc/gxx activation flags for linux-64 (ctng-compiler-activation-feedstock), minus
# -isystem/-rpath pieces that need conda's own sysroot.
_CFLAGS = "-march=nocona -mtune=haswell -ftree-vectorize -fPIC -fstack-protector-strong -fno-plt -O2 -ffunction-sections -pipe"
_CXXFLAGS = _CFLAGS + " -fvisibility-inlines-hidden -fmessage-length=0"
_LDFLAGS = "-Wl,-O2 -Wl,--sort-common -Wl,--as-needed -Wl,-z,relro -Wl,-z,now -Wl,--disable-new-dtags -Wl,--gc-sections"

_STUBS_RECIPE = """\
# {stand_in}: conda-forge's compiler and sysroot package names over this machine's gcc/g++.
recipe:
  name: mmstack-standin-compilers
  version: "1"
extra:
  mmstack-stand-in: "true"
outputs:
  - package:
      name: gcc_linux-64
      version: "{gcc_version}"
    build:
      number: 0
      string: mmstack_standin_0
      script:
        content: |
          mkdir -p "$PREFIX/etc/conda/activate.d"
          cat > "$PREFIX/etc/conda/activate.d/activate-gcc_linux-64.sh" <<'EOF'
          # {stand_in}: the system C compiler, conda-forge's default flags.
          export CC="{gcc}" CC_FOR_BUILD="{gcc}" GCC="{gcc}"
          export CFLAGS="{cflags} ${{CFLAGS:-}}" CPPFLAGS="-DNDEBUG -D_FORTIFY_SOURCE=2 -O2 ${{CPPFLAGS:-}}"
          export LDFLAGS="{ldflags} ${{LDFLAGS:-}}"
          EOF
    requirements:
      run_exports:
        strong:
          - libgcc >={gcc_version}
    about:
      summary: "{stand_in}: gcc_linux-64 activation pointing at {gcc}"
      description: "{stand_in}. Not conda-forge's compiler: an activation script pointing CC at this machine's {gcc}."
  - package:
      name: gxx_linux-64
      version: "{gcc_version}"
    build:
      number: 0
      string: mmstack_standin_0
      script:
        content: |
          mkdir -p "$PREFIX/etc/conda/activate.d"
          cat > "$PREFIX/etc/conda/activate.d/activate-gxx_linux-64.sh" <<'EOF'
          # {stand_in}: the system C++ compiler, conda-forge's default flags.
          export CXX="{gxx}" CXX_FOR_BUILD="{gxx}" GXX="{gxx}"
          export CXXFLAGS="{cxxflags} ${{CXXFLAGS:-}}"
          EOF
    requirements:
      run:
        - gcc_linux-64 =={gcc_version}
      run_exports:
        strong:
          - libstdcxx >={gcc_version}
    about:
      summary: "{stand_in}: gxx_linux-64 activation pointing at {gxx}"
      description: "{stand_in}. Not conda-forge's compiler: an activation script pointing CXX at this machine's {gxx}."
"""

_SYSROOT_OUTPUT = """\
  - package:
      name: sysroot_linux-64
      version: "{sysroot}"
    build:
      number: 0
      string: mmstack_standin_0
      noarch: generic
      script:
        content: |
          mkdir -p "$PREFIX/share/mmstack-standin"
          echo "{stand_in}: no sysroot; the system glibc {floor} is used" > "$PREFIX/share/mmstack-standin/sysroot_linux-64.txt"
    requirements:
      run_exports:
        strong:
          # not conda-forge's {sysroot}: the packages link against this machine's glibc
          - __glibc >={floor},<3.0.a0
    about:
      summary: "{stand_in}: sysroot_linux-64 {sysroot} without a sysroot (links against the system glibc {floor})"
      description: "{stand_in}. Exports __glibc >={floor}, the glibc packages built with it really need."
"""
_STUBS_RECIPE = _STUBS_RECIPE.replace("{cflags}", _CFLAGS).replace("{cxxflags}", _CXXFLAGS).replace("{ldflags}", _LDFLAGS)

_TOOLKIT_RECIPE = """\
# {stand_in}: conda-forge's CUDA compiler packages over the toolkit at {toolkit}.
recipe:
  name: mmstack-standin-cuda
  version: "1"
extra:
  mmstack-stand-in: "true"
outputs:
  - package:
      name: cuda-version
      version: "{cuda}"
    build:
      number: 0
      string: mmstack_standin_0
      noarch: generic
    requirements:
      run_constraints:
        - __cuda >={cuda}
    about:
      summary: "{stand_in}: cuda-version {cuda}"
      description: "{stand_in}. Constrains __cuda as conda-forge's cuda-version does."
  - package:
      name: cuda-nvcc_linux-64
      version: "{nvcc}"
    build:
      number: 0
      string: mmstack_standin_0
      script:
        content: |
          mkdir -p "$PREFIX/etc/conda/activate.d"
          cp "$RECIPE_DIR/activate.sh" "$PREFIX/etc/conda/activate.d/~cuda-nvcc_activate.sh"
    requirements:
      run:
        - cuda-nvcc-tools =={nvcc}
        - cuda-version >={cuda},<{next}
      run_exports:
        strong:
          - cuda-version >={cuda},<{next}
    about:
      summary: "{stand_in}: cuda-nvcc_linux-64 activation (conda-forge's behaviour) for nvcc {nvcc}"
      description: "{stand_in}. Activation written after conda-forge's cuda-nvcc-feedstock activate.sh."
  - package:
      name: cuda-nvcc
      version: "{nvcc}"
    build:
      number: 0
      string: mmstack_standin_0
    requirements:
      run:
        - cuda-nvcc_linux-64 =={nvcc}
        - gcc_linux-64
        - gxx_linux-64
    about:
      summary: "{stand_in}: cuda-nvcc {nvcc}"
      description: "{stand_in}. Metapackage over the stand-in cuda-nvcc_linux-64 and this machine's gcc {gcc}."
"""

_NVCC_ACTIVATE = r"""#!/bin/bash
# {stand_in}: behaves like conda-forge's cuda-nvcc activation (cuda-nvcc-feedstock
# recipe/activate.sh) for linux-64: the targets dir of the host and build prefixes on the include
# and library paths of the C/C++ compilers and of nvcc, nvcc's host compiler = $CXX.
targetsDir="{targets}"
CUDA_CFLAGS=""
CUDA_LDFLAGS=""
if [ "${{CONDA_BUILD:-0}}" = "1" ]; then
    CUDA_CFLAGS="-I${{PREFIX}}/${{targetsDir}}/include -I${{BUILD_PREFIX}}/${{targetsDir}}/include"
    CUDA_LDFLAGS="-L${{PREFIX}}/${{targetsDir}}/lib -L${{PREFIX}}/${{targetsDir}}/lib/stubs"
    CUDA_LDFLAGS="${{CUDA_LDFLAGS}} -L${{BUILD_PREFIX}}/${{targetsDir}}/lib -L${{BUILD_PREFIX}}/${{targetsDir}}/lib/stubs"
else
    CUDA_CFLAGS="-I${{CONDA_PREFIX}}/${{targetsDir}}/include"
    CUDA_LDFLAGS="-L${{CONDA_PREFIX}}/${{targetsDir}}/lib -L${{CONDA_PREFIX}}/${{targetsDir}}/lib/stubs"
fi
export CFLAGS="${{CFLAGS:-}} ${{CUDA_CFLAGS}}"
export CPPFLAGS="${{CPPFLAGS:-}} ${{CUDA_CFLAGS}}"
export CXXFLAGS="${{CXXFLAGS:-}} ${{CUDA_CFLAGS}}"
export LDFLAGS="${{LDFLAGS:-}} ${{CUDA_LDFLAGS}}"
if [ -z "${{CXX+x}}" ]; then
    echo 'cuda-nvcc: Please add the `compiler("c")` and `compiler("cxx")` packages to the environment.'
    false
else
    export NVCC_PREPEND_FLAGS="${{NVCC_PREPEND_FLAGS:-}} -ccbin=${{CXX}}"
    if [ "${{CONDA_BUILD:-0}}" = "1" ]; then
        export NVCC_APPEND_FLAGS="${{NVCC_APPEND_FLAGS:-}} -I${{PREFIX}}/${{targetsDir}}/include -L${{PREFIX}}/${{targetsDir}}/lib -L${{PREFIX}}/${{targetsDir}}/lib/stubs"
    fi
fi
"""

_TORCH_ACTIVATE = """#!/bin/bash
# {stand_in}: as conda-forge's pytorch activation, the arch list torch was built for.
if [ -z "${{CF_TORCH_CUDA_ARCH_LIST+x}}" ]; then
  export CF_TORCH_CUDA_ARCH_LIST="{arch_list}"
  export CF_TORCH_CUDA_ARCH_LIST_BACKUP="NOT_SET"
fi
"""

_TORCH_DEACTIVATE = """#!/bin/bash
# {stand_in}
if [ "${{CF_TORCH_CUDA_ARCH_LIST_BACKUP:-}}" = "NOT_SET" ]; then
  unset CF_TORCH_CUDA_ARCH_LIST CF_TORCH_CUDA_ARCH_LIST_BACKUP
fi
"""


# ---------------------------------------------------------------------------------------------
# helpers


def _dist(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(dist: metadata.Distribution, *, follow_extras: bool = True) -> list[str]:
    """Names of the requirements that apply here (markers evaluated, extras followed one level)."""
    from packaging.requirements import Requirement

    out = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        out.append(req.name)
        if req.extras and follow_extras:  # cuda-toolkit[cublas,...]: the extras' requirements count too
            sub = _dist(req.name)
            for t in (sub.requires or []) if sub else []:
                r = Requirement(t)
                if r.marker and any(r.marker.evaluate({"extra": e}) for e in req.extras):
                    out.append(r.name)
    return out


def _find_any_wheel(dest: Path, wheel: Wheel) -> Path | None:
    stem = wheel.pypi.replace("-", "_").lower()
    hits = sorted(p for p in Path(dest).glob("*.whl") if p.name.split("-")[0].lower() == stem)
    exact = [p for p in hits if p.name.split("-")[1] == wheel.version]
    return (exact or hits)[-1] if hits else None


def _tree_entries(src: Path, dest: str) -> list:
    import rattler_build

    if src.is_file():
        return [rattler_build.FileEntry.from_paths(src, dest)]
    out = []
    for path in sorted(src.rglob("*")):
        if path.is_file():
            out.append(rattler_build.FileEntry.from_paths(path, f"{dest}/{path.relative_to(src).as_posix()}"))
    return out


def _with_env_shebang(src: Path, dest: Path) -> Path:
    """A console script with its venv-absolute shebang replaced (binaries unchanged)."""
    head = src.read_bytes()[:2]
    if head != b"#!":
        return src
    lines = src.read_text(errors="surrogateescape").splitlines(keepends=True)
    if "python" in lines[0]:
        lines[0] = "#!/usr/bin/env python\n"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(lines), errors="surrogateescape")
    dest.chmod(0o755)
    return dest


def _torch_cuda_version() -> str:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.version.cuda or '')"],
                         capture_output=True, text=True, check=True).stdout.strip()
    if not out:
        raise BootstrapUnavailable("the installed torch is not a CUDA build")
    return ".".join(out.split(".")[:2])


def cf_arch_list() -> str:
    """The installed torch's arch list in TORCH_CUDA_ARCH_LIST notation ('sm_90' -> '9.0', +PTX).

    torch.cuda.get_arch_list() answers [] where no GPU is visible (it checks is_available()
    first); the flags it reads, torch._C._cuda_getArchFlags(), are compiled in and need none, so a
    CPU-only build machine assembles the same stand-in pytorch as the GPU machine.
    """
    code = ("import torch, json; a = torch.cuda.get_arch_list() or torch._C._cuda_getArchFlags().split(); "
            "print(json.dumps(a))")
    archs = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1])
    sass = sorted({a.split("_")[1] for a in archs if a.startswith("sm_")}, key=lambda x: (len(x), x))
    ptx = {a.split("_")[1] for a in archs if a.startswith("compute_")}
    fmt = [f"{c[:-1]}.{c[-1]}" + ("+PTX" if c in ptx else "") for c in sass]
    return ";".join(fmt)


def _nvcc_version(toolkit: Path) -> str:
    out = subprocess.run([str(toolkit / "bin" / "nvcc"), "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    if not m:
        raise BootstrapUnavailable(f"cannot read nvcc's version from: {out.strip()[-200:]}")
    return m.group(1)


def _base_python() -> str:
    return str(Path(getattr(sys, "_base_executable", "") or sys.executable).resolve())


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:7]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--wheels", type=Path, default=None, help="carried wheels for what is not installed")
    parser.add_argument("--json", type=Path, default=None, help="write the summary here too")
    args = parser.parse_args(argv)
    try:
        summary = build_channel(args.dest, wheel_dir=args.wheels)
    except BootstrapUnavailable as exc:
        print(f"stand-in channel unavailable: {exc}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    print(summary["channel"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
