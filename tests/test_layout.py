"""The layout is the architecture: one subpackage per stage, and each stage imports only the stages
to its left (facts -> variants -> build -> envs -> verify; ci reads the matrix and the manifest).
errors, report and progress are shared by every stage; cli and commands sit on top and nothing imports them.
Parsed with ast, so a lazy import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "mmstack"
SHARED = {"errors", "report", "progress", "data"}
TOP = {"cli", "commands", "__main__", "__init__"}
ALLOWED = {
    "facts": set(),
    "variants": {"facts"},
    # the build stage's package is `builder`: an unanchored `build/` (GitHub's Python .gitignore, many
    # global excludes, tools that skip build output) would hide `build` from commits and tools
    "builder": {"facts", "variants"},
    "envs": {"facts", "variants", "builder"},
    "verify": {"facts", "variants", "builder", "envs"},
    "ci": {"facts", "variants", "envs"},
}
# run by path in a child interpreter where mmstack may not be importable: stdlib (+ torch, mmcv, ...
# imported inside functions) only, never mmstack
CHILD_SCRIPTS = ["verify/_ladder_child.py", "verify/_ladder_ops.py", "verify/train_detector.py",
                 "verify/dist_worker.py", "verify/toy_model.py", "facts/elf.py"]


def _part(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0].removesuffix(".py")


def _imported(path: Path) -> list[tuple[int, str]]:
    """Absolute dotted names of the mmstack modules this file imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    package = ["mmstack", *path.relative_to(PKG).parent.parts]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return [(line, m) for line, m in out if m == "mmstack" or m.startswith("mmstack.")]


def _modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def test_every_module_belongs_to_a_stage_or_the_top():
    known = set(ALLOWED) | SHARED | TOP
    stray = [str(p.relative_to(PKG)) for p in _modules() if _part(p) not in known]
    assert stray == [], f"modules outside the stage packages: {stray}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_imports_point_left(path):
    me = _part(path)
    bad = []
    for line, mod in _imported(path):
        parts = mod.split(".")
        if len(parts) < 2:
            continue
        target = parts[1]
        if me in TOP:
            continue
        if target in SHARED or target == me:
            continue
        if target in TOP:
            bad.append(f"{line}: {mod} (nothing below the CLI imports the CLI)")
        elif me in SHARED:
            bad.append(f"{line}: {mod} (errors, report and progress import no stage)")
        elif target not in ALLOWED[me]:
            bad.append(f"{line}: {mod} ({me} may import only {sorted(ALLOWED[me]) or 'no stage'})")
    assert bad == [], f"{path.relative_to(PKG)} imports against the data flow:\n" + "\n".join(bad)


@pytest.mark.parametrize("rel", CHILD_SCRIPTS)
def test_child_scripts_import_no_mmstack(rel):
    path = PKG / rel
    assert path.is_file(), f"{rel} moved: update the path constants that run it and this list"
    assert _imported(path) == []


def test_the_checker_sees_a_backwards_import(tmp_path):
    """The rule is not vacuous: a facts module importing verify is reported."""
    fake = tmp_path / "mmstack"
    (fake / "facts").mkdir(parents=True)
    (fake / "facts" / "x.py").write_text("from ..verify import ladder\nimport mmstack.envs.lock\n")
    globals()["PKG"], old = fake, PKG
    try:
        with pytest.raises(AssertionError, match=r"verify.*\n.*envs"):
            test_imports_point_left(fake / "facts" / "x.py")
    finally:
        globals()["PKG"] = old


# Directory patterns of GitHub's Python .gitignore (github/gitignore Python.gitignore) and common global
# excludes, unanchored: a subpackage with one of these names disappears from a contributor's commits.
_IGNORED_DIR_NAMES = {"build", "dist", "develop-eggs", "downloads", "eggs", ".eggs", "lib", "lib64", "parts",
                      "sdist", "var", "wheels", "share", "env", "venv", "ENV", "htmlcov", "site", "out", "bin", "obj",
                      "target", "tmp", "temp", "cache", "logs"}


def test_no_stage_package_has_a_name_ignore_files_hide():
    """issue 22 item 10: src/mmstack/build/ was hidden by the unanchored `build/` of GitHub's Python
    .gitignore; the stage's package is `builder`."""
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert "builder" in packages and set(ALLOWED) <= packages
    assert packages & _IGNORED_DIR_NAMES == set()


def test_no_tracked_file_holds_merge_conflict_markers():
    """A merge once left `<<<<<<< HEAD ... >>>>>>> branch` in docs/architecture.md unseen."""
    import subprocess

    root = PKG.parents[1]
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    marked = []
    for rel in files:
        path = root / rel
        if not path.is_file() or path.suffix in {".png", ".conda", ".bz2", ".gz", ".zst", ".whl"}:
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            continue
        marked += [f"{rel}:{i}" for i, line in enumerate(lines, 1) if line.startswith(("<<<<<<< ", ">>>>>>> "))]
    assert not marked, f"merge conflict markers: {marked}"
