"""The layout is the architecture: one subpackage per stage, and each stage imports only the stages
to its left (facts -> variants -> build -> envs -> verify; ci reads the matrix and the manifest).
errors, report and progress are shared by every stage; cli and commands sit on top and nothing imports them.
Parsed with ast, so a lazy import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
import re
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
CHILD_SCRIPTS = ["verify/_ladder_child.py", "verify/_ladder_ops.py", "verify/levels.py", "verify/train_detector.py",
                 "verify/dist_worker.py", "verify/toy_model.py", "verify/checkpoint_cycle.py", "facts/elf.py"]


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


# -- the ladder's levels are spelled in one table (verify/levels.py), read by both processes --------

LEVEL_TABLE = "verify/levels.py"
_LEVEL_ID = re.compile(r"^L[1-9](?:-[\w-]+)?$")  # a level or a part: "L3", "L3-info"


def level_tables(path: Path) -> list[str]:
    """Tuples, lists, sets and dict keys that spell two or more levels or parts: a second table."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        else:
            continue
        ids = sorted({e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
                      and _LEVEL_ID.match(e.value)})
        if len(ids) >= 2:
            bad.append(f"{node.lineno}: {', '.join(ids)}")
    return bad


@pytest.mark.parametrize("path", [p for p in _modules() if str(p.relative_to(PKG)) != LEVEL_TABLE],
                         ids=lambda p: str(p.relative_to(PKG)))
def test_levels_are_spelled_only_in_the_level_table(path):
    assert level_tables(path) == [], f"{path.relative_to(PKG)} spells levels beside {LEVEL_TABLE} (read them from it)"


def test_the_level_table_rule_bites(tmp_path):
    assert level_tables(PKG / LEVEL_TABLE)  # the table itself is what the rule sees
    x = tmp_path / "x.py"
    x.write_text('NEEDS = {"L2": "L1", "L3": "L1"}\nparts = ("L3", "L3-info")\none = ["L4"]\nif lv == "L5": pass\n')
    assert level_tables(x) == ["1: L2, L3", "2: L3, L3-info"]


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


# -- the lab (lab/: mmstack_lab, development and CI only) and the product -------------------------

ROOT = PKG.parents[1]
LAB = ROOT / "lab"


def _imports(tree: ast.AST) -> list[tuple[int, str, list[str]]]:
    """(line, module, names imported from it) of every absolute import in a parsed file."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append((node.lineno, node.module, [a.name for a in node.names]))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def lab_imports_in_mmstack(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [f"{line}: {mod}" for line, mod, _ in _imports(tree) if mod.split(".")[0] == "mmstack_lab"]


def private_mmstack_names(path: Path) -> list[str]:
    """mmstack's private names a lab file reaches: a `_module` on the way, a `_name` imported, or
    `_attr` read off a name bound to an mmstack module (`from mmstack.envs import lock; lock._locked`)."""
    tree = ast.parse(path.read_text(), str(path))
    bad, bound = [], set()
    for line, mod, names in _imports(tree):
        if mod.split(".")[0] != "mmstack":
            continue
        parts = mod.split(".")
        bad += [f"{line}: {mod} (private module {p})" for p in parts if _private(p)]
        bad += [f"{line}: from {mod} import {n}" for n in names if _private(n)]
        bound.update(names or [parts[0]])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound.update(a.asname for a in node.names if a.asname and a.name.split(".")[0] == "mmstack")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mmstack":
            bound.update(a.asname for a in node.names if a.asname)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                bad.append(f"{node.lineno}: {ast.unparse(node)}")
    return bad


def _lab_files() -> list[Path]:
    return sorted(p for p in LAB.rglob("*.py") if "results" not in p.relative_to(LAB).parts)


def test_the_lab_is_where_the_layout_test_looks():
    assert (LAB / "src" / "mmstack_lab" / "__init__.py").is_file() and len(_lab_files()) > 20


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_mmstack_never_imports_the_lab(path):
    assert lab_imports_in_mmstack(path) == [], f"{path.relative_to(PKG)} imports the lab (development only)"


@pytest.mark.parametrize("path", _lab_files(), ids=lambda p: str(p.relative_to(LAB)))
def test_the_lab_uses_only_mmstacks_public_names(path):
    bad = private_mmstack_names(path)
    assert bad == [], f"{path.relative_to(ROOT)} reaches mmstack's private names (give them a public one):\n" + "\n".join(bad)


def test_the_lab_rules_bite(tmp_path):
    product = tmp_path / "product.py"
    product.write_text("import json\n\ndef f():\n    from mmstack_lab.docs import render_docs\n")
    assert lab_imports_in_mmstack(product) == ["4: mmstack_lab.docs"]
    lab = tmp_path / "lab.py"
    lab.write_text("from mmstack import __version__\nfrom mmstack.envs.lock import _locked, solve_env\n"
                   "import mmstack.verify._ladder_child\nfrom mmstack.envs import lock\nimport mmstack.facts.gpus as g\n"
                   "lock._locked(1)\ng._cache\nlock.locked_env(1)\n")
    assert sorted(private_mmstack_names(lab)) == [
        "2: from mmstack.envs.lock import _locked", "3: mmstack.verify._ladder_child (private module _ladder_child)",
        "6: lock._locked", "7: g._cache"]


# -- the stand-in builders live in the lab (mmstack_lab.standin); tests/support is pytest's glue only ----

STANDIN = LAB / "src" / "mmstack_lab" / "standin"
SUPPORT = ROOT / "tests" / "support"
# what makes or indexes a conda package or channel: py-rattler-build (assemble_package, build_recipes),
# py-rattler's indexer, conda-package-handling, and mmstack's own channel index
_PACKAGE_BUILDERS = ("rattler_build", "rattler.index", "conda_package_handling", "mmstack.builder.channel")


def stand_in_builder(path: Path) -> list[str]:
    """Why `path` builds stand-ins: an import of a package or channel builder (also inside a function),
    or a STAND-IN label in a string that is not a docstring (what a stand-in writes into its metadata)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    why = [f"{line}: imports {mod}" for line, mod, _ in _imports(tree)
           if any(mod == b or mod.startswith(b + ".") for b in _PACKAGE_BUILDERS)]
    why += [f"{n.lineno}: writes a STAND-IN label" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and "STAND-IN" in n.value
            and id(n) not in docstrings]
    return why


def test_stand_in_builders_live_only_in_the_lab():
    """tests/support holds fixtures, the CLI runner and session glue; what builds packages or channels
    standing in for conda-forge (or a recipe's source) is the lab's, mmstack_lab.standin."""
    support = sorted(SUPPORT.glob("*.py"))
    assert len(support) > 3
    assert {p.name: w for p in support if (w := stand_in_builder(p))} == {}, (
        "tests/support builds stand-ins: move the module to lab/src/mmstack_lab/standin/ (git mv)")


def test_the_stand_in_rule_bites(tmp_path):
    # every stand-in builder the lab has is one the rule sees
    builders = sorted(p for p in STANDIN.glob("*.py") if p.name != "__init__.py")
    assert {p.name for p in builders} >= {"bootstrap.py", "bootstrap_cuda.py", "fake_channel.py", "offline.py"}
    assert [p.name for p in builders if not stand_in_builder(p)] == []
    x = tmp_path / "x.py"
    x.write_text('"""Not a STAND-IN: a docstring may say the word."""\nimport json\n\n'
                 'def f():\n    """STAND-IN here too."""\n    from rattler_build import assemble_package\n'
                 '    from mmstack.builder.channel import index_channel\n    return {"summary": "STAND-IN (x)"}\n')
    assert stand_in_builder(x) == ["6: imports rattler_build", "7: imports mmstack.builder.channel",
                                   "8: writes a STAND-IN label"]


def test_the_lab_rules_cover_the_stand_ins():
    files = _lab_files()
    assert all(p in files for p in STANDIN.glob("*.py")) and (STANDIN / "bootstrap.py") in files


# -- no sys.path manipulation: imports go through installed packages, `python -m` and PYTHONPATH ----

# Each exception with its reason.
SYS_PATH_ALLOWED = {
    # removes the child's script directory ('' under `python -c`), adds nothing: a checkout's ./mmcv
    # must not shadow the installed mmcv under test. `python -P` would do it but needs 3.11 (the
    # ladder runs in 3.10 environments too); `-I` also drops PYTHONPATH and the user site, which
    # environments under test may rely on; another cwd would change what relative paths mean.
    "src/mmstack/verify/_ladder_child.py",
}
_SYS_PATH_TEXT = re.compile(r"sys\.path\s*(?:\[[^\]]*\]\s*=|\.(?:insert|append|extend|remove|pop|clear)\b|\+?=(?!=))"
                            r"|site\.addsitedir")
_MUTATORS = {"insert", "append", "extend", "remove", "pop", "clear"}


def _is_sys_path(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


def sys_path_edits(path: Path) -> list[str]:
    """Lines that change sys.path: in Python code, in Python code held in strings (`python -c`), in shell."""
    text = path.read_text()
    if path.suffix != ".py":
        return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if _SYS_PATH_TEXT.search(line)]
    bad = []
    for node in ast.walk(ast.parse(text, str(path))):
        targets = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if (node.func.attr in _MUTATORS and _is_sys_path(node.func.value)) or (
                    node.func.attr == "addsitedir" and isinstance(node.func.value, ast.Name) and node.func.value.id == "site"):
                bad.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        for t in targets:
            if _is_sys_path(t) or (isinstance(t, ast.Subscript) and _is_sys_path(t.value)):
                bad.append(f"{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SYS_PATH_TEXT.search(node.value):
            bad.append(f"{node.lineno}: a string holding code that edits sys.path")
    return bad


def _code_files() -> list[str]:
    import subprocess

    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    return sorted(f for f in files if (f.endswith((".py", ".sh")) or f == ".ci/run") and (ROOT / f).is_file())


def test_no_file_edits_sys_path():
    files = _code_files()
    assert "lab/gpu/carry.sh" in files and "lab/src/mmstack_lab/paths.py" in files
    bad = {f: e for f in files if f not in SYS_PATH_ALLOWED and (e := sys_path_edits(ROOT / f))}
    assert bad == {}, f"sys.path edits (install the package, run with -m, or set PYTHONPATH): {bad}"
    assert all(sys_path_edits(ROOT / f) for f in SYS_PATH_ALLOWED), "an allowed exception is gone: drop it from the list"


def test_the_sys_path_rule_bites(tmp_path):
    # the patterns are assembled here so that this file holds none of them itself
    edit, site = "sys" + ".path", "site" + ".addsitedir"
    py = tmp_path / "x.py"
    py.write_text(f"import sys, site\nprint({edit})\n{edit}.insert(0, 'a')\n{edit}[:0] = ['b']\n{edit} += ['c']\n"
                  f"{site}('d')\ncode = 'import sys; {edit}.append(1)'\nn = len({edit})\n")
    assert sorted(b.split(":")[0] for b in sys_path_edits(py)) == ["3", "4", "5", "6", "7"]
    sh = tmp_path / "x.sh"
    sh.write_text(f'python -c "import sys; {edit}[:0] = sys.argv.pop(1).split(\':\')"\nPYTHONPATH=lab/src python -m x\n')
    assert [b.split(":")[0] for b in sys_path_edits(sh)] == ["1"]


# -- the shell steps reach no private name either (gpu-proof.sh once read support.bootstrap_cuda._cf_arch_list) --

_SHELL_PRIVATE = re.compile(r"\bfrom\s+(?:mmstack|support)[\w.]*\s+import\s+([\w ,]+)|\b(?:mmstack|support)(?:\.\w+)*\._(?!_)\w+")


def shell_private_names(path: Path) -> list[str]:
    bad = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        for m in _SHELL_PRIVATE.finditer(line):
            names = [x.strip() for x in (m.group(1) or "").split(",")]
            if m.group(1) is None or any(_private(x) for x in names):
                bad.append(f"{n}: {m.group(0)}")
    return bad


def test_shell_steps_reach_no_private_name():
    scripts = [ROOT / f for f in _code_files() if f.endswith(".sh") or f == ".ci/run"]
    assert ROOT / "lab" / "gpu" / "carry.sh" in scripts
    assert {str(p.relative_to(ROOT)): b for p in scripts if (b := shell_private_names(p))} == {}


def test_the_shell_private_name_rule_bites(tmp_path):
    sh = tmp_path / "x.sh"
    sh.write_text("python -c 'from mmstack_lab.standin.bootstrap_cuda import _cf_arch_list; print(_cf_arch_list())'\n"
                  "python -c 'from mmstack_lab.standin.bootstrap_cuda import cf_arch_list'\npython -c 'import mmstack.envs.lock as l'\n"
                  "python -c 'import mmstack; mmstack.envs.lock._locked'\n")
    assert [b.split(":")[0] for b in shell_private_names(sh)] == ["1", "4"]
