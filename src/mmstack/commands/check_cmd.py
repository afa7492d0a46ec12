"""`mmstack check`: every stage validated against the facts, one line per problem."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .. import report, variants
from ..errors import MmstackError
from ..facts import load

# Each check takes the repo root and returns notes (what it checked); it raises MmstackError
# on a problem. Later stages (recipes, pixi.toml, workflows, locks) register here.
Check = Callable[[Path], str]


def _facts(root: Path) -> str:
    f = load()
    return f"{len(f.gpu)} GPUs, {len(f.generation)} generations, {len(f.cuda)} CUDA toolkits"


def _matrix(root: Path) -> str:
    m = variants.load_matrix(load(), root / variants.CONFIG_FILE)
    return f"{len(m)} variants valid"


def checks() -> list[tuple[str, Check]]:
    found: list[tuple[str, Check]] = [("facts", _facts), ("variants", _matrix)]
    try:
        import rattler_build  # noqa: F401 - the 'build' extra

        from ..build import check_recipes
        found.append(("recipes", check_recipes))
    except ImportError:
        found.append(("recipes", lambda root: "skipped: rendering needs py-rattler-build (the 'build' extra)"))
    try:
        from ..workflows import check_workflows
        found.append(("workflows", check_workflows))
    except ImportError:
        pass
    try:
        from ..lock import check_locks_for_check_command
        found.append(("locks", check_locks_for_check_command))
    except ImportError:
        pass
    return found


def run_check(*, root: Path, as_json: bool) -> int:
    results = []
    worst = 0
    for name, fn in checks():
        try:
            results.append({"check": name, "status": "PASS", "detail": fn(root)})
        except MmstackError as exc:
            worst = max(worst, exc.exit_code)
            results.append({"check": name, "status": "FAIL", "detail": exc.one_line()})
    if as_json:
        report.print_json({"ok": worst == 0, "checks": results})
    else:
        report.print_table(["check", "status", "detail"],
                           [(r["check"], report.status_style(r["status"]), r["detail"]) for r in results])
    return worst
