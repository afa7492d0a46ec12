"""The verification ladder, L1..L6 (levels.py: what each level proves, its parts and prerequisite),
run by the parent here in ONE child process, level after level (launcher.py).

The child journals each part's start, steps, evidence and result to a file as it goes. A crash
(signal), a hang (per-part timeout) or an exception becomes that level's FAIL with a diagnosis from
`diagnose.RULES`, read back from the journal; the levels after it run in a fresh child (only a crash
pays for a second interpreter); levels that need a failed one are NOT RUN. Importable with the
stdlib alone: facts, arch and fatbin (pydantic) are imported only where L2 needs them.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mmstack.errors import BadInput
from mmstack.verify.diagnose import Diagnosis, diagnose
from mmstack.verify.launcher import CHILD, ChildRun, run_parts
from mmstack.verify.levels import EXTENDED_BY, L4_MODES, L4_SETS, LEVELS, NEEDS, OPTIONAL_PARTS, PARTS, TITLES, level_of

__all__ = ["CHILD", "DEFAULT_TIMEOUT", "L4_MODES", "LEVELS", "NEEDS", "PARTS", "TITLES", "ChildRun", "LadderResult",
           "LevelResult", "decide_cuda", "l4_coverage", "l4_text", "libstdcxx_linkage", "parse_levels", "run_ladder"]

DEFAULT_TIMEOUT = 300.0
DETECTOR_MODULE = Path(__file__).with_name("train_detector.py")  # run by path in the child, like CHILD
CHECKPOINT_MODULE = Path(__file__).with_name("checkpoint_cycle.py")  # L6, likewise


def parse_levels(text: str | None) -> tuple[str, ...]:
    if not text or text.strip().lower() == "all":
        return LEVELS
    wanted = []
    for token in text.replace(";", ",").split(","):
        token = token.strip().upper()
        if not token:
            continue
        token = token if token.startswith("L") else f"L{token}"
        if token not in LEVELS:
            raise BadInput(f"--levels: unknown level {token!r} in {text!r}", fix="use L1..L6, e.g. --levels L1,L3,L4")
        wanted.append(token)
    return tuple(sorted(set(wanted)))


# -- levels ------------------------------------------------------------------------------------


@dataclass
class LevelResult:
    level: str
    status: str  # PASS, FAIL, SKIP, NOT RUN
    seconds: float = 0.0
    evidence: dict = field(default_factory=dict)
    reason: str | None = None
    diagnosis: Diagnosis | None = None

    @property
    def title(self) -> str:
        return TITLES[self.level]

    def as_dict(self) -> dict:
        return {
            "level": self.level,
            "name": self.title,
            "status": self.status,
            "seconds": self.seconds,
            "reason": self.reason,
            "diagnosis": self.diagnosis.as_dict() if self.diagnosis else None,
            "evidence": self.evidence,
        }


@dataclass
class LadderResult:
    python: str
    levels: list
    seconds: float
    timings: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.status in ("PASS", "SKIP") for r in self.levels)

    def as_dict(self) -> dict:
        return {"python": self.python, "ok": self.ok, "seconds": self.seconds,
                "timings": {"levels": {r.level: r.seconds for r in self.levels}, **self.timings},
                "levels": [r.as_dict() for r in self.levels]}


class _Ladder:
    def __init__(self, *, python: str, timeout: float, expect_gpu: bool, env: dict | None,
                 models: tuple[str, ...] = (), nproc: int | None = None):
        self.python, self.timeout, self.expect_gpu, self.env = python, timeout, expect_gpu, env
        self.models, self.nproc = models, nproc
        self.context: dict = {"python": python, "timeout": timeout}
        # What the parent reads from mmcv's _ext (fatbin archs, libstdc++ linkage), started in a
        # thread as soon as the child names the file, so it overlaps the child's later levels.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mmstack-ext")
        self._ext: dict = {}
        self._warm: Future[None] | None = None

    def saw(self, record: dict) -> None:
        """A journal record, as the child writes it: start reading the ext it names."""
        ev = record.get("evidence") or {}
        path = ev.get("ext_path")
        if path and path not in self._ext:
            self._ext[path] = self._pool.submit(_ext_facts, path)
        if ev.get("torch_cuda") and not self._warm:  # a CUDA torch: L2's verdict will need the facts
            self._warm = self._pool.submit(_warm_facts)

    def ext(self, path: str | None) -> dict:
        if not path:
            return {"listing": _ext_listing(None), "linkage": None}
        if path not in self._ext:
            self.saw({"evidence": {"ext_path": path}})
        return self._ext[path].result()

    def learn(self, ev: dict) -> None:
        """Keep what a level found that later diagnoses can name."""
        for key in ("torch_version", "torch_cuda", "driver", "cxx11_abi", "device"):
            if ev.get(key) not in (None, ""):
                self.context[key] = ev[key]
        devices = ev.get("devices") or []
        if devices:
            self.context.update(gpu=devices[0]["name"], cc=devices[0]["compute_capability"])
            major, minor = devices[0]["compute_capability"].split(".")
            self.context["sm"] = f"sm_{major}{minor}"

    def failed(self, level: str, runs: list[ChildRun], evidence: dict, seconds: float,
               facts: tuple[str, ...] = ()) -> LevelResult:
        bad = next(r for r in runs if not r.ok)
        _facts_context(self.context)  # only a diagnosis needs the facts (pydantic): none when all pass
        context = {**self.context, "step": bad.step, "signal": bad.signal}
        diag = diagnose("\n".join([bad.failure_text(level, self.timeout), *facts]), context)
        reason = _reason(bad)
        return LevelResult(level, "FAIL", seconds, evidence, reason, diag)

    # L1 ---------------------------------------------------------------------------------------
    def l1(self, run: ChildRun) -> LevelResult:
        self.learn(run.evidence)
        ev = dict(run.evidence)
        if not run.ok:
            ev.update(run.failure())
            return self.failed("L1", [run], ev, run.seconds)
        return LevelResult("L1", "PASS", run.seconds, ev,
                           f"mmcv {ev.get('mmcv_version')} from {ev.get('mmcv_file')}")

    # L2 ---------------------------------------------------------------------------------------
    def l2(self, run: ChildRun) -> LevelResult:
        self.learn(run.evidence)
        ev = dict(run.evidence)
        if not run.ok:
            ev.update(run.failure())
            return self.failed("L2", [run], ev, run.seconds)
        listing = self.ext(ev.get("ext_path"))["listing"]
        ev["ext_archs"] = listing
        status, reason, problem, extra = decide_cuda(ev, listing, expect_gpu=self.expect_gpu)
        ev.update(extra)
        if extra.get("driver_needed"):
            self.context["driver_needed"] = extra["driver_needed"]
        if problem:
            _facts_context(self.context)
        diag = diagnose(f"level=L2\n{problem}", self.context) if problem else None
        return LevelResult("L2", status, run.seconds, ev, reason, diag)

    # L3 ---------------------------------------------------------------------------------------
    def l3(self, load: ChildRun, info: ChildRun) -> LevelResult:
        for r in (load, info):
            self.learn(r.evidence)
        ev = {"load": dict(load.evidence), "info": dict(info.evidence)}
        if not load.ok:
            ev["load"].update(load.failure())
        if not info.ok:
            ev["info"].update(info.failure())
        seconds = round(load.seconds + info.seconds, 3)
        linkage = self.ext(ev["load"].get("ext_path"))["linkage"] if ev["load"].get("ext_path") else None
        if linkage:
            ev["load"]["libstdcxx"] = linkage
        static = linkage == "static"
        if load.ok and info.ok:
            reason = f"{ev['load'].get('ops_count', '?')} ops; {ev['info'].get('compiler')}, CUDA {ev['info'].get('compiling_cuda')}"
            if static:
                reason += "; warning: the ext carries its own static libstdc++"
            return LevelResult("L3", "PASS", seconds, ev, reason)
        runs = [r for r in (load, info) if not r.ok]
        result = self.failed("L3", runs, ev, seconds,
                             ("mmcv's _ext links libstdc++ statically",) if static else ())
        if len(runs) == 2:
            result.reason = "; ".join(dict.fromkeys(_reason(r) for r in runs))
        return result

    # L4, L5 -----------------------------------------------------------------------------------
    def simple(self, level: str, run: ChildRun) -> LevelResult:
        self.learn(run.evidence)
        ev = dict(run.evidence)
        if level == "L4" and "ops" in ev:
            ev["coverage"] = l4_coverage(ev)
        if not run.ok:
            ev.update(run.failure())
            result = self.failed(level, [run], ev, run.seconds)
            bad = [r["op"] for r in ev.get("ops") or [] if r["status"] == "fail"]
            if bad:
                result.reason = f"{len(bad)} op(s) failed: {', '.join(bad)}; {_reason(run)}"
            return result
        if level == "L4":
            reason = l4_text(ev)
        else:
            losses = ev.get("losses") or [0, 0]
            reason = f"loss {losses[0]:.4g} -> {losses[-1]:.4g} in {len(losses)} steps on {ev.get('device')}"
        return LevelResult(level, "PASS", run.seconds, ev, reason)

    def l5(self, base_run: ChildRun, run: ChildRun | None) -> LevelResult:
        """The tiny DeformConv2d + RoIAlign step; then, when asked, mmdet detectors (--model, `run`)
        and the same step under torchrun with N ranks (--nproc). PASS only if every part passes."""
        base = self.simple("L5", base_run)
        if not (self.models or self.nproc):
            return base
        parts, evidence, seconds = [base], {"tiny": base.evidence}, base.seconds
        if self.models and run is not None:
            ev = dict(run.evidence)
            if run.ok:
                part = LevelResult("L5", "PASS", run.seconds, ev, "; ".join(
                    f"{d['model']} loss {d['losses'][0]:.4g} -> {d['losses'][-1]:.4g} in {len(d['losses'])} steps"
                    f" ({d['iters_per_s']:.3g} it/s)" for d in ev.get("detectors", [])))
            else:
                ev.update(run.failure())
                part = self.failed("L5", [run], ev, run.seconds)
            parts.append(part)
            evidence["detectors"] = ev
            seconds += run.seconds
        if self.nproc:
            from mmstack.verify.distributed import run_distributed_step

            res = run_distributed_step(nproc=self.nproc, python=self.python, timeout=self.timeout, env=self.env)
            diag = (Diagnosis(rule=res["rule"] or "distributed", cause=res["diagnosis"], fix=res["fix"] or "")
                    if res["status"] != "PASS" and res["diagnosis"] else None)
            parts.append(LevelResult("L5", res["status"], res["wall_s"] or 0.0, res, res["summary"], diag))
            evidence["distributed"] = res
            seconds += res["wall_s"] or 0.0
        failed = [p for p in parts if p.status == "FAIL"]
        status = "FAIL" if failed else "PASS"
        reason = " | ".join(p.reason or "" for p in parts)
        diag = next((p.diagnosis for p in failed if p.diagnosis), None)
        return LevelResult("L5", status, round(seconds, 3), evidence, reason, diag)


    # L6 ---------------------------------------------------------------------------------------
    def l6(self, run: ChildRun) -> LevelResult:
        """The checkpoint cycle of each model (checkpoint_cycle.run_cycle); PASS only if every
        phase of every model passed."""
        ev = dict(run.evidence)
        if not run.ok:
            ev.update(run.failure())
            return self.failed("L6", [run], ev, run.seconds)
        reason = "; ".join(f"{c['model']}: saved, loaded, resumed at iteration "
                           f"{c['phases']['resume'].get('start_iter')}, tested, fine-tuned from an old-format "
                           f"checkpoint, a foreign one refused" for c in ev.get("checkpoints", []))
        return LevelResult("L6", "PASS", run.seconds, ev, reason)


def l4_coverage(ev: dict) -> dict:
    """L4's per-op coverage: exported names, ops compared, run-only, skipped (and why)."""
    ops = ev.get("ops") or []
    skipped: dict[str, list] = {}
    for r in ops:
        if r["status"] == "skip":
            skipped.setdefault(r.get("reason") or "?", []).append(r["op"])
    by_ref: dict[str, list] = {}
    for r in ops:
        if r["status"] == "pass":
            by_ref.setdefault(r["reference"], []).append(r["op"])
    return {"exported": ev.get("exported"), "ops": len(ops),
            "compared": sum(r["status"] == "pass" for r in ops),
            "run_only": [r["op"] for r in ops if r["status"] == "run-only"],
            "failed": [r["op"] for r in ops if r["status"] == "fail"],
            "skipped": skipped, "compared_by_reference": by_ref}


def l4_text(ev: dict) -> str:
    """L4's PASS text: per op, what it was compared with (never a reference that did not run)."""
    dev = ev.get("device")
    tv = ev.get("torchvision")
    tv_note = "" if tv and not str(tv).startswith("torchvision not") else "; torchvision not importable"
    cov = ev.get("coverage") or l4_coverage(ev)
    mode = ev.get("mode", "complete")
    scope = f"{cov['exported']} names exported" if L4_SETS.get(mode, None) is None else f"the {mode} set"
    head = (f"{cov['ops']} ops ({scope}) on {dev}: {cov['compared']} compared, "
            f"{len(cov['run_only'])} run-only, {sum(len(v) for v in cov['skipped'].values())} skipped")
    parts = [f"{r['op']} ({', '.join(r['references'])})" for r in ev.get("ops") or [] if r["status"] == "pass"]
    text = head + ". Compared: " + "; ".join(parts)
    if cov["run_only"]:
        text += ". Run-only (no reference): " + ", ".join(cov["run_only"])
    for why, names in cov["skipped"].items():
        text += f". Skipped ({why}): " + ", ".join(names)
    return text + tv_note


def _reason(run: ChildRun) -> str:
    where = f" in {run.step}" if run.step else ""
    if run.timed_out:
        return f"timed out{where} after {run.seconds:g} s"
    if run.signal:
        return f"crashed with {run.signal}{where}"
    if run.errors:
        return str(run.errors[0]).splitlines()[0][:300]
    return f"exited {run.returncode}{where} without a result"


def _facts_context(context: dict) -> None:
    """Add what the facts say: the environment for the GPU, the driver torch's CUDA needs."""
    try:
        from mmstack.facts.compat import driver_needed, environment_for, install_hint
        from mmstack.facts.gpus import load
    except ImportError:  # stdlib-only environments: diagnoses fall back to generic phrases
        return
    try:
        facts = load()
        if context.get("gpu") or context.get("cc"):
            hint = install_hint(environment_for(facts, name=context.get("gpu"), cc=context.get("cc")))
            if hint:
                context["install"] = hint
        if context.get("torch_cuda") and "driver_needed" not in context:
            context["driver_needed"] = driver_needed(facts, context["torch_cuda"])
    except Exception:  # noqa: BLE001 - context is best effort; the level's own result stands
        return


def libstdcxx_linkage(path: str | None) -> str | None:
    """How an ELF object gets libstdc++: "shared" (DT_NEEDED libstdc++.so.6), "static" (it defines
    and exports libstdc++'s own std::locale internals), "none", or None when it cannot be read.

    A static copy beside torch's shared libstdc++ puts two libstdc++ runtimes in one process: the
    ext's inlined iostream/locale code meets the other copy's interposed data, and the first
    std::ostringstream (mmcv's get_compiler_version) segfaults. Seen on an H200 machine whose
    /opt/gcc g++ links libstdc++ statically.
    """
    if not path:
        return None
    try:
        from mmstack.facts.elf import Elf

        with open(path, "rb") as f:
            elf = Elf(f)
            tags, base = elf.dynamic_tags()
            needed = [elf.string_at(base + v) for t, v in tags if t == 1] if base is not None else []  # DT_NEEDED
            locale = any(name.startswith(("_ZNSt6locale", "_ZNKSt6locale")) for name in elf.defined_dynamic_symbols())
    except Exception:  # noqa: BLE001 - not ELF (a stand-in), unreadable
        return None
    if any(n.startswith("libstdc++.so") for n in needed):
        return "shared"
    return "static" if locale else "none"


def _warm_facts() -> None:
    """Import what L2's CUDA verdict uses (pydantic models, the packaged facts) ahead of time."""
    try:
        from mmstack.facts.compat import driver_compat  # noqa: F401
        from mmstack.facts.gpus import load
    except ImportError:  # stdlib-only environments: decide_cuda reports that itself
        return
    try:
        load()
    except Exception:  # noqa: BLE001 - warming only; the real call reports any problem
        return


def _ext_facts(path: str) -> dict:
    return {"listing": _ext_listing(path), "linkage": libstdcxx_linkage(path)}


def _ext_listing(ext_path: str | None) -> dict:
    if not ext_path:
        return {"error": "mmcv._ext not found"}
    try:
        from mmstack.facts.fatbin import list_fatbins
    except ImportError as exc:
        return {"error": f"cannot read fatbins: {exc}"}
    try:
        listings = list_fatbins(ext_path)
    except Exception as exc:  # noqa: BLE001 - BadInput or a malformed file: evidence, not a crash
        return {"error": str(exc)}
    sass = sorted({a for li in listings for a in li.sass}, key=_arch_key)
    ptx = sorted({a for li in listings for a in li.ptx}, key=_arch_key)
    return {"path": ext_path, "sass": sass, "ptx": ptx, "compressed": any(li.compressed for li in listings)}


def _arch_key(a: str) -> tuple:
    major, _, rest = a.partition(".")
    return int(major), int(rest[:1] or 0), rest[1:]


def decide_cuda(ev: dict, listing: dict, *, expect_gpu: bool) -> tuple[str, str, str | None, dict]:
    """L2's verdict from the child's evidence and the ext's archs: (status, reason, problem, extra).

    `problem` is the text diagnosed when the level fails (None when it passes or skips).
    """
    torch_cuda, driver, available = ev.get("torch_cuda"), ev.get("driver"), ev.get("cuda_available")
    extra: dict = {}

    def no_gpu(reason: str, problem: str) -> tuple[str, str, str | None, dict]:
        if expect_gpu:
            return "FAIL", reason + " (--expect-gpu)", problem, extra
        return "SKIP", reason, None, extra

    if not torch_cuda:
        why = f"torch {ev.get('torch_version')} is a CPU build"
        if driver:
            why += f", although NVIDIA driver {driver} is loaded"
        return no_gpu(why, "torch is a CPU build")
    compat = None
    if driver or ev.get("driver_cuda"):
        from mmstack.facts.compat import driver_compat
        from mmstack.facts.gpus import load

        compat = driver_compat(load(), driver=driver, runtime_cuda=torch_cuda, driver_cuda=ev.get("driver_cuda"))
        extra["driver_compat"] = compat.as_dict()
        if compat.needed:
            extra["driver_needed"] = compat.needed
    if not available:
        if compat is not None and compat.mode == "too-old":
            return "FAIL", compat.message, f"driver version is insufficient: {compat.message}", extra
        if not driver:
            return no_gpu("no NVIDIA GPU or driver found", "no NVIDIA GPU or driver found")
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        why = f"torch.cuda.is_available() is False with driver {driver}" + (
            f" (CUDA_VISIBLE_DEVICES={vis!r})" if vis is not None else "")
        return no_gpu(why, why)
    if compat is not None and not compat.ok and compat.mode == "too-old":
        return "FAIL", compat.message, f"driver version is insufficient: {compat.message}", extra
    if "error" in listing:
        return "FAIL", f"cannot read mmcv's _ext archs: {listing['error']}", listing["error"], extra
    sass, ptx = listing["sass"], listing["ptx"]
    if not sass and not ptx:
        msg = f"mmcv's _ext holds no CUDA code (a CPU build of mmcv) under torch CUDA {torch_cuda}"
        return "FAIL", msg, msg, extra
    from mmstack.facts.arch import Coverage
    from mmstack.facts.compat import coverage_message, ext_coverage

    notes: list[str] = []
    problems: list[str] = []
    for dev in ev.get("devices") or []:
        cov = ext_coverage(dev["compute_capability"], sass, ptx)
        dev["coverage"] = cov.coverage.value
        msg = coverage_message(dev["name"], dev["compute_capability"], cov, sass, ptx)
        (problems if cov.coverage is Coverage.NONE else notes).append(msg)
    if problems:
        return "FAIL", problems[0], problems[0], extra
    reason = "; ".join(notes) + f"; torch CUDA {torch_cuda}"
    if compat is not None:
        reason += f", {compat.mode} driver {driver or ev.get('driver_cuda')}"
    return "PASS", reason, None, extra


# -- the whole ladder ----------------------------------------------------------------------------


def run_ladder(*, levels=LEVELS, python: str | None = None, timeout: float = DEFAULT_TIMEOUT,
               expect_gpu: bool = False, env: dict | None = None, models: tuple[str, ...] = (),
               nproc: int | None = None, l4: str = "quick", on_level=None) -> LadderResult:
    """Run the requested levels; a level whose prerequisite (when requested) did not pass is NOT RUN.

    `models` (mmdet detectors, train_detector.MODELS) extend L5 and L6, `nproc` (torchrun ranks) L5;
    `l4` names one of levels.L4_SETS ("quick": a few ops, "complete": every op mmcv.ops exports).
    `on_level(level)` is called as the child starts each level (for progress), from this thread.
    """
    asked = {"--model": bool(models), "--nproc": bool(nproc)}
    for option, extends in EXTENDED_BY.items():
        if asked[option] and not set(extends) & set(levels):
            raise BadInput(f"{option} extends {' and '.join(extends)}, which --levels leaves out", source="command line",
                           fix=f"add {' or '.join(extends)} to --levels or drop {option}")
    if nproc is not None and nproc < 1:
        raise BadInput(f"--nproc {nproc}: expected 1 or more processes", source="command line",
                       fix="pass --nproc 1 or more")
    if l4 not in L4_MODES:
        raise BadInput(f"--l4 {l4!r}: unknown mode", source="command line",
                       fix=f"use {' or '.join(f'--l4 {m}' for m in L4_MODES)}")
    python = python or sys.executable
    start = time.perf_counter()
    ladder = _Ladder(python=python, timeout=timeout, expect_gpu=expect_gpu, env=env, models=tuple(models), nproc=nproc)
    wanted = set(levels)
    done: dict[str, LevelResult] = {}

    def prerequisite(level: str) -> str | None:
        need = NEEDS.get(level)
        while need and need not in wanted:  # a prerequisite that was not requested does not block
            need = NEEDS.get(need)
        return need

    def blocked(level: str) -> LevelResult | None:
        need = prerequisite(level)
        if need and done[need].status not in ("PASS", "SKIP"):
            return LevelResult(level, "NOT RUN", reason=f"needs {need}, which {_verb(done[need].status)}")
        return None

    parts = [p for lv in LEVELS if lv in wanted for p in PARTS[lv] if p not in OPTIONAL_PARTS or asked[OPTIONAL_PARTS[p]]]
    needs = {p: list(PARTS[need]) for p in parts if (need := prerequisite(level_of(p)))}
    part_opts: dict[str, dict[str, object]] = {"L4": {"l4": l4}}
    if models:
        part_opts["L5-detector"] = {"module": str(DETECTOR_MODULE), "models": list(models)}
    part_opts["L6"] = {"module": str(CHECKPOINT_MODULE), "models": ["toy", *models]}
    started: list[str] = []

    def saw(record: dict) -> None:
        ladder.saw(record)
        level = level_of(record["part"]) if record.get("part") in parts else None
        if on_level is not None and "start" in record and level and level not in started:
            started.append(level)
            on_level(level)

    runs, children = run_parts(parts, python=python, timeout=timeout, env=env,
                               opts={"needs": needs, "part_opts": part_opts}, on_record=saw)

    def missing(level: str) -> LevelResult:
        why = next((r.skipped for p in PARTS[level] if (r := runs.get(p)) and r.skipped), None)
        return LevelResult(level, "NOT RUN", reason=why or "the child did not reach it")

    for level in LEVELS:
        if level not in wanted:
            continue
        stop = blocked(level)
        if stop is not None:
            done[level] = stop
        elif any(runs.get(p) is None or runs[p].skipped for p in PARTS[level] if p in parts):
            done[level] = missing(level)
        elif level == "L1":
            done[level] = ladder.l1(runs["L1"])
        elif level == "L2":
            done[level] = ladder.l2(runs["L2"])
        elif level == "L3":
            done[level] = ladder.l3(runs["L3"], runs["L3-info"])
        elif level == "L4":
            done[level] = ladder.simple("L4", runs["L4"])
        elif level == "L5":
            done[level] = ladder.l5(runs["L5"], runs.get("L5-detector"))
        else:
            done[level] = ladder.l6(runs["L6"])
    ladder._pool.shutdown(wait=False)
    results = [done[lv] for lv in LEVELS if lv in done]
    timings = {"interpreters": len(children), "children": children,
               "parts": {p: r.seconds for p, r in runs.items() if not r.skipped}}
    return LadderResult(python=python, levels=results, seconds=round(time.perf_counter() - start, 3), timings=timings)


def _verb(status: str) -> str:
    return {"FAIL": "failed", "NOT RUN": "did not run"}.get(status, status.lower())
