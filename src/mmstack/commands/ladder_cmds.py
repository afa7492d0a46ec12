"""`mmstack verify` and `mmstack fatbin`."""

from __future__ import annotations

import sys
from pathlib import Path

from mmstack import progress, report
from mmstack.errors import BadInput, CheckFailed
from mmstack.verify import timings
from mmstack.verify.ladder import DEFAULT_TIMEOUT, TITLES, parse_levels, run_ladder


def parse_models(text: str | None) -> tuple[str, ...]:
    """--model faster-rcnn,faster-rcnn-mdconv -> names of train_detector.MODELS (checked here)."""
    if not text:
        return ()
    from mmstack.verify.train_detector import MODELS

    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    unknown = [n for n in names if n not in MODELS]
    if unknown or not names:
        raise BadInput(f"--model: unknown detector {', '.join(unknown) or repr(text)}", source="command line",
                       fix=f"use one or more of {', '.join(MODELS)}, comma-separated")
    return names


def run_verify(*, levels: str | None, as_json: bool, expect_gpu: bool, python: str | None,
               timeout: float = DEFAULT_TIMEOUT, model: str | None = None, nproc: int | None = None,
               l4: str = "quick", quiet: bool = False) -> int:
    """Exit 0 when every requested level passes or skips for a stated reason, 1 otherwise.

    Unless `quiet`, stderr shows the level running (i of n) beside the time it took last run under
    the same interpreter and options (verify/timings.py); every run records its levels' times there.
    """
    models = parse_models(model)
    wanted = parse_levels(levels)
    run_key = timings.key(python=python or sys.executable, levels=wanted, l4=l4, models=models, nproc=nproc)
    last = timings.expected(run_key)
    watch = progress.steps_on_stderr("verify", quiet=quiet)

    def on_level(level: str) -> None:
        if watch:
            watch.step(f"{level} {TITLES[level]}", wanted.index(level) + 1, len(wanted), expected=last.get(level))

    try:
        result = run_ladder(levels=wanted, python=python, timeout=timeout, expect_gpu=expect_gpu,
                            models=models, nproc=nproc, l4=l4, on_level=on_level)
    finally:
        if watch:
            watch.close()
    timings.record(run_key, [(r.level, r.status, r.seconds) for r in result.levels])
    if as_json:
        report.print_json(result.as_dict())
        # one line for `mmstack build` / `mmstack test` (a recipe test runs verify --json): each level's
        # verdict and seconds, which the package's test receipt keeps (builder/receipt.py)
        sys.stdout.flush()  # after the whole JSON in a log that joins both streams
        print(report.result_line("ladder", ladder_summary(result.as_dict())), file=sys.stderr)
    else:
        rows = []
        for r in result.levels:
            detail = r.reason or ""
            if r.diagnosis:
                detail += f"\n→ {r.diagnosis.cause}\n  fix: {r.diagnosis.fix}"
            rows.append((r.level, r.title, report.status_style(r.status), f"{r.seconds:.1f}s" if r.seconds else "", detail))
        report.print_table(["level", "name", "status", "time", "evidence / diagnosis"], rows,
                           title=f"mmstack verify ({result.python})")
        report.info(("all requested levels pass" if result.ok else "verification FAILED") + f" in {result.seconds:.1f} s")
    return 0 if result.ok else 1


def ladder_summary(doc: dict) -> dict:
    """The ladder's result as a receipt keeps it: each level's verdict, seconds and reason, and the
    torch and CUDA runtime the levels saw."""
    evidence = [lv.get("evidence") or {} for lv in doc.get("levels", [])]
    seen = {k: next((e[k] for e in evidence if e.get(k)), None) for k in ("torch_version", "torch_cuda")}
    levels = [{"level": lv["level"], "name": lv.get("name"), "status": lv["status"], "seconds": lv.get("seconds"),
               "reason": lv.get("reason") or ""} for lv in doc.get("levels", [])]
    return {"ok": doc.get("ok"), "seconds": doc.get("seconds"), "levels": levels, **seen}


def run_fatbin(*, path: Path, as_json: bool, expect: str | None = None) -> int:
    """List the archs; with `expect`, exit 1 unless they equal that arch list exactly."""
    from mmstack.facts.fatbin import compare_to_arch_list, list_fatbins, summarize

    listings = list_fatbins(path)
    problems = compare_to_arch_list(listings, expect) if expect is not None else []
    if as_json:
        data = summarize(listings)
        if expect is not None:
            data.update(expected=expect, matches=not problems, problems=problems)
        report.print_json(data)
    else:
        rows = [(li.path, ", ".join(li.sass) or "-", ", ".join(li.ptx) or "-", "yes" if li.compressed else "no")
                for li in listings]
        report.print_table(["file", "SASS", "PTX", "compressed"], rows, title=str(path))
        if not listings:
            report.info("no ELF shared objects found")
        if expect is not None and not problems:
            report.info(f"matches {expect}")
    if problems:
        raise CheckFailed(f"carries other archs than {expect!r}: " + "; ".join(problems), source=str(path),
                          fix="build with TORCH_CUDA_ARCH_LIST set to the list; torch's default list was used?")
    return 0
