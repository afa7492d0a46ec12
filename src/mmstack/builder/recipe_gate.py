"""What `mmstack check` reads inside a rendered recipe, beyond "it renders": what a reviewer checks.

- Every patch a source names exists beside the recipe, and, when a copy of that source archive is
  on this machine (sha256 checked), the patches apply to it in order with GNU `patch -p1
  --fuzz=0` (the way recipes/mmcv/patches/README.md applies them), on an extracted copy in a
  temporary directory. Without a local copy, or without `patch`, the detail says the patches were
  not applied, and why: the gate never claims what it did not check.
- mmcv's run requirements and test section exist and name what conda-build's render of meta.yaml
  (tests/data/conda_build_render/render.json) names for the same build: the same run requirement
  names, the same imports, pip check, the `_ext` file check, and every mmstack command it runs.

Local source copies are looked for in the folders of MMSTACK_SOURCE_DIRS (os.pathsep-separated),
under the archive's file name (the URL's last part).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mmstack.errors import CheckFailed

SOURCE_DIRS_ENV = "MMSTACK_SOURCE_DIRS"
_HASH = re.compile(r"_h[0-9a-f]{7}_")


def local_source(url: str, sha256: str | None, *, dirs: Iterable[Path] | None = None) -> Path | None:
    """A file on this machine that is byte for byte the archive `url` names (its sha256), or None."""
    if dirs is None:
        dirs = [Path(p) for p in os.environ.get(SOURCE_DIRS_ENV, "").split(os.pathsep) if p]
    name = url.rstrip("/").rsplit("/", 1)[-1]
    for folder in dirs:
        path = Path(folder).expanduser() / name
        if path.is_file() and (sha256 is None or sha256_file(path) == sha256):
            return path
    return None


def check_patches(recipe_dir: Path, sources: list[Mapping[str, Any]]) -> str:
    """Every patch exists; applied to a local copy of its source when there is one. Raises CheckFailed."""
    recipe_file = recipe_dir / "recipe.yaml"
    notes = []
    for source in sources:
        patches = [str(p) for p in source.get("patches") or []]
        if not patches:
            continue
        missing = [p for p in patches if not (recipe_dir / p).is_file()]
        if missing:
            raise CheckFailed(f"patch {missing[0]} does not exist (source {source.get('url', source.get('path'))})",
                              source=f"{recipe_file}: source.patches",
                              fix=f"add the file under {recipe_dir} or remove the entry")
        url = str(source.get("url") or "")
        archive = local_source(url, source.get("sha256")) if url else None
        if archive is None:
            notes.append(f"{len(patches)} patches exist (not applied: no local copy of {url.rsplit('/', 1)[-1] or 'the source'}; "
                         f"set {SOURCE_DIRS_ENV} to a folder holding it)")
            continue
        if shutil.which("patch") is None:
            notes.append(f"{len(patches)} patches exist (not applied: no `patch` program on PATH)")
            continue
        _apply_all(archive, [(recipe_dir / p).resolve() for p in patches], recipe_file)
        notes.append(f"{len(patches)} patches apply to {archive.name}")
    return "; ".join(notes)


def _apply_all(archive: Path, patches: list[Path], recipe_file: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="mmstack-patch-") as tmp:
        tree = Path(tmp) / "src"
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        tops = list(tree.iterdir())
        if len(tops) == 1 and tops[0].is_dir():  # rattler-build strips the one top-level folder too
            tree = tops[0]
        for patch in patches:
            proc = subprocess.run(["patch", "-p1", "--batch", "--forward", "--fuzz=0", "-i", str(patch)],
                                  cwd=tree, capture_output=True, text=True, timeout=120)
            if proc.returncode != 0:
                said = " ".join((proc.stdout + proc.stderr).split())[:300]
                raise CheckFailed(f"patch {patch.name} does not apply to {archive.name} (after the ones before it): {said}",
                                  source=f"{recipe_file}: source.patches",
                                  fix=f"regenerate {patch.name} against the pristine source (recipes/mmcv/patches/README.md)")


def sha256_file(path: Path) -> str:
    """A file's sha256, read in 1 MiB blocks (sdists, tag archives, packages): the one place for it."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- run and test sections against conda-build's render -------------------------------------------

def _names(specs: Iterable[str]) -> set[str]:
    return {str(s).split()[0] for s in specs if str(s).strip()}


def _tests_of(recipe: Mapping[str, Any]) -> tuple[set[str], bool, list[str], list[str], set[str]]:
    """(python imports, pip check on, package_contents files, script lines, test requirement names)."""
    imports: set[str] = set()
    pip_check = False
    files: list[str] = []
    lines: list[str] = []
    requires: set[str] = set()
    for test in recipe.get("tests") or []:
        if "python" in test:
            imports |= set(test["python"].get("imports") or [])
            pip_check = pip_check or test["python"].get("pip_check", True) is not False
            requires.add("pip")
        if "package_contents" in test:
            files += [str(f) for f in test["package_contents"].get("files") or []]
        if "script" in test:
            script = test["script"]
            text = script.get("content", "") if isinstance(script, Mapping) else "\n".join(map(str, script))
            lines += [line.strip() for line in str(text).splitlines() if line.strip()]
            requires |= _names((test.get("requirements") or {}).get("run") or [])
    return imports, pip_check, files, lines, requires


def check_run_and_tests(recipe_file: Path, rendered: list[tuple[str, Mapping[str, Any]]], fixture: Mapping[str, Any] | None) -> str:
    """`rendered`: (build string, recipe dict) per variant. Raises CheckFailed on the first gap."""
    theirs = {_HASH.sub("_h#_", v["build_string"]): v for v in (fixture or {}).get("variants", [])}
    for build, recipe in rendered:
        run = ((recipe.get("requirements") or {}).get("run")) or []
        if not run:
            raise CheckFailed(f"build {build} has no run requirements", source=f"{recipe_file}: requirements.run",
                              fix="restore requirements.run (python, py-opencv, mmengine, ...; meta.yaml names them)")
        imports, pip_check, files, lines, requires = _tests_of(recipe)
        if not (imports or lines or files):
            raise CheckFailed(f"build {build} has no tests", source=f"{recipe_file}: tests",
                              fix="restore the tests section (imports, pip check, the ladder, upstream's tests)")
        want = theirs.get(_HASH.sub("_h#_", build))
        if want is None:
            continue  # no fixture (an installed package) or the render check already names the difference
        missing_run = sorted(_names(want["requirements"].get("run") or []) - _names(run))
        if missing_run:
            raise CheckFailed(f"build {build} lacks run requirement(s) {', '.join(missing_run)} that meta.yaml has",
                              source=f"{recipe_file}: requirements.run", fix="keep recipe.yaml's run section in step with meta.yaml's")
        gaps = [f"import {m}" for m in want.get("test_imports") or [] if m not in imports]
        gaps += [f"requirement {r}" for r in sorted(_names(want.get("test_requires") or []) - requires)]
        for command in want.get("test_commands") or []:
            for part in (p.strip() for p in command.split("&&")):
                if part == "pip check":
                    ok = pip_check
                elif part.startswith("test -f") and "_ext" in part:
                    ok = any("_ext" in f for f in files)
                elif "mmstack" in part:
                    ok = _runs(part, lines)
                else:
                    continue  # shell plumbing (cd, the GPU probe) is written differently in each format
                if not ok:
                    gaps.append(f"command {part!r}")
        if gaps:
            raise CheckFailed(f"build {build}'s tests lack what meta.yaml's test: {'; '.join(gaps[:3])}"
                              + (f" (and {len(gaps) - 3} more)" if len(gaps) > 3 else ""),
                              source=f"{recipe_file}: tests", fix="keep recipe.yaml's tests in step with meta.yaml's")
    return f"run and tests of {len(rendered)} builds" + (" match meta.yaml's" if theirs else " present")


def _runs(command: str, lines: list[str]) -> bool:
    """Whether one of `lines` runs `command` with its literal words (a word holding `$` or a quote
    is a value each format spells its own way: `"$ext"` here, `"$(ls ...)"` in meta.yaml)."""
    words = [w for w in command.split() if "$" not in w and '"' not in w]
    return any(all(w in line.split() for w in words) for line in lines)
