"""`mmstack channel page`: one static HTML page that says which build of a channel runs on which GPU.

The table (packages x GPU generations of the facts) is plain HTML: "tested" where a test receipt
(builder/receipt.py) of that very file (sha256) was made on a GPU of that generation, "predicted"
where the arch rules (facts/arch.py `coverage`) over the package's own fatbin say it runs, else
"no" with the reason. A box takes a GPU name as nvidia-smi prints it and answers, from the facts
and the answers computed here, which build a solver installs (py-rattler with the GPU's
`__cuda`/`__cuda_arch`, variants/selection.py) and the commands to install and verify it. Everything
(facts, answers, style, script) is inside the one file: no network, works from file://.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from mmstack.builder import receipt as receiptmod
from mmstack.facts.arch import Coverage, parse_arch
from mmstack.facts.compat import ext_coverage
from mmstack.facts.gpus import Facts, version_key

PAGE_FILE = "index.html"
TEMPLATE = Path(__file__).with_name("templates") / "channel_page.html"
_HOW = {Coverage.NATIVE: "native {sm} SASS", Coverage.LOWER_MINOR: "SASS of {target} (same major, lower minor)",
        Coverage.PTX_JIT: "PTX {target} JIT-compiled by the driver"}


@dataclass(frozen=True)
class Pkg:
    file: str
    subdir: str
    name: str
    version: str
    build: str
    build_number: int
    sha256: str
    path: Path


def packages(channel: Path) -> list[Pkg]:
    """What the channel's repodata lists (the index is the truth a solver sees), newest first."""
    out = []
    for repodata in sorted(channel.glob("*/repodata.json")):
        data = json.loads(repodata.read_text())
        for key in ("packages", "packages.conda"):
            for file, rec in data.get(key, {}).items():
                out.append(Pkg(file, repodata.parent.name, rec["name"], rec["version"], rec["build"],
                               int(rec.get("build_number", 0)), rec.get("sha256", ""), repodata.parent / file))
    return sorted(out, key=lambda p: (p.subdir != "linux-64", p.name, p.build))


def _cell(facts: Facts, gen, code: dict, tested_on: list[dict], subdir: str = "linux-64") -> dict:
    """One package on one generation: tested (a receipt on that GPU), predicted, or no (why). A
    package of another platform than the generation's environment (a linux-aarch64 build) is no."""
    if subdir != gen.platform:
        return {"state": "no", "text": "no", "why": f"a {subdir} build; the {gen.env} environment is {gen.platform}"}
    sm = parse_arch(gen.compute_capability).sm
    if tested_on:
        m = tested_on[0]
        return {"state": "tested", "text": "tested", "why": f"passed its tests on {m['gpu']} (driver {m['driver']},"
                f" {m['date'][:10]}){m['ladder']}"}
    if not code["sass"] and not code["ptx"]:
        return {"state": "no", "text": "no", "why": "CPU-only build: no CUDA kernels"}
    result = ext_coverage(gen.compute_capability, code["sass"], code["ptx"])
    if result.coverage.runs:
        how = _HOW[result.coverage].format(sm=sm, target=result.target.arch if result.target else "")
        return {"state": "predicted", "text": "predicted", "why": f"{how}, by the arch rules over its fatbin"}
    held = ", ".join([f"sm_{a.replace('.', '')}" for a in code["sass"]] + [f"PTX {a}" for a in code["ptx"]])
    return {"state": "no", "text": "no", "why": f"no {sm} SASS (nor SASS of the same major below it) and no PTX at or "
            f"below {gen.compute_capability}; it holds {held}"}


def _receipt_view(facts: Facts, doc: dict) -> list[dict]:
    """Per GPU of the receipt's machine: its generation and the one-line summary the page shows."""
    levels = doc.get("tests", {}).get("ladder", [])
    ladder = ("; " + " ".join(f"{lv['level']} {lv['status']}" for lv in levels)) if levels else ""
    for up in doc.get("tests", {}).get("upstream", []):
        c = up.get("counts", {})
        ladder += f"; upstream {c.get('passed', 0)} passed, {c.get('skipped', 0)} skipped"
    out = []
    for g in doc.get("machine", {}).get("gpus", []):
        known = facts.lookup_gpu(g.get("name") or "")
        gen = known.generation if known else next(
            (x.env for x in facts.generation if x.compute_capability == g.get("compute_capability")), "")
        out.append({"env": gen, "gpu": g.get("name"), "driver": g.get("driver"), "date": doc.get("date", ""),
                    "ladder": ladder})
    return out


def _machine_cuda(facts: Facts, cc: str) -> str | None:
    """The `__cuda` a current driver declares for this GPU, as `arch check --channel` assumes: its
    generation's CUDA, else the newest toolkit that builds for it."""
    from mmstack.facts.arch import serving_env

    served = serving_env(facts, cc)
    if served.env and facts.env(served.env).cuda:
        return facts.env(served.env).cuda
    return max((t.version for t in facts.toolkits_for(cc)), key=version_key, default=None)


def answers(facts: Facts, rows: list[dict], solve_channels: list[str] | None,
            on_progress: Callable[[str, int, int], None] | None = None) -> dict:
    """Per compute capability of the facts' x86-64 GPUs: the mmcv build py-rattler installs from the
    channel (+ `solve_channels` for its dependencies), or without a solve, the best-covering build."""
    from mmstack.variants import selection

    ccs = sorted({g.compute_capability for g in facts.gpu if not g.host}, key=version_key)
    by_build = {r["build"]: r for r in rows if r["name"] == "mmcv"}
    out: dict[str, dict] = {}
    for i, cc in enumerate(ccs, 1):
        if on_progress:
            on_progress("solving", i, len(ccs))
        cuda = _machine_cuda(facts, cc)
        if cuda is None:
            out[cc] = {"cuda": None, "unsatisfiable": f"no CUDA toolkit of the facts builds for compute capability {cc}"}
            continue
        answer: dict = {"cuda": cuda}
        if solve_channels is not None:
            picked = selection.solve(solve_channels, ["mmcv"], selection.Machine(cuda, cc)).as_dict()
            answer.update(picked, how="py-rattler")
        else:
            runnable = [r for r in by_build.values() if r["code"]["sass"] or r["code"]["ptx"]]
            ranked = sorted(runnable, key=lambda r: (_rank(cc, r["code"]), r["build_number"]), reverse=True)
            if ranked and _rank(cc, ranked[0]["code"]):
                answer.update(version=ranked[0]["version"], build=ranked[0]["build"], how="arch rules (no solve)")
            else:
                answer.update(unsatisfiable=f"no build of this channel runs on compute capability {cc}")
        row = by_build.get(answer.get("build", ""))
        if row is not None:
            result = ext_coverage(cc, row["code"]["sass"], row["code"]["ptx"])
            answer.update(file=row["file"], runs=result.coverage.value)
        out[cc] = answer
    return out


def _rank(cc: str, code: dict) -> int:
    order = {Coverage.NONE: 0, Coverage.PTX_JIT: 1, Coverage.LOWER_MINOR: 2, Coverage.NATIVE: 3}
    return order[ext_coverage(cc, code["sass"], code["ptx"]).coverage]


def page_data(channel: Path, facts: Facts, *, solve_channels: list[str] | None, url: str | None = None,
              on_progress: Callable[[str, int, int], None] | None = None, now: datetime | None = None) -> dict:
    """Everything the page shows, as JSON-able data (embedded in the page as is)."""
    from importlib.metadata import PackageNotFoundError, version

    gens = [g for g in facts.generation if g.is_gpu]
    receipts = receiptmod.read_all(channel)
    pkgs = packages(channel)
    rows = []
    for i, p in enumerate(pkgs, 1):
        if on_progress:
            on_progress("reading packages", i, len(pkgs))
        doc = receipts.get(f"{p.subdir}/{p.file}")
        state = "none" if doc is None else ("current" if doc["package"].get("sha256") == p.sha256 else "stale")
        tested = _receipt_view(facts, doc) if state == "current" and doc else []
        code = receiptmod.code_in(p.path) if p.subdir != "noarch" else {"sass": [], "ptx": [], "glibc": None}
        row = {"file": p.file, "subdir": p.subdir, "name": p.name, "version": p.version, "build": p.build,
               "build_number": p.build_number, "sha256": p.sha256,
               "code": {k: code[k] for k in ("sass", "ptx", "glibc")},
               "receipt": {"state": state, "file": p.file + receiptmod.SUFFIX,
                           "machine": doc["machine"]["summary"] if doc else None,
                           "date": doc.get("date") if doc else None}}
        notes = ([f"SASS {', '.join(code['sass'])}"] if code["sass"] else []) + (
            [f"PTX {', '.join(code['ptx'])}"] if code["ptx"] else []) + (
            [f"glibc ≥ {code['glibc']}"] if code["glibc"] else []) + [
            f"receipt: {state}" + (f" ({doc['machine']['summary']})" if doc else "")]
        row["note"] = "; ".join(notes)
        if p.subdir != "noarch":
            row["cells"] = {g.env: _cell(facts, g, code, [t for t in tested if t["env"] == g.env], p.subdir)
                            for g in gens}
        rows.append(row)
    try:
        mmstack_version = version("mmstack")
    except PackageNotFoundError:
        mmstack_version = "unknown"
    urls = None
    if solve_channels is not None:
        from mmstack.variants.selection import channel_urls

        urls = [channel.as_uri(), *channel_urls(list(solve_channels))]
    return {
        "channel": channel.name,
        "url": url.rstrip("/") if url else None,  # where the channel is published (else: where the page lies)
        "generated": (now or _now()).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "mmstack": mmstack_version,
        "generations": [{"env": g.env, "cc": g.compute_capability, "sm": parse_arch(g.compute_capability).sm,
                         "summary": g.summary, "cuda": g.cuda} for g in gens],
        "packages": rows,
        "gpus": [{"name": g.name, "aliases": list(g.aliases), "cc": g.compute_capability, "env": g.generation,
                  "host": g.host} for g in facts.gpu],
        "answers": answers(facts, rows, urls, on_progress),
        "solver": {"how": "py-rattler" if urls else "arch rules (no solve)",
                   "channels": ["(this channel)", *(_shown(c) for c in solve_channels or [])]},
    }


def _shown(c: str) -> str:
    """A source channel as the page names it: a URL or name as given, a local directory by its name only."""
    return c if "://" in c or not Path(c).expanduser().is_dir() else f"{Path(c).expanduser().resolve().name} (local)"


def _now() -> datetime:
    """Now, or SOURCE_DATE_EPOCH where set (reproducible builds' convention: the same inputs, the same page)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    return datetime.fromtimestamp(int(epoch), timezone.utc) if epoch.isdigit() else datetime.now(timezone.utc)


def render(data: dict) -> str:
    """The page: jinja2 with autoescape (every cell is text), the data as a JSON script element."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    template = env.from_string(TEMPLATE.read_text(encoding="utf-8"))
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).replace("</", "<\\/")
    return template.render(d=data, data_json=blob)


def write_page(channel: Path, html: str, out: Path | None = None) -> Path:
    """Write atomically (default: index.html at the channel's root, what Pages serves first)."""
    dest = out or channel / PAGE_FILE
    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, dest)
    return dest
