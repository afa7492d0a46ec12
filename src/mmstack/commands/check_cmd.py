"""`mmstack check`: every stage validated against the facts, one line per problem.

Each stage ends in one of three states: PASS (it ran and found nothing), FAIL (it ran and found a
problem, or raised one) or SKIP (it did not run: a missing extra, an import error; the reason
says which and how to get it). A SKIP is never a PASS: the exit code is 0 only with `--strict`
off, and `--strict` (what CI runs) turns every SKIP into a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mmstack import report
from mmstack.errors import MmstackError
from mmstack.facts.gpus import load
from mmstack.variants import matrix as variants


@dataclass(frozen=True)
class Skip:
    """What a stage returns when it could not run; `reason` names what is missing and the fix."""

    reason: str


# Each check takes the repo root and returns what it checked (PASS) or a Skip; it raises
# MmstackError on a problem. An ImportError out of a check is a SKIP naming the missing module.
Check = Callable[[Path], str | Skip]

BUILD_EXTRA = "pip install 'mmstack[build]'"


def _facts(root: Path) -> str:
    f = load()
    return f"{len(f.gpu)} GPUs, {len(f.generation)} generations, {len(f.cuda)} CUDA toolkits"


def _matrix(root: Path) -> str:
    m = variants.load_matrix(load(), root / variants.CONFIG_FILE)
    return f"{len(m)} variants valid"


def _recipes(root: Path) -> str:
    from mmstack.builder.recipes import check_recipes

    return check_recipes(root)


def _workflows(root: Path) -> str | Skip:
    from mmstack.ci.workflows import check_workflows

    return check_workflows(root)


def _locks(root: Path) -> str | Skip:
    from mmstack.envs.lock import check_locks_for_check_command

    return check_locks_for_check_command(root)


# Modules of the 'build' extra a stage needs: without them the stage does not run (SKIP).
BUILD_MODULES = ("rattler_build", "rattler")


def checks() -> list[tuple[str, Check, tuple[str, ...]]]:
    """(name, check, modules it needs) in data-flow order."""
    return [("facts", _facts, ()), ("variants", _matrix, ("rattler_build",)),
            ("recipes", _recipes, ("rattler_build",)), ("workflows", _workflows, ("rattler_build",)),
            ("locks", _locks, BUILD_MODULES)]


def _missing(modules: tuple[str, ...]) -> list[str]:
    import importlib

    out = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            out.append(name)
    return out


def _run_one(fn: Check, root: Path, needs: tuple[str, ...] = ()) -> tuple[str, str, int]:
    """(status, detail, exit code) of one stage."""
    missing = _missing(needs)
    if missing:
        return "SKIP", f"not run: {', '.join(missing)} not importable (the 'build' extra); {BUILD_EXTRA}", 0
    try:
        out = fn(root)
    except MmstackError as exc:
        return "FAIL", exc.one_line(), exc.exit_code
    except ImportError as exc:
        name = getattr(exc, "name", None) or str(exc)
        hint = BUILD_EXTRA if name.split(".")[0] in BUILD_MODULES else f"install {name.split('.')[0]}"
        return "SKIP", f"not run: cannot import {name} ({exc}); {hint}", 0
    if isinstance(out, Skip):
        return "SKIP", out.reason, 0
    return "PASS", out, 0


def run_check(*, root: Path, as_json: bool, strict: bool = False,
              stages: list[tuple[str, Check, tuple[str, ...]]] | None = None) -> int:
    """Run every stage; exit 1/2 on a FAIL (the worst), 1 on a SKIP under `strict`, else 0."""
    results = []
    worst = 0
    for name, fn, needs in stages if stages is not None else checks():
        status, detail, code = _run_one(fn, root, needs)
        worst = max(worst, code)
        results.append({"check": name, "status": status, "detail": detail})
    skipped = [r["check"] for r in results if r["status"] == "SKIP"]
    if strict and skipped:
        worst = max(worst, 1)
    if as_json:
        report.print_json({"ok": worst == 0, "strict": strict, "skipped": skipped, "checks": results})
    else:
        report.print_table(["check", "status", "detail"],
                           [(r["check"], report.status_style(r["status"]), r["detail"]) for r in results])
        if skipped:
            verdict = "a failure under --strict" if strict else "not a pass; --strict makes it a failure"
            report.info(f"{len(skipped)} stage(s) did not run ({', '.join(skipped)}): {verdict}")
    return worst
