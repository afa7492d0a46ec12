"""STAND-IN BUILDER (development and CI only): a local conda channel built from this machine's parts, for offline builds.

The end-to-end test builds the real mmcv recipe with the real rattler-build engine. conda-forge
is not reachable from every test machine, so this module assembles a stand-in channel from parts
that are:

- `python`: a CPython prefix (this interpreter's `sys.base_prefix`, or a second CPython's: see
  below), packaged by a tiny
  rattler-build recipe; rattler-build's relinker turns its absolute RUNPATH into `$ORIGIN/../lib`
  and text files get conda's prefix placeholder, so `python` runs from any installed prefix.
  It still links the system's libssl/libffi/libsqlite..., so the channel only suits machines of
  this image. Plus `python_abi`.
- PyPI wheels repacked as conda packages under conda-forge's names (`torch` -> `pytorch` with a
  conda-forge style `cpu_generic_py311_h..._0` build string, `opencv-python-headless` ->
  `py-opencv`, ...): pure wheels as `noarch: python`, binary ones as linux-64 with `python_abi`.
- stub compiler packages `gcc_linux-64`, `gxx_linux-64` whose activation scripts point CC/CXX at
  the system gcc/g++, and stub `sysroot_linux-64` 2.17 and 2.28 carrying conda-forge's `__glibc`
  run-export. They exist so `${{ compiler('c') }}` and `${{ stdlib('c') }}` resolve; they are not
  compilers.
- `pytorch` carries conda-forge's run_exports (`pytorch >=X.Y,<X.Y+1`, pin_subpackage max_pin
  x.x), so a recipe that takes pytorch in host gets its run requirement the conda-forge way.

A second CPython (`second_python()`: pyenv's 3.13 here, or MMSTACK_TEST_SECOND_PYTHON) gets a
channel of its own, `bootstrap_channel(python=...)`: the same parts for its version, the wheels
downloaded by its own pip (its binary tags). So does the noarch recipes' python_min
(`python_min_python()`: pyenv's 3.10 here, or MMSTACK_TEST_PYTHON_MIN), on which the e2e builds
mmstack, mmengine and mmdet as CI does; where a pinned wheel has no release for that Python
(Requires-Python >=3.11), `wheels_for` takes the newest one that has (OLDER_PYTHON_PINS). Its torch is the CPU wheel of /opt/wheels when one
is there; otherwise PyPI's torch wheel of the same version (`pypi_torch`), which for linux x86_64
is a CUDA build: repacked with its CUDA runtime wheels (nvidia-*, cuda-*, triton) as packages of
their own, so it imports and runs on a machine without a GPU, as the CPU wheel does. That stand-in
pytorch's build string and summary say so (`cpu_standin_pypi_cuda_...`).

Every package's summary starts with "STAND-IN", and a test result that used this channel says so.
Not here: torchvision (PyPI's x86_64 wheels are CUDA builds that do not load beside the CPU torch
wheel, and there is no sdist); builds against this channel set MMSTACK_NO_TORCHVISION=1, which
drops it from the mmcv recipe's test requirements.

Nothing here is a product default: `mmstack build` keeps using conda-forge.

The channel is cached under ~/.cache/mmstack-tests/bootstrap-<hash of the inputs> (override the
root with MMSTACK_TEST_CACHE), built in a temporary directory and renamed into place, so a crash
never leaves a half channel. `python -m mmstack_lab.standin.bootstrap` prebuilds it and prints its path.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

CACHE_ROOT = Path(os.environ.get("MMSTACK_TEST_CACHE", "~/.cache/mmstack-tests")).expanduser()
# Written by tests/test_build_e2e.py: the python of a prefix installed from the recipe-built channel.
PREFIX_POINTER = CACHE_ROOT / "mmcv-prefix-python.txt"
PY = f"{sys.version_info.major}.{sys.version_info.minor}"  # this interpreter's (Interpreter.py for another)
PY_TAG = f"{sys.version_info.major}{sys.version_info.minor}"
PY_ABI = f"python_abi {PY}.* *_cp{PY_TAG}"
PY_PIN = f"python >={PY},<{sys.version_info.major}.{sys.version_info.minor + 1}.0a0"
# The CPU torch wheel comes from a local file (download.pytorch.org may be unreachable; PyPI's
# `torch` is the CUDA build, ~900 MB). MMSTACK_TEST_TORCH_WHEEL names another one.
TORCH_WHEEL_GLOB = f"/opt/wheels/torch-*+cpu-cp{PY_TAG}-cp{PY_TAG}-*.whl"
# The second CPython the e2e builds for (issue 42): a pyenv interpreter here; another machine names one
SECOND_PYTHON_ENV = "MMSTACK_TEST_SECOND_PYTHON"
PYENV_VERSIONS = "~/.pyenv/versions"
SECOND_PYTHON_GLOB = "3.13.*/bin/python3.13"  # under PYENV_VERSIONS
# The noarch recipes' python_min (recipes/*: `python_min | default("3.10")`): the e2e builds them on it
PYTHON_MIN_ENV = "MMSTACK_TEST_PYTHON_MIN"
PYTHON_MIN = "3.10"
PYTHON_MIN_GLOB = f"{PYTHON_MIN}.*/bin/python{PYTHON_MIN}"  # under PYENV_VERSIONS
# PyPI's linux x86_64 torch is a CUDA build: what it requires from these distributions is repacked
# beside it (bootstrap_cuda.py's TORCH_CLOSURE, the same rule)
TORCH_RUNTIME_PREFIXES = ("nvidia-", "cuda-", "triton")
# conda-forge's c_stdlib_version values: 2.17 in general, 2.28 for CUDA 13.0 (conda_build_config.yaml)
SYSROOT_VERSIONS = ("2.17", "2.28")


def host_glibc() -> str:
    """This machine's glibc ("2.36"): what the stand-in compilers really link against."""
    return (os.confstr("CS_GNU_LIBC_VERSION") or "glibc 0").split()[-1]


def stand_in_glibc_floor(sysroot: str) -> str:
    """The `__glibc` floor a stand-in sysroot_linux-64 exports. conda-forge's sysroot N links
    packages against glibc N, so they run on glibc >= N; the stand-ins have no sysroot and link
    against this machine's glibc, so their packages declare that instead (issue 26: a 2.17 label on
    a binary needing GLIBC_2.32 would install where it cannot load)."""
    return max(sysroot, host_glibc(), key=lambda v: tuple(int(x) for x in v.split(".")))
# Set while building against this channel: the mmcv recipe then leaves torchvision out of its tests.
NO_TORCHVISION_ENV = "MMSTACK_NO_TORCHVISION"
SUMMARY = "STAND-IN (mmstack_lab.standin.bootstrap, not conda-forge's)"
STAMP = datetime(2026, 1, 1, tzinfo=timezone.utc)  # fixed timestamps: reproducible packages
Log = Callable[[str], None]


class BootstrapUnavailable(RuntimeError):
    """A part is missing on this machine (no CPU torch wheel, no gcc): tests skip with this reason."""


@dataclass(frozen=True)
class Wheel:
    pypi: str  # distribution name on PyPI
    version: str
    conda: str = ""  # conda-forge's name, when it differs
    depends: tuple[str, ...] = ()  # conda-forge names, as conda-forge's package declares them

    @property
    def name(self) -> str:
        return self.conda or self.pypi


@dataclass(frozen=True)
class Interpreter:
    """A CPython the channel packages: its base prefix and version."""

    prefix: Path  # sys.base_prefix
    version: tuple[int, int, int]
    executable: Path

    @property
    def py(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def tag(self) -> str:
        return f"{self.version[0]}{self.version[1]}"

    @property
    def abi(self) -> str:
        return f"python_abi {self.py}.* *_cp{self.tag}"

    @property
    def pin(self) -> str:
        return f"python >={self.py},<{self.version[0]}.{self.version[1] + 1}.0a0"

    @property
    def full_version(self) -> str:
        return ".".join(str(p) for p in self.version)

    @property
    def is_this(self) -> bool:
        return self.prefix == Path(sys.base_prefix) and self.version == tuple(sys.version_info[:3])


THIS = Interpreter(Path(sys.base_prefix), (sys.version_info[0], sys.version_info[1], sys.version_info[2]),
                   Path(sys.executable))


def interpreter(executable: Path) -> Interpreter:
    """Another CPython, as it describes itself."""
    out = subprocess.run([str(executable), "-c", "import sys; print(sys.base_prefix); print(*sys.version_info[:3])"],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    major, minor, micro = (int(p) for p in out[1].split())
    return Interpreter(Path(out[0]), (major, minor, micro), Path(executable))


def second_python() -> Interpreter:
    """The second CPython of the e2e: $MMSTACK_TEST_SECOND_PYTHON, else pyenv's 3.13."""
    return _other_python(SECOND_PYTHON_ENV, SECOND_PYTHON_GLOB, "second CPython")


def python_min_python() -> Interpreter:
    """The noarch recipes' oldest Python (PYTHON_MIN): $MMSTACK_TEST_PYTHON_MIN, else pyenv's 3.10."""
    py = _other_python(PYTHON_MIN_ENV, PYTHON_MIN_GLOB, f"CPython {PYTHON_MIN} (the noarch recipes' python_min)")
    if py.py != PYTHON_MIN:
        raise BootstrapUnavailable(f"{py.executable} is Python {py.py}, not python_min {PYTHON_MIN}; "
                                   f"set {PYTHON_MIN_ENV} to a CPython {PYTHON_MIN}")
    return py


def _other_python(env: str, glob: str, what: str) -> Interpreter:
    explicit = os.environ.get(env)
    found = [Path(explicit)] if explicit else sorted(Path(PYENV_VERSIONS).expanduser().glob(glob))
    if not found or not found[-1].is_file():
        raise BootstrapUnavailable(f"no {what} ({PYENV_VERSIONS}/{glob}); set {env} to one")
    py = interpreter(found[-1])
    if py.is_this:
        raise BootstrapUnavailable(f"{found[-1]} is the interpreter running the tests, not a second one")
    return py


# What mmcv's build, `import mmcv.ops`, and the mmstack package (typer, pydantic, pyelftools) need.
# Versions are pinned so the cache key is stable; they are the ones the dev venv was tested with.
WHEELS: tuple[Wheel, ...] = (
    # build tools
    Wheel("pip", "26.3"),
    Wheel("setuptools", "84.2.1"),
    Wheel("wheel", "0.48.0", depends=("packaging >=24.0",)),
    Wheel("ninja", "1.13.0"),  # conda-forge's ninja is the binary; the wheel carries it in .data/scripts
    # pytorch's dependencies (torch 2.13 METADATA)
    Wheel("filelock", "4.3.1"),
    Wheel("fsspec", "2026.9.0"),
    Wheel("jinja2", "3.1.6", depends=("markupsafe >=2.0",)),
    Wheel("markupsafe", "3.0.4"),
    Wheel("networkx", "3.6.1"),
    Wheel("sympy", "1.14.0", depends=("mpmath >=1.1.0,<1.4",)),
    Wheel("mpmath", "1.3.0"),
    Wheel("typing-extensions", "4.16.0", conda="typing_extensions"),
    # mmcv's run requirements (requirements/runtime.txt) and theirs
    Wheel("addict", "2.4.0"),
    # conda-forge builds mmengine with MMENGINE_LITE=1: the distribution is mmengine-lite (what pip
    # check sees), the conda package mmengine, no matplotlib/opencv requirement.
    Wheel("mmengine-lite", "0.10.7", conda="mmengine",
          depends=("addict", "numpy", "packaging", "pyyaml", "rich", "termcolor", "yapf")),
    Wheel("regex", "2026.11.19"),  # in conda-forge's mmengine run requirements (recipes/mmengine)
    Wheel("numpy", "2.4.6"),
    Wheel("opencv-python-headless", "5.1.0.95", conda="py-opencv", depends=("numpy >=2",)),
    Wheel("packaging", "26.4"),
    Wheel("pillow", "13.0.0"),
    Wheel("pyyaml", "6.0.4"),
    Wheel("yapf", "0.43.0", depends=("platformdirs >=3.5.1",)),
    Wheel("platformdirs", "4.14.9"),
    Wheel("termcolor", "3.3.0"),
    Wheel("rich", "15.0.0", depends=("markdown-it-py >=2.2.0", "pygments >=2.13.0,<3.0.0")),
    Wheel("markdown-it-py", "4.3.0", depends=("mdurl >=0.1,<1",)),
    Wheel("mdurl", "0.1.2"),
    Wheel("pygments", "2.21.0"),
    # the mmstack package (pyproject.toml dependencies)
    Wheel("typer", "0.29.2",
          depends=("pydantic >=2.5.3", "shellingham >=1.3.0", "rich >=13.8.0", "annotated-doc >=0.0.2")),
    Wheel("shellingham", "1.5.4"),
    Wheel("annotated-doc", "0.0.7"),
    Wheel("click", "8.5.1"),
    Wheel("pydantic", "2.14.4",
          depends=("annotated-types >=0.6.0", "pydantic-core ==2.50.5", "typing_extensions >=4.16.0",
                   "typing-inspection >=0.4.4")),
    Wheel("pydantic-core", "2.50.5", depends=("typing_extensions >=4.14.1",)),
    Wheel("annotated-types", "0.8.0"),
    Wheel("typing-inspection", "0.4.5", depends=("typing_extensions >=4.12.0",)),
    Wheel("pyelftools", "0.33"),
    # pyproject's `tomli>=2; python_version < '3.11'`, which recipes/mmstack requires on every Python
    Wheel("tomli", "2.5.0"),
    # the mmcv recipe's test section runs upstream's tests/test_ops with pytest
    Wheel("pytest", "9.2.0", depends=("iniconfig >=1.0.1", "packaging >=22", "pluggy >=1.5,<2", "pygments >=2.7.2")),
    Wheel("iniconfig", "2.3.1"),
    Wheel("pluggy", "1.7.0"),
    # recipes/mmengine runs upstream's tests/test_hooks/test_checkpoint_hook.py, which imports it
    Wheel("parameterized", "0.9.0"),
    # mmdet's run requirements (recipes/mmdet: requirements/runtime.txt under conda-forge's names)
    Wheel("matplotlib", "3.11.2", conda="matplotlib-base",
          depends=("contourpy >=1.0.1", "cycler >=0.10", "fonttools >=4.28.2", "kiwisolver >=1.3.1", "numpy >=1.25",
                   "packaging >=20.0", "pillow >=9", "pyparsing >=3", "python-dateutil >=2.7")),
    Wheel("contourpy", "1.3.3", depends=("numpy >=1.25",)),
    Wheel("cycler", "0.12.1"),
    Wheel("fonttools", "4.68.0"),
    Wheel("kiwisolver", "1.5.1"),
    Wheel("pyparsing", "3.3.3"),
    Wheel("python-dateutil", "2.9.0.post0", depends=("six >=1.5",)),
    Wheel("six", "1.17.0"),
    Wheel("pycocotools", "2.0.11", depends=("numpy",)),
    Wheel("scipy", "1.17.1", depends=("numpy >=1.26.4,<2.7",)),
    Wheel("shapely", "2.2.0", depends=("numpy >=1.26",)),
    Wheel("terminaltables", "3.1.10"),
    Wheel("tqdm", "4.70.1"),
)
# What an older CPython takes in place of WHEELS' entry of the same name, or beside them:
# - the newest release that still installs there, for each pin of WHEELS whose release requires a
#   newer Python (its Requires-Python, or no wheel for the tag). Found with that CPython's pip: `pip
#   download --no-deps --only-binary=:all: NAME==VERSION` fails on WHEELS' pin; `pip index versions
#   --only-binary=:all: NAME`, then the download, gives the newest that installs. The depends are
#   each release's own Requires-Dist under conda-forge's names;
# - the same release with the requirements its markers add there (`; python_version < "3.11"`), and
#   the distributions only those pull in (exceptiongroup). Without them yapf fails to import on
#   3.10 (`import tomli as tomllib` in yapflib/style.py: seen, mmengine's test in the e2e).
OLDER_PYTHON_PINS: dict[str, tuple[Wheel, ...]] = {
    "3.10": (
        Wheel("numpy", "2.2.6"),  # 2.3.0 on: Requires-Python >=3.11
        Wheel("scipy", "1.15.3", depends=("numpy >=1.23.5,<2.5",)),  # 1.16.0 on: >=3.11
        Wheel("matplotlib", "3.10.9", conda="matplotlib-base",  # 3.11.0 on: >=3.11
              depends=("contourpy >=1.0.1", "cycler >=0.10", "fonttools >=4.22.0", "kiwisolver >=1.3.1", "numpy >=1.23",
                       "packaging >=20.0", "pillow >=8", "pyparsing >=3", "python-dateutil >=2.7")),
        Wheel("contourpy", "1.3.2", depends=("numpy >=1.23",)),  # 1.3.3 on: >=3.11
        Wheel("fonttools", "4.65.0"),  # 4.66 on: >=3.11
        Wheel("pillow", "12.3.0"),  # 13.0.0 on: >=3.11
        Wheel("shapely", "2.1.2", depends=("numpy >=1.21",)),  # 2.2.0 on: >=3.11
        Wheel("networkx", "3.4.2"),  # 3.5 on: >=3.11 (torch's own resolve for cp310 takes 3.4.2 too)
        Wheel("filelock", "4.1.0"),  # 4.1.1 on: >=3.11
        Wheel("platformdirs", "4.12.4"),  # 4.13 on: >=3.11
        Wheel("regex", "2026.9.29"),  # the releases after it: >=3.11
        Wheel("typer", "0.29.1",  # 0.29.2: >=3.11
              depends=("pydantic >=2.5.3", "shellingham >=1.3.0", "rich >=13.8.0", "annotated-doc >=0.0.2")),
        Wheel("annotated-doc", "0.0.6"),  # 0.0.7: >=3.11
        # the same releases as WHEELS', with their `python_version < "3.11"` requirements
        Wheel("yapf", "0.43.0", depends=("platformdirs >=3.5.1", "tomli >=2.0.1")),
        Wheel("pytest", "9.2.0", depends=("iniconfig >=1.0.1", "packaging >=22", "pluggy >=1.5,<2", "pygments >=2.7.2",
                                          "exceptiongroup >=1", "tomli >=2")),
        Wheel("exceptiongroup", "1.3.2", depends=("typing_extensions >=4.6.0",)),  # pytest's, on 3.10 only
    ),
}


def wheels_for(python: Interpreter = THIS) -> tuple[Wheel, ...]:
    """WHEELS, with OLDER_PYTHON_PINS' entry in place of each of the same name for `python`, and
    its others after them."""
    older = {w.pypi: w for w in OLDER_PYTHON_PINS.get(python.py, ())}
    same = tuple(older.get(w.pypi, w) for w in WHEELS)
    return same + tuple(w for w in older.values() if w.pypi not in {x.pypi for x in WHEELS})


TORCH = Wheel("torch", "", conda="pytorch",
              depends=("filelock", "fsspec >=0.8.5", "jinja2", "networkx >=2.5.1", "setuptools >=77.0.3",
                       "sympy >=1.13.3", "typing_extensions >=4.10.0"))


# ---------------------------------------------------------------------------------------------
# entry point


def bootstrap_channel(*, python: Interpreter = THIS, cache_root: Path = CACHE_ROOT, log: Log = print) -> Path:
    """Return the path of a ready bootstrap channel for `python`, building it first if the cache lacks it."""
    wheel_dir = cache_root / ("wheels" if python.is_this else f"wheels-cp{python.tag}")
    runtime: list[Path] = []
    try:
        torch_wheel = find_torch_wheel(python)
    except BootstrapUnavailable:
        if python.is_this:
            raise
        torch_wheel, runtime = pypi_torch(python, wheel_dir / "torch", log=log)
    gcc, gxx = _compilers()
    key = _cache_key(torch_wheel, gcc, python)
    target = cache_root / f"bootstrap-{key}"
    if (target / "linux-64" / "repodata.json").is_file():
        return target
    cache_root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f".tmp-bootstrap-{key}-", dir=cache_root))
    try:
        channel = work / "channel"
        for sub in ("linux-64", "noarch"):
            (channel / sub).mkdir(parents=True)
        wheels = download_wheels(wheel_dir, python=python, log=log)
        build_python(channel, work / "recipes", python=python, log=log)
        build_stubs(channel, work / "recipes", gcc=gcc, gxx=gxx, log=log)
        for wheel in wheels_for(python):
            repack_wheel(wheels[wheel.pypi], wheel, channel, work / "stage", python=python, log=log)
        extra = []
        for whl in runtime:  # PyPI's CUDA torch: its runtime wheels, each a package of its own
            dist = Wheel(_dist_name(whl), whl.name.split("-")[1])
            repack_wheel(whl, dist, channel, work / "stage", python=python, log=log)
            extra.append(f"{dist.name} =={dist.version}")
        torch = Wheel(TORCH.pypi, _wheel_version(torch_wheel), TORCH.conda, (*TORCH.depends, *extra))
        major, minor = torch.version.split(".")[:2]
        kind = "cpu_generic" if not runtime else "cpu_standin_pypi_cuda"  # the recipe's CPU rows take pytorch * cpu*
        pkg = repack_wheel(torch_wheel, torch, channel, work / "stage", python=python, log=log,
                           build_string=f"{kind}_py{python.tag}_h{_short_hash(torch_wheel.name)}_0",
                           note="" if not runtime else " (PyPI's linux x86_64 torch is a CUDA build; its CUDA "
                           "runtime wheels are repacked beside it, so it runs on a CPU-only machine)")
        # pytorch-cpu-feedstock: run_exports: pin_subpackage('pytorch', max_pin='x.x')
        add_run_exports(pkg, {"weak": [f"pytorch >={major}.{minor}.0,<{major}.{int(minor) + 1}.0a0"]})
        index(channel)
        try:
            channel.rename(target)
        except OSError:  # another process finished first: theirs is as good as ours
            if not (target / "linux-64" / "repodata.json").is_file():
                raise
        log(f"bootstrap channel ready in {time.monotonic() - started:.0f}s: {target}")
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


def find_torch_wheel(python: Interpreter = THIS) -> Path:
    explicit = os.environ.get("MMSTACK_TEST_TORCH_WHEEL") if python.is_this else None
    if not python.is_this:
        found = sorted(Path("/opt/wheels").glob(f"torch-*+cpu-cp{python.tag}-cp{python.tag}-*.whl"))
        if not found:
            raise BootstrapUnavailable(f"no CPU torch wheel for cp{python.tag} in /opt/wheels")
        return found[-1]
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise BootstrapUnavailable(f"MMSTACK_TEST_TORCH_WHEEL={explicit} does not exist")
        return path
    found = sorted(Path("/").glob(TORCH_WHEEL_GLOB.lstrip("/")))
    if not found:
        raise BootstrapUnavailable(
            f"no CPU torch wheel at {TORCH_WHEEL_GLOB}; set MMSTACK_TEST_TORCH_WHEEL to one")
    return found[-1]


def pypi_torch(python: Interpreter, dest: Path, *, log: Log = print) -> tuple[Path, list[Path]]:
    """PyPI's torch wheel of the CPU wheel's version for `python`, and the runtime wheels it requires
    (TORCH_RUNTIME_PREFIXES), downloaded by that interpreter's pip into `dest`."""
    version = _wheel_version(find_torch_wheel())
    dest.mkdir(parents=True, exist_ok=True)
    wheel = _torch_in(dest, version, python)
    if wheel is None:
        log(f"downloading PyPI's torch {version} for cp{python.tag} and its runtime wheels into {dest}")
        subprocess.run([str(python.executable), "-m", "pip", "download", "--only-binary=:all:",
                        "--disable-pip-version-check", "-q", "-d", str(dest), f"torch=={version}"], check=True)
        wheel = _torch_in(dest, version, python)
        if wheel is None:
            raise BootstrapUnavailable(f"pip did not download torch {version} for cp{python.tag}")
    runtime = sorted(w for w in dest.glob("*.whl") if _dist_name(w).startswith(TORCH_RUNTIME_PREFIXES))
    return wheel, runtime


def _torch_in(dest: Path, version: str, python: Interpreter) -> Path | None:
    found = sorted(dest.glob(f"torch-{version}-cp{python.tag}-cp{python.tag}-*x86_64.whl"))
    return found[-1] if found else None


def _dist_name(whl: Path) -> str:
    """A wheel's distribution name as PyPI and conda-forge spell it (nvidia_cublas -> nvidia-cublas)."""
    return whl.name.split("-")[0].lower().replace("_", "-")


def index(channel: Path) -> None:
    from rattler.index import index_fs

    for pkg in channel.glob("*/*.conda"):
        pkg.chmod(0o644)  # assemble_package and rattler-build write 0600

    asyncio.run(index_fs(channel, write_zst=False, write_shards=False, force=True))


# ---------------------------------------------------------------------------------------------
# parts


def download_wheels(dest: Path, *, python: Interpreter = THIS, log: Log = print) -> dict[str, Path]:
    """pip-download every pinned wheel (no deps: the pins are the closure) into a shared cache, with
    `python`'s own pip (its binary tags)."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = wheels_for(python)
    missing = [w for w in wanted if _find_wheel(dest, w) is None]
    if missing:
        log(f"downloading {len(missing)} wheels from PyPI into {dest}")
        cmd = [str(python.executable), "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
               "--disable-pip-version-check", "-q", "-d", str(dest)]
        cmd += [f"{w.pypi}=={w.version}" for w in missing]
        subprocess.run(cmd, check=True)
    found = {w.pypi: _find_wheel(dest, w) for w in wanted}
    lost = [name for name, path in found.items() if path is None]
    if lost:
        raise BootstrapUnavailable(f"pip did not produce wheels for {', '.join(lost)}")
    return found  # type: ignore[return-value]


def repack_wheel(whl: Path, wheel: Wheel, channel: Path, stage_root: Path, *, python: Interpreter = THIS,
                 log: Log = print, build_string: str | None = None, note: str = "") -> Path:
    """A wheel as a conda package: pure wheels noarch: python, binary ones linux-64 + python_abi."""
    import rattler_build

    pure = whl.name.endswith("-none-any.whl")
    stage = stage_root / whl.stem
    shutil.rmtree(stage, ignore_errors=True)
    site = stage / ("site-packages" if pure else f"lib/python{python.py}/site-packages")
    _unzip(whl, site)
    _spread_data_dir(site, stage, pure=pure)
    for dist_info in site.glob("*.dist-info"):
        (dist_info / "INSTALLER").write_text("conda\n")  # pip then leaves it alone
    digest = _short_hash(whl.name)
    # conda-forge's noarch python packages list their console scripts in info/link.json and conda
    # (or rattler) writes bin/<name> at install; pip made them from the wheel, assemble_package cannot
    scripts = console_scripts(site) if pure else []
    if pure:
        depends = [f"python >={python.py}", *wheel.depends]
        build_string = build_string or f"pyh{digest}_0"
        subdir = "noarch"
    else:
        depends = [python.pin, python.abi, *wheel.depends]
        build_string = build_string or f"py{python.tag}h{digest}_0"
        subdir = "linux-64"
    started = time.monotonic()
    out = rattler_build.assemble_package(
        name=wheel.name, version=wheel.version, target_platform=subdir, build_string=build_string,
        output_dir=channel / subdir, files_dir=stage, depends=depends,
        noarch="python" if pure else None, summary=f"{SUMMARY}: PyPI wheel {whl.name} repacked{note}",
        compression_level=1, timestamp=STAMP,
    )
    shutil.rmtree(stage, ignore_errors=True)
    if scripts:
        add_info_json(Path(out.path), "link.json",
                      {"noarch": {"type": "python", "entry_points": scripts}, "package_metadata_version": 1})
    if time.monotonic() - started > 5:
        log(f"repacked {whl.name} in {time.monotonic() - started:.0f}s")
    return out.path


def build_python(channel: Path, recipes: Path, *, python: Interpreter = THIS, log: Log = print) -> None:
    """A CPython prefix as `python` + `python_abi` (rattler-build makes it relocatable)."""
    import rattler_build

    src, version, py, py_tag = python.prefix, python.full_version, python.py, python.tag
    if not (src / "bin" / f"python{py}").is_file():
        raise BootstrapUnavailable(f"{src} has no bin/python{py} to package")
    recipe_dir = recipes / "python"
    recipe_dir.mkdir(parents=True)
    (recipe_dir / "build.sh").write_text(_PYTHON_BUILD_SH)
    (recipe_dir / "recipe.yaml").write_text(_PYTHON_RECIPE.format(
        version=version, py=py, py_tag=py_tag, src=src,
        hash=_short_hash(f"{src}:{sys.version if python.is_this else version}")))
    started = time.monotonic()
    _build_recipe(recipe_dir, channel, log=log)
    log(f"packaged python {version} from {src} in {time.monotonic() - started:.0f}s")
    empty = recipes / "empty"
    empty.mkdir()
    rattler_build.assemble_package(
        name="python_abi", version=py, target_platform="linux-64", build_string=f"8_cp{py_tag}",
        output_dir=channel / "linux-64", files_dir=empty, constrains=[f"python {py}.* *_cpython"],
        summary=f"{SUMMARY}: python_abi", timestamp=STAMP,
    )


def build_stubs(channel: Path, recipes: Path, *, gcc: str, gxx: str, log: Log = print) -> None:
    """`gcc_linux-64`, `gxx_linux-64` (activation -> system gcc/g++) and `sysroot_linux-64`."""
    version = system_gcc_version()
    recipe_dir = recipes / "stubs"
    recipe_dir.mkdir(parents=True)
    sysroots = "".join(_SYSROOT_OUTPUT.format(sysroot=v, floor=stand_in_glibc_floor(v)) for v in SYSROOT_VERSIONS)
    (recipe_dir / "recipe.yaml").write_text(_STUBS_RECIPE.format(gcc=gcc, gxx=gxx, gcc_version=version) + sysroots)
    _build_recipe(recipe_dir, channel, log=log)


def add_run_exports(pkg: Path, run_exports: dict) -> None:
    """Add info/run_exports.json to a .conda (assemble_package cannot): what rattler-build reads
    from a host dependency to extend the run requirements of the package it builds."""
    add_info_json(pkg, "run_exports.json", run_exports)


def console_scripts(site: Path) -> list[str]:
    """A wheel's [console_scripts] as conda's link.json lists them ("name = module:func")."""
    import configparser

    scripts: list[str] = []
    for ep in sorted(site.glob("*.dist-info/entry_points.txt")):
        cfg = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        cfg.optionxform = str  # type: ignore[assignment,method-assign]
        cfg.read_string(ep.read_text())
        if cfg.has_section("console_scripts"):
            scripts += [f"{k.strip()} = {v.strip()}" for k, v in cfg.items("console_scripts")]
    return scripts


def add_info_json(pkg: Path, name: str, doc: dict) -> None:
    """Add info/<name> (a JSON document) to a .conda's info archive."""
    import io
    import tarfile

    import zstandard

    tmp = pkg.with_suffix(".tmp")
    with zipfile.ZipFile(pkg) as src, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.startswith("info-") and item.filename.endswith(".tar.zst"):
                raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
                out = io.BytesIO()
                with tarfile.open(fileobj=io.BytesIO(raw)) as tin, tarfile.open(fileobj=out, mode="w") as tout:
                    for member in tin.getmembers():
                        tout.addfile(member, tin.extractfile(member) if member.isfile() else None)
                    body = json.dumps(doc).encode()
                    info = tarfile.TarInfo(f"info/{name}")
                    info.size, info.mtime, info.mode = len(body), int(STAMP.timestamp()), 0o644
                    tout.addfile(info, io.BytesIO(body))
                data = zstandard.ZstdCompressor(level=3).compress(out.getvalue())
            dst.writestr(item, data)
    tmp.replace(pkg)


def _build_recipe(recipe_dir: Path, channel: Path, *, log: Log) -> None:
    import rattler_build

    recipe = rattler_build.Stage0Recipe.from_file(recipe_dir / "recipe.yaml")
    out = recipe_dir / "output"
    for variant in recipe.render(rattler_build.VariantConfig()):
        result = variant.run_build(
            tool_config=rattler_build.ToolConfiguration(test_strategy="skip"),
            output_dir=out, channels=[channel.as_uri()], no_include_recipe=True,
        )
        for pkg in result.packages:
            pkg = Path(pkg)
            shutil.move(pkg, channel / pkg.parent.name / pkg.name)


# ---------------------------------------------------------------------------------------------
# recipes (rattler-build format) for the parts that need a build step


_PYTHON_RECIPE = """\
# STAND-IN: this machine's CPython, packaged for offline rattler-build tests.
package:
  name: python
  version: "{version}"
build:
  number: 0
  string: h{hash}_0_cpython
  script:
    file: build.sh
    env:
      SRC_PREFIX: "{src}"
      PY_VER: "{py}"
  # no byte-compilation pass over a whole stdlib; python writes .pyc on first import
  python:
    skip_pyc_compilation:
      - "**/*.py"
requirements:
  run_exports:
    weak:
      - python_abi {py}.* *_cp{py_tag}
about:
  summary: "STAND-IN (mmstack_lab.standin.bootstrap): CPython {version} from {src}"
  license: Python-2.0
"""

_PYTHON_BUILD_SH = r"""#!/usr/bin/env bash
# STAND-IN. Copy a CPython prefix without its site-packages and test suites, strip debug
# info, and rewrite the old prefix in text files to $PREFIX: rattler-build then records those as
# prefix-placeholder files and its relinker rewrites the ELF RUNPATH to $ORIGIN-relative.
set -euo pipefail
cd "$SRC_PREFIX"
tar -cf - \
  --exclude="lib/python$PY_VER/site-packages/*" \
  --exclude="lib/python$PY_VER/test" \
  --exclude="lib/python$PY_VER/*/test" \
  --exclude="lib/python$PY_VER/*/tests" \
  --exclude="lib/python$PY_VER/idlelib/idle_test" \
  --exclude="__pycache__" \
  --exclude="lib/python$PY_VER/config-$PY_VER-*/*.a" \
  --exclude="lib/python$PY_VER/config-$PY_VER-*/python.o" \
  "bin/python$PY_VER" bin/python3 bin/python "bin/python$PY_VER-config" bin/python3-config \
  include lib/libpython* lib/pkgconfig "lib/python$PY_VER" \
  | tar -C "$PREFIX" -xf -
touch "$PREFIX/lib/python$PY_VER/site-packages/README.txt"
find "$PREFIX" -type f \( -name '*.so*' -o -path "$PREFIX/bin/python$PY_VER" \) -print0 \
  | xargs -0 strip --strip-debug
grep -rlIF --null "$SRC_PREFIX" "$PREFIX" | xargs -0 -r sed -i "s|$SRC_PREFIX|$PREFIX|g"
"$PREFIX/bin/python$PY_VER" -c "import sys, ssl, sqlite3, ctypes, zlib, lzma, bz2; print(sys.prefix)"
"""

# conda-forge's compiler runtimes, as packages of this machine's own libraries (the system gcc's
# libgcc_s, libgomp and libstdc++): what the stub compilers' run_exports name, so a built package
# declares every library its binaries need (issue 26) and its environment loads them from the prefix.
RUNTIME_OUTPUTS = """\
  - package:
      name: libgcc
      version: "{gcc_version}"
    build:
      number: 0
      string: mmstack_standin_0
      # system libraries without a RUNPATH: nothing to relocate (and no patchelf offline)
      dynamic_linking:
        binary_relocation: false
      script:
        content: |
          mkdir -p "$PREFIX/lib"
          for so in libgcc_s.so.1 libgomp.so.1; do cp -L "$({gcc} -print-file-name=$so)" "$PREFIX/lib/$so"; done
    about:
      summary: "{stand_in}: libgcc_s.so.1 and libgomp.so.1 of this machine's gcc {gcc_version}"
  - package:
      name: libstdcxx
      version: "{gcc_version}"
    build:
      number: 0
      string: mmstack_standin_0
      # system libraries without a RUNPATH: nothing to relocate (and no patchelf offline)
      dynamic_linking:
        binary_relocation: false
      script:
        content: |
          mkdir -p "$PREFIX/lib"
          cp -L "$({gxx} -print-file-name=libstdc++.so.6)" "$PREFIX/lib/libstdc++.so.6"
    requirements:
      run:
        - libgcc =={gcc_version}
    about:
      summary: "{stand_in}: libstdc++.so.6 of this machine's g++ {gcc_version}"
"""

_STUBS_RECIPE = """\
# STAND-IN: stand-ins for conda-forge's compiler and sysroot packages, so a recipe's
# compiler('c'), compiler('cxx') and stdlib('c') resolve offline. They install no compiler: the
# activation scripts point CC/CXX at this machine's gcc/g++.
recipe:
  name: mmstack-test-stubs
  version: "1"
outputs:
  - package:
      name: gcc_linux-64
      version: "{gcc_version}"
    build:
      number: 0
      string: mmstack_test_stub_0
      script:
        content: |
          mkdir -p "$PREFIX/etc/conda/activate.d"
          cat > "$PREFIX/etc/conda/activate.d/activate-gcc_linux-64.sh" <<'EOF'
          # STAND-IN (mmstack_lab.standin.bootstrap): the system C compiler.
          export CC="{gcc}"
          export CC_FOR_BUILD="{gcc}"
          EOF
    requirements:
      run_exports:
        strong:
          # conda-forge's gcc exports its runtime (libgcc_s, libgomp) the same way
          - libgcc >={gcc_version}
    about:
      summary: "STAND-IN (mmstack_lab.standin.bootstrap): activation pointing CC at {gcc}"
  - package:
      name: gxx_linux-64
      version: "{gcc_version}"
    build:
      number: 0
      string: mmstack_test_stub_0
      script:
        content: |
          mkdir -p "$PREFIX/etc/conda/activate.d"
          cat > "$PREFIX/etc/conda/activate.d/activate-gxx_linux-64.sh" <<'EOF'
          # STAND-IN (mmstack_lab.standin.bootstrap): the system C++ compiler.
          export CXX="{gxx}"
          export CXX_FOR_BUILD="{gxx}"
          EOF
    requirements:
      run:
        - gcc_linux-64 =={gcc_version}
      run_exports:
        strong:
          # conda-forge's gxx exports libstdcxx the same way
          - libstdcxx >={gcc_version}
    about:
      summary: "STAND-IN (mmstack_lab.standin.bootstrap): activation pointing CXX at {gxx}"
""" + RUNTIME_OUTPUTS.replace("{stand_in}", "STAND-IN (mmstack_lab.standin.bootstrap)")

_SYSROOT_OUTPUT = """\
  - package:
      name: sysroot_linux-64
      version: "{sysroot}"
    build:
      number: 0
      string: mmstack_test_stub_0
      noarch: generic
      script:
        content: |
          mkdir -p "$PREFIX/share/mmstack-test-stubs"
          echo "STAND-IN (mmstack tests): no sysroot; the system glibc {floor} is used" \\
            > "$PREFIX/share/mmstack-test-stubs/sysroot_linux-64.txt"
    requirements:
      run_exports:
        strong:
          # not conda-forge's {sysroot}: the packages link against this machine's glibc
          - __glibc >={floor},<3.0.a0
    about:
      summary: "STAND-IN (mmstack_lab.standin.bootstrap): sysroot_linux-64 {sysroot} label, links against glibc {floor}"
"""


# ---------------------------------------------------------------------------------------------
# helpers


def system_gcc_version() -> str:
    """The version the stub gcc_linux-64/gxx_linux-64 packages carry (this machine's gcc)."""
    gcc, _ = _compilers()
    return subprocess.run([gcc, "-dumpfullversion"], check=True, capture_output=True, text=True).stdout.strip()


def _compilers() -> tuple[str, str]:
    gcc, gxx = shutil.which("gcc"), shutil.which("g++")
    if not gcc or not gxx:
        raise BootstrapUnavailable("gcc/g++ not on PATH: the stub compiler packages point at them")
    return gcc, gxx


def _cache_key(torch_wheel: Path, gcc: str, python: Interpreter = THIS) -> str:
    import rattler_build

    st = torch_wheel.stat()
    parts = {
        "bootstrap.py": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "wheels": [(w.pypi, w.version, w.name, w.depends) for w in wheels_for(python)],
        "torch": [torch_wheel.name, st.st_size],
        "python": [sys.base_prefix, sys.version] if python.is_this else [str(python.prefix), python.full_version],
        "gcc": gcc,
        "glibc": host_glibc(),
        "rattler_build": rattler_build.rattler_build_version(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:7]


def _wheel_version(whl: Path) -> str:
    # torch-2.13.0+cpu-cp311-... -> 2.13.0 (conda versions carry no local label)
    return whl.name.split("-")[1].split("+")[0]


def _find_wheel(dest: Path, wheel: Wheel) -> Path | None:
    stem = wheel.pypi.replace("-", "_").lower()
    for path in dest.glob("*.whl"):
        name, version = path.name.split("-")[:2]
        if name.lower() == stem and version == wheel.version:
            return path
    return None


def _unzip(whl: Path, dest: Path) -> None:
    """zipfile drops permission bits; wheels carry executables (torch_shm_manager, ninja)."""
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            path = Path(zf.extract(info, dest))
            mode = info.external_attr >> 16
            if mode and not info.is_dir():
                path.chmod(stat.S_IMODE(mode) | stat.S_IRUSR | stat.S_IWUSR)


def _spread_data_dir(site: Path, stage: Path, *, pure: bool) -> None:
    """A wheel's `<dist>.data/` scheme dirs go where an installer puts them."""
    for data in site.glob("*.data"):
        for scheme in data.iterdir():
            if scheme.name in ("purelib", "platlib"):
                dest = site
            elif scheme.name == "scripts":
                dest = stage / ("python-scripts" if pure else "bin")
            elif scheme.name == "data":
                dest = stage
            else:  # headers: nothing here needs them
                continue
            shutil.copytree(scheme, dest, dirs_exist_ok=True)
        shutil.rmtree(data)


def main() -> int:
    try:
        print(bootstrap_channel())
    except BootstrapUnavailable as exc:
        print(f"bootstrap unavailable: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
