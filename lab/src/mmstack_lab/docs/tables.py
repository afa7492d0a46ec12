"""What each page shows: the tables, values and pictures render_docs puts between a page's markers,
each drawn from named files under lab/results/ (mmstack_lab.docs.results reads them).

Adding a result: commit its JSON under lab/results/, add a `Table` to TABLES (a source file, where
its rows are, and (header, path, format) columns), and put the two marker lines in a page. For a
new H200 run, e.g.:

    TABLES["h200-run3-ops"] = Table(
        sources=["h200/run3/ops_sm90.json"], rows="ops",
        columns=[("op", "op", "{}"), ("shape", "shape", "{}"), ("mmcv µs", "mmcv_us", "{:,.1f}")])

Tables that combine several files (runs side by side) are functions returning (header, rows).
docs/performance.md shows the newest run of each kind (CURRENT_*); a run's README its own.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from mmstack_lab.docs import results
from mmstack_lab.docs.results import MISSING, Body, Doc, Plot, Table, Value, fmt, get, load, load_text, plots_module
from mmstack_lab.paths import ROOT

if TYPE_CHECKING:
    from mmstack.variants.ci_cost import Costs

# -- build.sh outside conda on the H200 (lab/results/h200/run1-before-fix, run2-fixed) ------------------------------------------------------------------------

H200 = {"run 1": "h200/run1-before-fix", "run 2": "h200/run2-fixed"}


def _mb(x) -> str:
    return f"{x / 1e6:.1f} MB"


def _h200_machine(_docs: list[Doc]) -> Body:
    rows = []
    for run, d in H200.items():
        fp = load(f"{d}/doctor_sm90.json")["fingerprint"]
        gpu = (fp.get("gpus") or [{}])[0]
        cores = load_text(f"{d}/machine.txt").splitlines()[5].strip()
        rows.append([run, f"{gpu.get('name')} (sm {gpu.get('compute_capability')})", fp.get("driver"),
                     f"{get(fp, 'torch.torch_version')} (CUDA {get(fp, 'torch.torch_cuda')})",
                     get(fp, "nvcc.version"), get(fp, "gcc.version"), get(fp, "python.version"), cores,
                     fp.get("os")])
    return ["run", "GPU", "driver", "torch", "nvcc", "gcc", "python", "cores", "OS"], rows


def _h200_build(_docs: list[Doc]) -> Body:
    runs = {run: (load(f"{d}/build_time_sm90.json"), load(f"{d}/units_sm90.json")) for run, d in H200.items()}

    def row(label, f):
        return [label] + [f(b, u) for b, u in runs.values()]

    def unit(i):
        return lambda b, u: (f"`{u['longest'][i]['unit'].removesuffix('.o')}` {u['longest'][i]['s']:.0f} s"
                             if len(u.get("longest", [])) > i else MISSING)

    body = [
        row("build.sh exit code", lambda b, u: f"{b['rc']}" + (" (failed)" if b["rc"] else "")),
        row("wall", lambda b, u: f"{b['wall_s']:.1f} s"),
        row("CPU (user+sys)", lambda b, u: f"{b['cpu_s']:,.0f} s"),
        row("peak RSS (one process)", lambda b, u: f"{b['max_rss_mb'] / 1024:.2f} GiB"),
        row("compile units (ninja)", lambda b, u: u["units"]),
        row("sum of unit times", lambda b, u: f"{u['unit_cpu_s']:,.0f} s"),
        row("ninja span (first start to last end)", lambda b, u: f"{u['span_s']:.0f} s"),
        row("longest unit", unit(0)),
        row("next", unit(1)),
        row("longest unit / wall", lambda b, u: f"{u['longest'][0]['s'] / b['wall_s']:.0%}"),
        row("CPU / cores", lambda b, u: f"{b['cpu_s'] / _cores():.0f} s"),
    ]
    return ["", *runs], body


def _cores() -> int:
    return int(load_text("h200/run2-fixed/machine.txt").splitlines()[5].strip())


def _h200_size(_docs: list[Doc]) -> Body:
    rows = []
    for run, d in H200.items():
        size_file = results.RESULTS / d / "size_sm90.txt"
        size = _mb(int(size_file.read_text().split()[0])) if size_file.is_file() else "not recorded"
        f = load(f"{d}/fatbin_sm90.json")["files"][0]
        sass = [e for e in f["entries"] if e["kind"] == "sass"]
        ptx = [e for e in f["entries"] if e["kind"] == "ptx"]
        archs = ", ".join(sorted({e["arch"] for e in sass}))
        cubins = load_text(f"{d}/cuobjdump_sm90.txt").split()
        rows.append([run, size, f"{len(sass)} × sm_{archs.replace('.', '')}", len(ptx),
                     _mb(sum(e["size"] for e in sass)), "yes" if f.get("compressed") else "no",
                     f"{cubins[0]} × {cubins[1]}"])
    return ["run", "`_ext.so`", "SASS (mmstack fatbin)", "PTX", "SASS stored", "compressed", "cuobjdump --list-elf"], rows


def _h200_ops(_docs: list[Doc]) -> Body:
    r1, r2 = (load(f"{d}/ops_sm90.json")["ops"] for d in H200.values())
    rows = []
    for a, b in zip(r1, r2, strict=True):
        assert (a["op"], a["shape"]) == (b["op"], b["shape"])
        tv = b.get("torchvision_us")
        diffs = [abs(x[k] - y[k]) / y[k] for x, y in ((a, b),) for k in ("mmcv_us", "torchvision_us") if k in x and k in y]
        rows.append([b["op"], b["shape"], f"{b['mmcv_us']:,.1f}", MISSING if tv is None else f"{tv:,.1f}",
                     MISSING if tv is None else f"{b['ratio_tv_over_mmcv']:.2f}", f"{a['mmcv_us']:,.1f}",
                     MISSING if tv is None else f"{a['torchvision_us']:,.1f}", f"{max(diffs):.1%}"])
    return ["op", "shape", "mmcv µs", "torchvision µs", "torchvision / mmcv", "run 1 mmcv µs",
            "run 1 torchvision µs", "largest run 1 vs run 2 difference"], rows


def _h200_l4(docs: list[Doc]) -> Body:
    level = next(lv for lv in docs[0]["levels"] if lv["level"] == "L4")
    ev = level["evidence"]
    rows = []
    for op in ("roi_align", "nms", "box_iou_rotated", "deform_conv", "points_in_boxes"):
        e = ev.get(op, {})
        known = [f"{k.removeprefix('known').strip('_') or 'known'}: {v}" for k, v in e.items() if k.startswith("known")]
        rows.append([op, "; ".join(known) or MISSING, _diff(e.get("vs_cpu")), _diff(e.get("vs_torchvision"), absent="no counterpart")])
    return ["op", "known values (max abs diff)", "vs the CPU kernel", f"vs torchvision {ev.get('torchvision')}"], rows


def _diff(v, absent=MISSING) -> str:
    if v is None:
        return absent
    return f"{v:.2g}" if isinstance(v, float) else str(v)


def _h200_ladder(_docs: list[Doc]) -> Body:
    runs = {run: load(f"{d}/verify_sm90.json") for run, d in H200.items()}
    levels = [lv["level"] for lv in next(iter(runs.values()))["levels"]]
    body = []
    for name in levels:
        row = [name]
        for v in runs.values():
            lv = next(x for x in v["levels"] if x["level"] == name)
            row.append(f"{lv['status']} {lv['seconds']:.1f} s" if lv["seconds"] else lv["status"])
        body.append(row)
    body.append(["all"] + [f"{'PASS' if v['ok'] else 'FAIL'} {v['seconds']:.1f} s" for v in runs.values()])
    return ["level", *runs], body


def _losses(first, last) -> str:
    return f"{first:.3g} → {last:.3g}"


def _h200_detector(docs: list[Doc]) -> Body:
    d = docs[0]
    rows = []
    for name, r in d["results"].items():
        if "skipped" in r:
            rows.append([name, "did not run: " + r["skipped"].split(". Install")[0], MISSING, MISSING, MISSING])
            continue
        fell = r["losses_finite"] and r["loss_last"] < r["loss_first"]
        verdict = "falls" if fell else ("diverged: not a valid speed figure" if r["losses_finite"] else "not finite")
        rows.append([name, f"{r['iters_per_s']:.1f}", " ".join(f"{x:.1f}" for x in r["iters_per_s_all"]),
                     _losses(r["loss_first"], r["loss_last"]), verdict])
    header = ["framework", f"it/s (median of {d['repeats']})", "it/s per timing", "loss first → last", "loss"]
    return header, rows


def _dist1(docs: list[Doc]) -> Body:
    d = docs[0]
    ev = d.get("evidence", {})
    rows = [[d["status"], f"{d['backend']} × {d['world_size']} ({ev.get('device')})", len(d["losses"]),
             _losses(d["losses"][0], d["losses"][-1]), "yes" if d["params_agree"] else "no",
             f"{d['syncbn']} ({'stats agree' if ev.get('bn_stats_agree') else 'stats differ'})",
             ", ".join(ev.get("mmcv_ops", [])), f"{d['wall_s']:.1f} s"]]
    return ["status", "backend × ranks", "steps", "loss", "parameters identical", "SyncBatchNorm", "mmcv ops",
            "wall (incl. torchrun start)"], rows


_RECIPE_ARCH = {"sm90": "9.0", "ptx": "8.0+PTX", "fat": "fat (the stand-in pytorch's list)", "sm90nt": "9.0 (built --no-test)",
                "noarch": "mmstack (noarch)",
                "mmdet": "mmdet (noarch)", "mmdetnt": "mmdet (noarch, built --no-test)"}


def _upstream(b: dict) -> str:
    """Upstream's pytest counts from the build's test results ('-' where the recipe did not run them)."""
    docs = [t for p in b.get("packages") or [] for t in p.get("test_results") or [] if t.get("kind") == "upstream-tests"]
    if not docs:
        return MISSING
    c = docs[0]["counts"]
    return (f"`{docs[0].get('path', 'tests/test_ops')}`: {c['passed']} passed, {c['failed'] + c['error']} failed, "
            f"{c['skipped']} skipped ({docs[0]['seconds']:.0f} s)")


def _recipe_builds(docs: list[Doc]) -> Body:
    """The recipe's own CUDA builds on the H200 (issue 16): build cost, sandbox tests, landed or not."""
    rows = []
    for d, tag, b in ((doc, tag, b) for doc in docs for tag, b in doc["builds"].items()):
        if not b:
            continue
        label = _RECIPE_ARCH.get(tag, tag) + (f" ({d['run']})" if len(docs) > 1 else "")
        if b.get("results_returned") is False:
            rows.append([label, f"rc {b['command_rc']}", *["-"] * 5,
                         "results not returned (STATUS line only)", "-", "yes" if b["command_rc"] == 0 else "no"])
            continue
        comp = b.get("compile") or {}
        lad = b.get("sandbox_ladder") or {}
        levels = lad.get("levels") or {}
        tests = ("log not returned" if b.get("tests_run") is None else "not run (--no-test)" if not b.get("tests_run") else
                 ", ".join(f"{lv} {v['status']}" for lv, v in levels.items())
                 + (f" (first failed op: {lad['l4_first_failed_op']})" if lad.get("l4_first_failed_op") else ""))
        rows.append([label, fmt(b.get("command_wall_s"), "{:.0f} s"),
                     fmt(b.get("command_cpu_s"), "{:,.0f} CPU-s"), fmt(comp.get("span_s"), "{:.1f} s"),
                     fmt(comp.get("parallel_limit_s"), "{:.1f} s"), fmt(comp.get("span_over_limit"), "{:.3f}×"),
                     fmt(b.get("sandbox_test_s"), "{:.0f} s"), tests, _upstream(b),
                     "yes" if b.get("landed_in_channel") else "no"])
    return ["build", "`mmstack build` wall", "CPU", "compile span", "parallel limit", "span / limit",
            "sandbox test", "sandbox ladder on the GPU", "upstream tests in the sandbox", "landed in the channel"], rows


def _recipe_prefix(docs: list[Doc]) -> Body:
    """The ladder in a prefix installed from the channel with py-rattler."""
    rows = []
    for tag, r in (docs[0].get("installed_prefix_ladder") or {}).items():
        if not r:
            rows.append([_RECIPE_ARCH.get(tag, tag), "not run", "-", "-"])
            continue
        if r.get("results_returned") is False:
            rows.append([_RECIPE_ARCH.get(tag, tag), "PASS" if r["command_rc"] == 0 else "FAIL", "-",
                         f"results not returned: `mmstack verify` exited {r['command_rc']} (STATUS)"])
            continue
        rows.append([_RECIPE_ARCH.get(tag, tag), "PASS" if r["ok"] else "FAIL", fmt(r.get("seconds"), "{:.1f} s"),
                     "; ".join(f"{lv} {v['status']}: {str(v.get('reason') or '')[:90]}" for lv, v in r["levels"].items())])
    return ["build", "ladder", "wall", "levels"], rows


def _ladder_ops():
    """verify/_ladder_ops.py, loaded by path as the ladder's child loads it (stdlib at import)."""
    import importlib.util

    path = ROOT / "src/mmstack/verify/_ladder_ops.py"
    spec = importlib.util.spec_from_file_location("_ladder_ops_docs", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a loadable Python file")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _nms_anatomy(docs: list[Doc]) -> Body:
    """mmcv's CUDA nms step by step (released and patched kernels) beside torchvision's."""
    us = lambda r, k: fmt((r.get(k) or {}).get("median_us"), "{:,.0f}")  # noqa: E731
    rows = [[f"{r['n']:,}", f"{r['kept']:,}", us(r, "torchvision_nms"), us(r, "released_launcher"),
             us(r, "patched_launcher"), us(r, "step_sort"), us(r, "step_mask"), us(r, "step_gather_released"),
             us(r, "step_gather_patched"), us(r, "step_masked_select"), us(r, "mmcv_wrapper_extra"),
             fmt(r.get("ratio_tv_over_released"), "{:.2f}×"), fmt(r.get("ratio_tv_over_patched"), "{:.2f}×")]
            for r in docs[0]["timings"]]
    return ["boxes", "kept", "torchvision µs", "mmcv launcher µs", "patched launcher µs", "sort", "IoU mask",
            "gather (released)", "gather (patched)", "masked_select", "mmcv.ops.nms extra",
            "tv / mmcv", "tv / patched"], rows


def _l4_vs_upstream(docs: list[Doc]) -> Body:
    """L4 complete on the H200, per op: what it compared with, and upstream's test of the same op."""
    ops = _ladder_ops()
    cuda_only = {entry[0]: entry[2] for entry in ops.CHECKS}
    l4 = next(lv for lv in docs[0]["levels"] if lv["level"] == "L4")["evidence"]
    rows = []
    for rec in l4["ops"]:
        op = rec["op"]
        test = ops.UPSTREAM_TESTS.get(op)
        rows.append([op, "yes" if cuda_only.get(op) else "no", rec["status"], rec["device"],
                     ", ".join(rec.get("references") or []) or "none (run-only)",
                     fmt(rec.get("max_error"), "{:.2g}"), f"`tests/{test}`" if test else "none"])
    return ["op", "CUDA-only", "H200 status", "ran on", "compared with", "max error", "upstream test"], rows


def _ccache_table(docs: list[Doc], same: Callable[[dict, dict], str], same_header: str) -> Body:
    """A cold build and its rebuilds through ccache: cost, hits and misses, and `same(build, cold)`."""
    d = docs[0]
    cold = next(b for b in d["builds"] if b["build"] == "cold")
    rows = []
    for b in d["builds"]:
        c = b["ccache"]
        hits = c.get("direct_cache_hit", 0) + c.get("preprocessed_cache_hit", 0)
        rows.append([b["build"], fmt(b["wall_s"], "{:,.0f} s"), fmt(b["cpu_s"], "{:,.0f} CPU-s"),
                     fmt(b["wall_s"] / cold["wall_s"], "{:.2f}×"), hits, c.get("cache_miss", 0), same(b, cold)])
    return ["build", "wall", "CPU", "wall / cold", "ccache hits", "ccache misses", same_header], rows


def _ccache_rebuild(docs: list[Doc]) -> Body:
    """ccache_rebuild.py: build.sh cold, warm in a new directory, and with one flag changed."""
    return _ccache_table(docs, lambda b, cold: "yes" if b["ext_sha256"] == cold["ext_sha256"] else "no",
                         "_ext same as cold")


def _ccache_recipe(docs: list[Doc]) -> Body:
    """ccache_recipe.py: the recipe built through rattler-build twice with the CI's ccache wrapper."""
    def same(b, cold):
        ext, ref = b["ext"], cold["ext"]
        if ext["sha256"] == ref["sha256"]:
            return "yes"
        return "all but its build-id" if ext["sha256_without_build_id"] == ref["sha256_without_build_id"] else "no"

    return _ccache_table(docs, same, "packaged `_ext` same as cold")


def _ops_full(docs: list[Doc]) -> Body:
    """bench_ops.py --full on the recipe's package: every op torchvision also has, fp32 and fp16;
    with a second source, that earlier package's ratio beside each row."""
    before = {(o["op"], o["shape"], o["dtype"], o["pass"]): o for o in docs[1]["ops"]} if len(docs) > 1 else None
    rows = []
    for o in docs[0]["ops"]:
        tv = o.get("torchvision_us")
        row = [o["op"], o["shape"], o["dtype"], o["pass"], f"{o['mmcv_us']:,.1f}", fmt(tv, "{:,.1f}"),
               fmt(o.get("ratio_tv_over_mmcv"), "{:.2f}")]
        if before is not None:
            row.append(fmt((before.get((o["op"], o["shape"], o["dtype"], o["pass"])) or {}).get("ratio_tv_over_mmcv"), "{:.2f}"))
        rows.append(row)
    header = ["op", "shape", "dtype", "pass", "mmcv µs", "torchvision µs", "torchvision / mmcv"]
    return header + (["before: torchvision / mmcv"] if before is not None else []), rows


_SAME_WORK = (("nms", "mmcv: dets and indices; torchvision: indices"),
              ("nms_indices", "kept indices, both (mmcv's compiled op alone)"),
              ("nms_dets", "dets and indices, both"),
              ("batched_nms", "mmcv: dets and indices; torchvision: indices"),
              ("batched_nms_dets", "dets and indices, both"))


def _nms_same_work(docs: list[Doc]) -> Body:
    """bench_ops' nms rows at 100 and 1,000 boxes: the API against torchvision's, and each at the same
    work (the compiled op alone against torchvision's nms; the API against torchvision's followed by the
    same dets). From a `--paired` run (stage opsnmsci) each row also gives its pairs' median ratio and
    that median's 95% interval."""
    by = {(o["op"], o["shape"]): o for o in docs[0]["ops"]}
    paired = all("ratio_median_ci95" in o for o in docs[0]["ops"])
    rows = []
    for n in (100, 1000):
        for op, returns in _SAME_WORK:
            o = by[(op, f"{n} boxes, 80 classes, iou 0.5" if op.startswith("batched") else f"{n} boxes, iou 0.5")]
            row = [op, f"{n:,}", returns, f"{o['mmcv_us']:,.1f}", f"{o['torchvision_us']:,.1f}"]
            if paired:
                ci = o["ratio_median_ci95"]
                row += [f"{o['ratio_median_of_pairs']:.2f}", _range(ci) if ci else "- (under 6 pairs)", str(len(o["pairs"]))]
            else:
                row.append(f"{o['ratio_tv_over_mmcv']:.2f}")
            rows.append(row)
    header = ["row", "boxes", "what each side returns", "mmcv µs", "torchvision µs"]
    return header + (["torchvision / mmcv, median of pairs", "95% interval", "pairs"] if paired
                     else ["torchvision / mmcv"]), rows


_BATCHES = ("2", "8", "16")
_P10, _P3 = "0010-roi-align-half-backward-in-float", "0003-randperm-on-the-gallerys-device"
_P11 = "0011-deform-conv-half-backward-in-float"
_P12 = "0012-batched-nms-cuda-one-pass-to-20k"
_P19 = "0019-nms-dets-in-gather-kernel"
_P14, _P5 = "0014-nms-wrapper-fewer-passes", "0005-max-iou-assigner-on-the-device"
_P08, _P09 = "0008-rpn-proposals-batched", "0009-anchor-targets-batched"


def _detector_batches(docs: list[Doc]) -> Body:
    """bench_detector.py at batch 2, 8 and 16: mmdet's Faster R-CNN against torchvision's matched one;
    with three more sources (an earlier package's runs), its ratio beside each row."""
    now, before = docs[:len(_BATCHES)], docs[len(_BATCHES):]
    rows = []
    for i, (bs, d) in enumerate(zip(_BATCHES, now, strict=True)):
        mm, tv = d["results"]["mmdet"], d["results"]["torchvision-matched"]
        ok = all(r["losses_finite"] and r["loss_last"] < r["loss_first"] for r in (mm, tv))
        row = [bs, f"{mm['iters_per_s']:.2f}", " ".join(f"{x:.1f}" for x in mm["iters_per_s_all"]),
               f"{tv['iters_per_s']:.2f}", " ".join(f"{x:.1f}" for x in tv["iters_per_s_all"]),
               f"{mm['iters_per_s'] / tv['iters_per_s']:.2f}"]
        if before:
            b = before[i]["results"]
            row.append(f"{b['mmdet']['iters_per_s'] / b['torchvision-matched']['iters_per_s']:.2f}")
        rows.append([*row, f"{mm['iters_per_s'] * int(bs):.1f}", f"{tv['iters_per_s'] * int(bs):.1f}",
                           f"{mm['max_memory_mib']:,.0f} / {tv['max_memory_mib']:,.0f}", "both fall" if ok else "check losses"])
    return ["batch", "mmdet it/s", "per timing", "torchvision it/s", "per timing", "mmdet / torchvision",
            *(["before: mmdet / torchvision"] if before else []),
            "mmdet images/s", "torchvision images/s", "peak MiB (mmdet / tv)", "loss"], rows


_RETIME = "h200/detector-retime"
_RETIME_RUNS = (  # (call, design, batch, file): in the order they ran (README.md there)
    *(("1 (machine A)", "sequential", "2", f"sequential_bs2_{k}.json") for k in (1, 2, 3)),
    *(("2 (machine B)", "paired", bs, f"paired_bs{bs}.json") for bs in _BATCHES),
    *(("3 (machine B)", design, "8", f"{design}_bs8_{k}.json") for k in (1, 2) for design in ("sequential", "paired")),
)


def _retime_ratio(doc) -> tuple[float, list[float], float, float]:
    """(ratio, per-timing or per-pair ratios, mmdet it/s, torchvision it/s) of a bench_detector.py
    result: sequential, median over median, each timing against the other side's median; paired,
    the median of the pairs."""
    if "paired" in doc:
        p = doc["paired"]
        return (p["ratio_median_of_pairs"], [x["ratio"] for x in p["pairs"]],
                p["sides"]["mmdet"]["iters_per_s"], p["sides"]["torchvision-matched"]["iters_per_s"])
    mm, tv = doc["results"]["mmdet"], doc["results"]["torchvision-matched"]
    return (mm["iters_per_s"] / tv["iters_per_s"], [x / tv["iters_per_s"] for x in mm["iters_per_s_all"]],
            mm["iters_per_s"], tv["iters_per_s"])


def _detector_retime(docs: list[Doc]) -> Body:
    """bench_detector.py timed again: sequential (each side's timings in one block) and paired
    (ABBA-alternating timings in one process), on two machines."""
    rows = []
    for (call, design, bs, _), d in zip(_RETIME_RUNS, docs, strict=True):
        sides = d["paired"]["sides"] if "paired" in d else d["results"]
        ok = all(sides[s]["losses_finite"] and sides[s]["loss_fell"] for s in ("mmdet", "torchvision-matched"))
        ratio, each, mm, tv = _retime_ratio(d)
        rows.append([call, design, bs, f"{d['repeats']} x {d['iters']}", f"{mm:.2f}", f"{tv:.2f}", f"{ratio:.2f}",
                     f"{min(each):.2f}-{max(each):.2f}", "both fall" if ok else "check losses"])
    return ["call", "design", "batch", "timings x iterations", "mmdet it/s", "torchvision it/s", "mmdet / torchvision",
            "range (per timing / per pair)", "loss"], rows


def _retime_range(design: str, bs: str) -> str:
    return _range(_retime_ratio(load(f"{_RETIME}/{f}"))[0] for _, d, b, f in _RETIME_RUNS if d == design and b == bs)


# bench_detector.py --processes: (where it ran, file) in the order they ran; H200 rows join here
_PROCESSES = (("H100 (sm_90), mmdet to 0004, mmcv to 0013", "h100/perf-run1/detprocs_bs8_sm90.json"),
              ("H100 (sm_90), mmdet to 0004, mmcv to 0013", "h100/perf-run1/detprocs_bs16_sm90.json"),
              ("H100 (sm_90), + mmdet 0005-0006, mmcv 0014-0015", "h100/perf-run2/detprocs_bs8_sm90.json"),
              ("H100 (sm_90), + mmdet 0005-0006, mmcv 0014-0015", "h100/perf-run2/detprocs_bs16_sm90.json"),
              ("H100 (sm_90), + mmdet 0007, proposed 0008", "h100/perf-run4/detprocs_bs8_sm90.json"),
              ("H100 (sm_90), + mmdet 0007, proposed 0008", "h100/perf-run4/detprocs_bs16_sm90.json"),
              ("H100 (sm_90), mmdet build 3 (0001-0007), a slower host", "h100/perf-run5/detprocs_bs8_sm90.json"),
              ("H100 (sm_90), mmdet build 3 (0001-0007), a slower host", "h100/perf-run5/detprocs_bs16_sm90.json"),
              ("H100 (sm_90), mmdet build 4 (0001-0009), mmcv 0001-0015", "h100/perf-run9/detprocs_bs8_sm90.json"),
              ("H100 (sm_90), mmdet build 4 (0001-0009), mmcv 0001-0015", "h100/perf-run9/detprocs_bs16_sm90.json"),
              ("dev CPU, 2 cores", "cpu-dev/detprocs_cpu.json"))
DETECTOR_GOAL = 0.9  # issue 24 item 2: mmdet's it/s >= 0.9x torchvision's at matched settings
DETECTOR_PARITY = 1.0  # issue 43 item 1: >= 1.0x at batch 8 and 16, the interval above it


def against_goal(ci: list[float] | None, goal: float = DETECTOR_GOAL) -> str:
    """Whether a median's 95% interval settles ratio >= goal: met only when the whole interval
    lies at or above it, missed only when it lies below, otherwise not resolved."""
    if ci is None:
        return "no interval (too few pairs)"
    if ci[0] >= goal:
        return f"met (interval >= {goal})"
    if ci[1] < goal:
        return f"missed (interval < {goal})"
    return f"not resolved (interval spans {goal})"


def _detector_processes(docs: list[Doc]) -> Body:
    """bench_detector.py --processes: each side timed in fresh child processes, ABBA pairs; the
    median of the pair ratios with its distribution-free 95% interval, against the issue's goal
    (which is about the GPU: a CPU row gets no verdict)."""
    rows = []
    for (where, _), d in zip(_PROCESSES, docs, strict=True):
        p = d["processes"]
        mm, tv = (p["sides"][s] for s in ("mmdet", "torchvision-matched"))
        ok = all(x["losses_finite"] and x["loss_fell"] for x in (mm, tv))
        ci = p["ratio_median_ci95"]
        rows.append([where, f"{d['image_size']} px, batch {d['batch_size']}, " + ("AMP" if d["amp"] else "fp32"),
                     f"{len(p['pairs'])} pairs, {d['repeats']} x {d['iters']} each",
                     f"{mm['iters_per_s']:#.3g}", f"{tv['iters_per_s']:#.3g}", f"{p['ratio_median_of_pairs']:.2f}",
                     f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else MISSING, f"{p['ratio_min']:.2f}-{p['ratio_max']:.2f}",
                     *((against_goal(ci, g) for g in (DETECTOR_GOAL, DETECTOR_PARITY)) if d["device"].startswith("cuda")
                       else ["not the goal's setting (CPU)"] * 2),
                     "all fall" if ok else "check losses"])
    return ["where", "images", "children", "mmdet it/s", "torchvision it/s", "median of pair ratios", "95% interval",
            "pair range", f"goal >= {DETECTOR_GOAL}", f"goal >= {DETECTOR_PARITY}", "loss"], rows


GPU_TIME = "h100/recipe-run13/gpu_time.json"  # mmstack_lab.proof.gpu_time: before/after the CPU-GPU split, one H100
CPU_BUILD = "cpu-dev/proof-cpu-proposed90/P/build_time_sm90.json"  # the recipe's sm_90 build alone on 2 cores


def _gpu_seconds(side: Doc, key: str) -> str:
    return f"{side['seconds'][key]:,.0f} s ({side['run']})"


def _vs_torchvision(d: Doc, batch: int) -> str:
    """patch_ab --detector: mmdet over the matched torchvision on each side, released -> patched."""
    (r,) = [r for r in d["detector"] if r["batch_size"] == batch]
    ratio = [r[side]["mmdet"]["iters_per_s"] / r[side]["torchvision-matched"]["iters_per_s"] for side in ("released", "patched")]
    return f"{ratio[0]:.3f}× to {ratio[1]:.3f}×"


def _iteration_ops(framework: str, d: Doc) -> str:
    """detector_ops: the ops one training iteration of `framework` dispatches."""
    return "{:,}".format(_stage(d, framework, "iteration")["ops"])


def _targets_ops_0009(bs: int, d: Doc) -> str:
    """rpn.targets' ops with 0008 (detector_ops_p0008) and with 0008 and 0009 (d), at batch `bs`."""
    before = _stage(load(f"cpu-dev/detector_ops_p0008_bs{bs}.json"), "mmdet", "rpn.targets")["ops"]
    return f"{before:,} to {_stage(d, 'mmdet', 'rpn.targets')['ops']:,}"


def _proposals_ops_0008(bs: int, d: Doc) -> str:
    """rpn.proposals' ops with 0007 (detector_ops_p0007) and with 0007 and 0008 (d), at batch `bs`."""
    before = _stage(load(f"cpu-dev/detector_ops_p0007_bs{bs}.json"), "mmdet", "rpn.proposals")["ops"]
    return f"{before:,} to {_stage(d, 'mmdet', 'rpn.proposals')['ops']:,}"


def _torchvision_rate(d: Doc) -> float:
    """A --processes run's matched torchvision, iterations per second (how fast the host drives it)."""
    return float(d["processes"]["sides"]["torchvision-matched"]["iters_per_s"])


def _same_cases(module: str, d: Doc) -> str:
    """patch_ab --same MODULE: how many cases (and images) came out the same on both sides."""
    same = d["same"][module]
    images = same["summary"]["released"]["images"]
    n = same["cases"] - same["n_differing"]
    return f"{n} of {same['cases']} cases ({images:,} images)"


def _processes_ratio(d: Doc) -> str:
    """A --processes run's median pair ratio with its 95% interval, as prose."""
    return _pairs_ratio(d["processes"])


def _patch_processes_ratio(d: Doc) -> str:
    """patch_ab --detector-processes: patched / released, the median of the pairs with its 95% interval."""
    (row,) = d["detector_processes"]
    return _pairs_ratio(row)


def _pairs_ratio(p: Doc) -> str:
    lo, hi = p["ratio_median_ci95"]
    return f"{p['ratio_median_of_pairs']:.2f}× (95% interval {lo:.3f}-{hi:.3f})"


# detector_ops.py: ops per stage and the host waits in them (batch, file)
_DETECTOR_OPS = (("2", "cpu-dev/detector_ops_bs2.json"), ("8", "cpu-dev/detector_ops_bs8.json"))
_DETECTOR_OPS_GPU = (("2", "h100/perf-run1/detector_ops_bs2_sm90.json"), ("8", "h100/perf-run1/detector_ops_bs8_sm90.json"))
_OPS_STAGES = ("preprocess", "backbone+neck", "rpn", "rpn.targets", "rpn.loss", "rpn.proposals", "roi", "roi.targets",
               "roi.features", "roi.head", "roi.loss", "update", "iteration")


def _stage(doc, side: str, stage: str) -> dict:
    return doc["frameworks"][side]["stages"][stage]


def _detector_ops(docs: list[Doc]) -> Body:
    """detector_ops.py: per stage, the ops each side dispatches (views left out) and those the host
    would wait on under CUDA (on a CUDA run: those it waited on), at each batch size; mmdet's rpn.loss
    holds its rpn.targets."""
    rows = []
    for d in docs:
        bs = str(d["batch_size"])
        mm, tv = (d["frameworks"][s]["stages"] for s in ("mmdet", "torchvision"))
        for i, stage in enumerate(_OPS_STAGES):
            a, b = mm.get(stage), tv.get(stage)
            rows.append([bs if i == 0 else "", ("· " if "." in stage else "") + stage,
                         *(f"{x['ops']:,}" if x else MISSING for x in (a, b)),
                         f"{a['ops'] - b['ops']:+,}" if a and b else MISSING,
                         *(f"{x['host_waits']:,}" if x else MISSING for x in (a, b))])
    return ["batch", "stage", "mmdet ops", "torchvision ops", "mmdet - tv ops", "mmdet host waits",
            "torchvision host waits"], rows


def _patch_ab_times(docs: list[Doc]) -> Body:
    """patch_ab.py: an op's time released and patched (medians of the rounds), torchvision beside it."""
    rows = []
    for r in docs[0]["times"]:
        rows.append([r["op"], r["shape"], r["dtype"], r["pass"], f"{r['released_median_us']:,.1f}", f"{r['patched_median_us']:,.1f}",
                     f"{r['patched_over_released']:.2f}", fmt(r.get("torchvision_over_patched"), "{:.2f}")])
    return ["op", "shape", "dtype", "pass", "released µs", "patched µs", "patched / released", "torchvision / patched"], rows


def _patch_ab_grads(docs: list[Doc]) -> Body:
    """patch_ab.py: each input's gradient against the same computation in float64 (results from before
    patch_ab named the op and the input hold roi_align's input gradient)."""
    g = docs[0]["grads"]
    rows = []
    for rel, pat in zip(g["released"], g["patched"], strict=True):
        rows.append([rel.get("op", "roi_align"), rel["shape"], rel["dtype"], rel.get("grad_of", "input"),
                     f"{rel['grad_max_abs_err']:.3g}", f"{pat['grad_max_abs_err']:.3g}",
                     f"{rel['grad_mean_abs_err']:.3g}", f"{pat['grad_mean_abs_err']:.3g}", f"{rel['ref_max_abs']:.3g}"])
    return ["op", "shape", "dtype", "gradient of", "max abs error released", "patched", "mean abs error released", "patched",
            "largest gradient"], rows


def _patch_ab_detector(docs: list[Doc]) -> Body:
    """patch_ab.py --detector: mmdet's it/s with each patch reversed (released) and applied (patched)."""
    rows = []
    for d in docs:
        for r in d.get("detector", []):
            rel, pat = r["released"], r["patched"]
            drift = pat["torchvision-matched"]["iters_per_s"] / rel["torchvision-matched"]["iters_per_s"]
            rows.append([f"{d['package']} {d['patch'][:4]}", r["batch_size"],
                         f"{rel['mmdet']['iters_per_s']:.2f} ({' '.join(f'{x:.1f}' for x in rel['mmdet']['iters_per_s_all'])})",
                         f"{pat['mmdet']['iters_per_s']:.2f} ({' '.join(f'{x:.1f}' for x in pat['mmdet']['iters_per_s_all'])})",
                         fmt(r.get("mmdet_patched_over_released"), "{:.2f}"), f"{drift:.2f}",
                         "yes" if all(s["mmdet"]["losses_finite"] for s in (rel, pat)) else "no"])
    return ["patch", "batch", "released it/s (per timing)", "patched it/s (per timing)", "patched / released",
            "torchvision's own drift (same run)", "losses finite"], rows


_SEAMS = {"rpn": ("rpn.targets", "rpn.loss", "rpn.proposals"),
          "roi": ("roi.targets", "roi.features", "roi.head", "roi.loss")}


def _detector_stages(docs: list[Doc]) -> Body:
    """detector_stages.py: one iteration's GPU time per stage (CUDA events), mmdet and torchvision."""
    rows = []
    for bs, d in zip(_BATCHES, docs, strict=True):
        mm, tv = (d["frameworks"][k]["stages"] for k in ("mmdet", "torchvision"))
        gap = mm["iteration"]["gpu_ms"] - tv["iteration"]["gpu_ms"]
        order = ("preprocess", "backbone+neck", "rpn", *_SEAMS["rpn"], "roi", *_SEAMS["roi"], "update", "other", "iteration")
        for stage in order:
            if stage not in mm or stage not in tv:  # seams: results from before detector_stages had them
                continue
            a, b = mm[stage]["gpu_ms"], tv[stage]["gpu_ms"]
            rows.append([bs if stage == "preprocess" else "", f"· {stage}" if "." in stage else stage, f"{a:.1f}",
                         f"{b:.1f}", f"{a - b:+.1f}", f"{(a - b) / gap:+.0%}" if stage != "iteration" else "100%"])
    return ["batch", "stage", "mmdet ms", "torchvision ms", "mmdet - tv ms", "share of the gap"], rows


def _ladder_bench(docs: list[Doc]) -> Body:
    """bench_ladder.py: the ladder against a bare `import mmcv.ops` + one op, medians of one run."""
    d = docs[0]
    med, ratio = d["median"], d["ratio"]
    rows = []
    for key in ("bare", "bare-no-teardown", "L1-L4", "L1-L5", "cli"):
        if key not in med:
            continue
        interp = d.get("interpreters", {}).get(key)
        rows.append([key, len(d["seconds"][key]), fmt(med[key], "{:.2f} s"),
                     "1.00" if key == "bare" else fmt(ratio.get(f"{key}_over_bare"), "{:.2f}"),
                     fmt(ratio.get(f"{key}_over_bare-no-teardown"), "{:.2f}"),
                     fmt(max(interp) if interp else None, "{}")])
    return ["run", "runs", "median", "× bare", "× bare without interpreter shutdown", "interpreters (max)"], rows


def _arch_sets(docs: list[Doc]) -> Body:
    d = docs[0]
    names = {"per-gen": f"per-gen `{d['per_gen']}`", "fat": "fat", "fat+thr": "fat `--threads 0`",
             "fat+cmp": "fat `-Xfatbin -compress-all`"}
    rows = []
    for unit, configs in d["units"].items():
        for i, (key, r) in enumerate(configs.items()):
            rows.append([unit if i == 0 else "", names.get(key, key), r["runs"], f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}",
                         _mb(r["bytes"]), f"{r['wall_vs_per_gen']:.2f}", f"{r['size_vs_per_gen']:.2f}"])
    return ["unit", "config", "runs", "wall s", "CPU s", "object", "wall vs per-gen", "size vs per-gen"], rows


def _fat_vs_sm90(docs: list[Doc]) -> Body:
    """The recipe's fat build against its sm_90 build (issue 24 item 3): compile span against its
    parallel limit, the longest unit, the .conda size; docs: (sm_90 summary, fat summary)."""
    base = docs[0]["builds"]["sm90"]["packages"][0]["conda_bytes"]
    rows = []
    for d, tag in ((docs[0], "sm90"), (docs[1], "fat")):
        b = d["builds"][tag]
        c, pkg = b["compile"], b["packages"][0]
        rows.append([f"`{pkg['variant']['mmcv_arch_list']}`", f"{b['command_wall_s']:.0f} s", f"{b['command_cpu_s']:,.0f}",
                     c["units"], f"{c['unit_cpu_s']:,.0f}", f"`{c['longest_unit']['unit']}` {c['longest_unit']['s']:.0f} s",
                     f"{c['span_s']:.1f} s", f"{c['parallel_limit_s']:.1f} s", f"{c['span_over_limit']:.3f}×",
                     f"{pkg['conda_bytes']:,}", f"{pkg['conda_bytes'] / base:.2f}×", _upstream(b)])
    return ["arch list", "`mmstack build` wall", "CPU-s", "units", "unit CPU-s", "longest unit", "compile span",
            "parallel limit", "span / limit", ".conda bytes", "× sm_90", "upstream tests in the sandbox"], rows


# issue 24 item 3: the builds compared, each with its conda_sizes file where the package came back
FAT_VARIANTS = (("recipe-run7", "sm90", "conda_sizes_sm90.json"), ("recipe-run8", "sm90", "conda_sizes_sm90.json"),
                ("recipe-fat1", "fat", None), ("recipe-fat3", "fat", "conda_sizes.json"), ("recipe-fat2", "fat", "conda_sizes.json"))


def _fat_variants(docs: list[Doc]) -> Body:
    """The sm_90 and fat builds with the recipe's `-Xfatbin -compress-all` and with the flags a run
    added (NVCC_EXTRA): time, compile span, the .conda and its device code; docs: summaries then
    conda_sizes files, in FAT_VARIANTS order (those with one)."""
    summaries, sizes = docs[:len(FAT_VARIANTS)], iter(docs[len(FAT_VARIANTS):])
    rows = []
    for (run, tag, sizes_file), d in zip(FAT_VARIANTS, summaries, strict=True):
        b = d["builds"][tag]
        c, pkg = b["compile"], b["packages"][0]
        device = next(sizes)["packages"][0]["nv_fatbin_bytes"] if sizes_file else None
        rows.append([run, f"`{pkg['variant']['mmcv_arch_list']}`", "`-Xfatbin -compress-all`" + (f" `{d['nvcc_extra']}`" if d["nvcc_extra"] else ""),
                     f"{b['command_wall_s']:.0f} s", f"{c['unit_cpu_s']:,.0f}", f"`{c['longest_unit']['unit']}` {c['longest_unit']['s']:.0f} s",
                     f"{c['span_over_limit']:.3f}×", f"{pkg['conda_bytes']:,}", f"{device:,}" if device else MISSING,
                     _upstream(b), ", ".join(f"{k} {v['status']}" for k, v in b["sandbox_ladder"]["levels"].items())])
    return ["run", "arch list", "nvcc fatbin flags", "`mmstack build` wall", "unit CPU-s", "longest unit", "span / limit",
            ".conda bytes", "device code (`.nv_fatbin`)", "upstream tests in the sandbox", "sandbox ladder on the GPU"], rows


def _fatbin_compress(docs: list[Doc]) -> Body:
    """bench_arch_sets.py --config ...: the device code of a unit under each fatbin compression."""
    d = docs[0]
    names = {"per-gen": f"`{d['per_gen']}` uncompressed", "per-gen+cmp": f"`{d['per_gen']}` `-Xfatbin -compress-all` (recipe, CUDA 12)",
             "per-gen+size": f"`{d['per_gen']}` + `--compress-mode=size` (recipe, CUDA 13)",
             "fat+cmp": "fat `-Xfatbin -compress-all` (recipe, CUDA 12)", "fat+size": "fat + `--compress-mode=size` (recipe, CUDA 13)"}
    rows = []
    for unit, configs in d["units"].items():
        base = configs["per-gen+cmp"]["fatbin_bytes"]
        for i, (key, r) in enumerate(configs.items()):
            cmp = configs.get(key.replace("+size", "+cmp")) if key.endswith("+size") else None
            rows.append([unit if i == 0 else "", names.get(key, key), f"{r['cpu_s']:.1f}", f"{r['bytes']:,}", f"{r['fatbin_bytes']:,}",
                         f"{r['fatbin_bytes'] / base:.2f}", f"{r['fatbin_bytes'] / cmp['fatbin_bytes']:.2f}" if cmp else ""])
    return ["unit", "config", "CPU s", "object bytes", "device code bytes", "× `9.0` compress-all", "size / compress-all"], rows


# -- the current numbers (docs/performance.md): the newest run of each build, package and op ------------

# (run, build tag): the newest build of each kind, with the flags build.sh gives it today
CURRENT_BUILDS = (("recipe-run9", "sm90"), ("recipe-fat2", "fat"), ("recipe-run5", "ptx"),
                  ("recipe-run9", "noarch"), ("recipe-run9", "mmdet"))
# (run, conda_sizes file): the newest measured package of each arch set, both with `--compress-mode=size`
CURRENT_SIZES = (("recipe-run9", "conda_sizes_sm90.json"), ("recipe-fat2", "conda_sizes.json"))


def _current_builds(docs: list[Doc]) -> Body:
    """One row per CURRENT_BUILDS entry (docs: their summary.json files, in that order)."""
    rows = []
    for (run, tag), d in zip(CURRENT_BUILDS, docs, strict=True):
        b = d["builds"][tag]
        c = b.get("compile") or {}
        longest = c.get("longest_unit")
        rows.append([_RECIPE_ARCH.get(tag, tag), run, fmt(b.get("command_wall_s"), "{:.0f} s"),
                     fmt(b.get("command_cpu_s"), "{:,.0f}"), fmt(c.get("units"), "{}"),
                     f"`{longest['unit']}` {longest['s']:.0f} s" if longest else MISSING,
                     fmt(c.get("span_s"), "{:.0f} s"), fmt(c.get("span_over_limit"), "{:.3f}×"),
                     fmt(b.get("sandbox_test_s"), "{:.0f} s"), fmt(c.get("cores"), "{}")])
    return ["build", "run", "`mmstack build` wall", "CPU-s", "compile units", "longest unit", "compile span",
            "span / parallel limit", "sandbox tests", "cores"], rows


def _current_sizes(docs: list[Doc]) -> Body:
    """One row per CURRENT_SIZES entry (docs: their conda_sizes files): where the package's bytes are."""
    base = docs[0]["packages"][0]["conda_bytes"]
    rows = []
    for (run, _), d in zip(CURRENT_SIZES, docs, strict=True):
        pkg = d["packages"][0]
        archs = pkg.get("stored_by_arch") or {}
        rows.append([f"`{pkg['file']}`", run, _mb(pkg["conda_bytes"]), f"{pkg['conda_bytes'] / base:.2f}×",
                     _mb(pkg["pkg_uncompressed_bytes"]), _mb(pkg["ext_bytes"]), _mb(pkg["nv_fatbin_bytes"]),
                     ", ".join(f"{a} {_mb(archs[a])}" for a in sorted(archs, key=lambda a: tuple(map(int, a.split("."))))) or MISSING])
    return ["package", "run", ".conda", "× sm_90", "installed", "`_ext`", "device code in `_ext`",
            "device code per SASS target"], rows


# (run, build tag): the newest installed-prefix ladder of each kind of CUDA build
CURRENT_LADDERS = (("recipe-run9", "sm90"), ("recipe-run5", "ptx"))


def _current_ladders(docs: list[Doc]) -> Body:
    """`mmstack verify --expect-gpu --levels L1..L5` in a prefix installed from the channel: seconds per level."""
    rows = []
    for (run, tag), d in zip(CURRENT_LADDERS, docs, strict=True):
        r = (d.get("installed_prefix_ladder") or {}).get(tag) or {}
        levels = r.get("levels") or {}
        rows.append([_RECIPE_ARCH.get(tag, tag), run,
                     *(f"{levels[lv]['status']} {levels[lv]['seconds']:.1f} s" if lv in levels else MISSING
                       for lv in ("L1", "L2", "L3", "L4", "L5")),
                     fmt(r.get("seconds"), "{:.1f} s")])
    return ["build", "run", "L1", "L2", "L3", "L4", "L5", "all"], rows


def _cpu_detector(docs: list[Doc]) -> Body:
    d = docs[0]
    rows = []
    for r in d["result"]["results"]:
        rows.append([r["model"], ", ".join(r["deformable_ops"]) or "-", f"{r['image_size']} px × {r['batch_size']}",
                     r["iters"], " ".join(f"{x:.4f}" for x in r["losses"]),
                     _losses(r["loss_parts"][0]["loss_cls"], r["loss_parts"][-1]["loss_cls"]),
                     "PASS" if r["passed"] else "FAIL", f"{r['iters_per_s']:.3f}"])
    return ["model", "deformable ops", "images", "iterations", "loss per iteration", "loss_cls", "L5", "it/s"], rows


def _checkpoints(docs: list[Doc]) -> Body:
    """L6 (the checkpoint cycle), one row per model and phase: pass, its seconds, what it showed."""
    (level,) = docs[0]["levels"]
    rows = []
    for cycle in level["evidence"]["checkpoints"]:
        for name, ph in cycle["phases"].items():
            detail = ""
            if name == "resume":
                detail = (f"iteration {ph['start_iter'] + 1}: {ph['losses'][0]:.6g} vs {ph['first_run_losses'][0]:.6g}; "
                          f"worst relative difference {ph['loss_rel_diff']:.2g}")
            elif name in ("load", "test"):
                fp = ph.get("predicted") or {k.split("/")[-1]: v for k, v in (ph.get("test") or {}).items()}
                detail = f"{fp.get('count')} predictions, sum {fp.get('sum'):.6g}" if fp else ""
            rows.append([cycle["model"], cycle["device"], name, "pass" if ph["passed"] else "FAIL",
                         f"{ph.get('seconds', 0):.1f}", detail or ph.get("reason", "")[:80]])
    return ["model", "device", "phase", "result", "seconds", "what it showed"], rows



# -- CI's build cost per release (issue 42 item 2): the matrix's rows x the measured builds -------------

def _cost_sources() -> list[str]:
    from mmstack.variants.ci_cost import load_costs

    return [r.result.removeprefix("lab/results/") for r in load_costs().cost]


def _costs_from(docs: list[Doc]) -> Costs:
    """mmstack's cost rows with each number read from its committed result (not from the toml)."""
    from mmstack.variants.ci_cost import Costs, load_costs

    rows = load_costs().cost
    return Costs(cost=tuple(r.model_copy(update={"cpu_s": _seconds(d, r.result, r.field)}) for r, d in zip(rows, docs, strict=True)))


def _seconds(doc: Doc, source: str, path: str) -> float:
    value = get(doc, path)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{source}: {path} is {value!r}, not a number of seconds (data/build_costs.toml names it)")
    return float(value)


def _matrix():
    from mmstack.facts.gpus import load as load_facts
    from mmstack.variants.matrix import CONFIG_FILE, load_matrix

    return load_matrix(load_facts(), ROOT / CONFIG_FILE)


def _ci_cost(docs: list[Doc]) -> Body:
    """Per pytorch row and kind of build: how many variants, the measured CPU seconds of one, the
    CPU-hours per release; then the release, and what per-generation builds for the pin would add."""
    from mmstack.facts.pytorch import load_pytorch
    from mmstack.variants.ci_cost import kind_of, release_cost

    costs, matrix, torch = _costs_from(docs), _matrix(), load_pytorch()
    rows: list[list[object]] = []
    for pt in sorted({v.pytorch for v in matrix}):
        for kind in ("cpu", "generation", "fat"):
            n = sum(1 for v in matrix if v.pytorch == pt and kind_of(v) == kind)
            if n:
                each = costs.seconds(kind)
                rows.append([torch.label(pt), kind, n, f"{each:,.0f}", f"{n * each / 3600:.1f}"])
    total = release_cost(matrix, costs)
    rows.append(["noarch (mmstack, mmengine, mmdet)", "noarch", 3, f"{costs.seconds('noarch'):,.0f}",
                 f"{total.noarch_hours:.2f}"])
    rows.append(["per release", "all", total.variants, "", f"{total.hours:.1f}"])
    gens = {v.arch_tag for v in matrix if kind_of(v) == "generation"}
    pin = [r.version for r in torch.pytorch if r.role == "pin"]
    pythons = {v.python for v in matrix if v.pytorch in pin}
    extra = len(gens) * len(pythons)
    rows.append(["if the pin took per-generation builds too", "generation", f"+{extra}", f"{costs.seconds('generation'):,.0f}",
                 f"+{extra * costs.seconds('generation') / 3600:.1f}"])
    return ["pytorch", "build", "variants", "CPU-s each", "CPU-hours per release"], rows


def _ci_hours(_doc) -> float:
    from mmstack.variants.ci_cost import release_cost

    return release_cost(_matrix(), _costs_from([load(s) for s in _cost_sources()])).hours


def _ci_variants(_doc) -> int:
    return len(_matrix())


def _upstream_noarch(docs: list[Doc]) -> Body:
    """Per noarch recipe: upstream's tests in its test section (counts, skips with reasons, deselected, seconds)."""
    rows: list[list[object]] = []
    for pkg in docs[0]["packages"]:
        for t in pkg["test_results"]:
            if t.get("kind") != "upstream-tests":
                continue
            c = t["counts"]
            skips = "; ".join(f"{s['tests']}: {s['reason']}" for s in t["skip_reasons"]) or "-"
            rows.append([pkg["name"], f"`{t['path']}`", c["passed"], c["failed"] + c["error"], f"{c['skipped']} ({skips})",
                         t["deselected"], f"{t['seconds']:.0f}", f"{pkg['seconds']:.0f}"])
    return (["recipe", "upstream tests", "passed", "failed", "skipped (reason)", "deselected", "test s",
             "whole build s"], rows)


TABLES: dict[str, Table] = {
    "ci-cost": Table(sources=_cost_sources(), build=_ci_cost),
    "upstream-noarch": Table(sources=["cpu-dev/upstream-tests-noarch/build.json"], build=_upstream_noarch),
    "build-time": Table(sources=[f"h200/{r}/summary.json" for r, _ in CURRENT_BUILDS], build=_current_builds),
    "package-size": Table(sources=[f"h200/{r}/{f}" for r, f in CURRENT_SIZES], build=_current_sizes),
    "verify-time": Table(sources=[f"h200/{r}/summary.json" for r, _ in CURRENT_LADDERS], build=_current_ladders),
    "ops-now": Table(sources=["h200/recipe-run6/ops_full_sm90.json"], build=_ops_full),
    "gpu-checkpoints": Table(sources=["h100/recipe-run11/ckpt_sm90.json"], build=_checkpoints),
    "h200-machine": Table(sources=[f"{d}/doctor_sm90.json" for d in H200.values()], build=_h200_machine),
    "h200-build": Table(sources=[f"{d}/{f}" for d in H200.values() for f in ("build_time_sm90.json", "units_sm90.json")],
                        build=_h200_build),
    "h200-size": Table(sources=[f"{d}/{f}" for d in H200.values() for f in ("fatbin_sm90.json", "cuobjdump_sm90.txt")]
                       + ["h200/run2-fixed/size_sm90.txt"], build=_h200_size),
    "h200-ops": Table(sources=[f"{d}/ops_sm90.json" for d in H200.values()], build=_h200_ops),
    "h200-l4": Table(sources=["h200/run2-fixed/verify_sm90.json"], build=_h200_l4),
    "h200-startup": Table(
        sources=["h200/run2-fixed/startup_sm90.json"], rows="",
        columns=[("processes", "runs", lambda v: str(len(v))),
                 ("torch init (+CUDA context)", "median.torch_init_s", "{:.2f} s"),
                 ("`import mmcv.ops`", "median.import_mmcv_ops_s", "{:.2f} s"),
                 ("first kernel (roi_align)", "median.first_kernel_s", lambda v: f"{v * 1000:.1f} ms"),
                 ("total", "median.total_s", "{:.1f} s")]),
    "h200-ladder": Table(sources=[f"{d}/verify_sm90.json" for d in H200.values()], build=_h200_ladder),
    "h200-detector": Table(sources=["h200/run2-fixed/detector_sm90.json"], build=_h200_detector),
    "h200-dist1": Table(sources=["h200/run2-fixed/dist1_sm90.json"], build=_dist1),
    "h200-recipe-builds": Table(sources=["h200/recipe-run1/summary.json"], build=_recipe_builds),
    "h200-recipe-prefix": Table(sources=["h200/recipe-run1/summary.json"], build=_recipe_prefix),
    "h200-recipe2-builds": Table(sources=["h200/recipe-run2/summary.json"], build=_recipe_builds),
    "h200-recipe2-prefix": Table(sources=["h200/recipe-run2/summary.json"], build=_recipe_prefix),
    "h200-recipe3-builds": Table(sources=["h200/recipe-run3/summary.json"], build=_recipe_builds),
    "h200-recipe3-prefix": Table(sources=["h200/recipe-run3/summary.json"], build=_recipe_prefix),
    "h200-recipe4-builds": Table(sources=["h200/recipe-run4/summary.json"], build=_recipe_builds),
    "h200-recipe4-prefix": Table(sources=["h200/recipe-run4/summary.json"], build=_recipe_prefix),
    "h200-recipe5-builds": Table(sources=["h200/recipe-run5/summary.json"], build=_recipe_builds),
    "h200-recipe5-prefix": Table(sources=["h200/recipe-run5/summary.json"], build=_recipe_prefix),
    "h200-recipe5-ladder": Table(sources=["h200/recipe-run5/bench_ladder_sm90.json"], build=_ladder_bench),
    "h200-recipe6-builds": Table(sources=["h200/recipe-run6/summary.json"], build=_recipe_builds),
    "h200-recipe6-prefix": Table(sources=["h200/recipe-run6/summary.json"], build=_recipe_prefix),
    "h200-recipe7-builds": Table(sources=["h200/recipe-run7/summary.json", "h200/recipe-fat1/summary.json"],
                                 build=_recipe_builds),
    "h200-recipe7-prefix": Table(sources=["h200/recipe-run7/summary.json"], build=_recipe_prefix),
    "h200-fat-build": Table(sources=["h200/recipe-run7/summary.json", "h200/recipe-fat1/summary.json"], build=_fat_vs_sm90),
    "h200-fat-variants": Table(sources=[f"h200/{r}/summary.json" for r, _, _ in FAT_VARIANTS]
                               + [f"h200/{r}/{s}" for r, _, s in FAT_VARIANTS if s], build=_fat_variants),
    "h200-recipe9-builds": Table(sources=["h200/recipe-run9/summary.json"], build=_recipe_builds),
    "h200-patchab-nms": Table(sources=[f"h200/recipe-run9/patchab_mmcv-{_P12}.json"], build=_patch_ab_times),
    "h200-patchab-deform": Table(sources=[f"h200/recipe-run7/patchab_mmcv-{_P11}.json"], build=_patch_ab_times),
    "h200-patchab-deform-grads": Table(sources=[f"h200/recipe-run7/patchab_mmcv-{_P11}.json"], build=_patch_ab_grads),
    "h200-patchab-roi-align": Table(sources=[f"h200/recipe-run6/patchab_mmcv-{_P10}.json"], build=_patch_ab_times),
    "h200-patchab-grads": Table(sources=[f"h200/recipe-run6/patchab_mmcv-{_P10}.json"], build=_patch_ab_grads),
    "h200-patchab-detector": Table(sources=[f"h200/recipe-run6/patchab_mmcv-{_P10}.json",
                                            f"h200/recipe-run6/patchab_mmdet-{_P3}.json"], build=_patch_ab_detector),
    "h200-ops-full": Table(sources=["h200/recipe-run6/ops_full_sm90.json", "h200/recipe-run5/ops_full_sm90.json"],
                           build=_ops_full),
    "h200-detector-batches": Table(sources=[f"h200/recipe-run{r}/detector_bs{bs}_sm90.json" for r in (6, 5) for bs in _BATCHES],
                                   build=_detector_batches),
    "h200-detector-retime": Table(sources=[f"h200/detector-retime/{f}" for *_, f in _RETIME_RUNS], build=_detector_retime),
    "detector-processes": Table(sources=[f for _, f in _PROCESSES], build=_detector_processes),
    "detector-ops": Table(sources=[f for _, f in _DETECTOR_OPS], build=_detector_ops),
    "detector-ops-gpu": Table(sources=[f for _, f in _DETECTOR_OPS_GPU], build=_detector_ops),
    "h100-nms-same-work-ci": Table(sources=["h100/perf-run18/ops_nms_paired_sm90.json"], build=_nms_same_work),
    "h100-patchab-nms-0019": Table(sources=[f"h100/perf-run17/patchab_mmcv-{_P19}.json"], build=_patch_ab_times),
    "h100-patchab-nms": Table(sources=[f"h100/perf-run2/patchab_mmcv-{_P14}.json"], build=_patch_ab_times),
    "h100-patchab-detector": Table(sources=[f"h100/perf-run1/patchab_mmdet-{_P5}.json"], build=_patch_ab_detector),
    "h200-detector-stages": Table(sources=[f"h200/recipe-run6/stages_bs{bs}_sm90.json" for bs in _BATCHES],
                                  build=_detector_stages),
    "h200-nms-anatomy": Table(sources=["h200/nms-anatomy-1/nms_anatomy.json"], build=_nms_anatomy),
    "h200-nms-anatomy-2": Table(sources=["h200/nms-anatomy-2/nms_anatomy.json"], build=_nms_anatomy),
    "h200-l4-vs-upstream": Table(sources=["h200/recipe-run9/l4complete_sm90.json"], build=_l4_vs_upstream),
    "cpu-ladder": Table(sources=["cpu-dev/ladder.json"], build=_ladder_bench),
    "cpu-ccache-rebuild": Table(sources=["cpu-dev/ccache_rebuild.json"], build=_ccache_rebuild),
    "cpu-ccache-recipe": Table(sources=["cpu-dev/ccache_recipe.json"], build=_ccache_recipe),
    "cpu-arch-sets": Table(sources=["cpu-dev/arch_sets.json"], build=_arch_sets),
    "cpu-fatbin-compress": Table(sources=["cpu-dev/fatbin_compress.json"], build=_fatbin_compress),
    "cpu-detector": Table(sources=["cpu-dev/detector_cpu.json"], build=_cpu_detector),
}

_R5, _R6, _R7, _FAT = "h200/recipe-run5", "h200/recipe-run6", "h200/recipe-run7", "h200/recipe-fat1"
_R8, _FAT2, _FAT3 = "h200/recipe-run8", "h200/recipe-fat2", "h200/recipe-fat3"  # this lease: size mode, --threads 0


def _op(doc, op, shape_start, dtype="float32", passes="forward"):
    return next(o for o in doc["ops"] if o["op"] == op and o["shape"].startswith(shape_start)
                and o["dtype"] == dtype and o["pass"] == passes)


def _profile(doc, side="mmdet"):
    return doc["results"][side]


def _stage_ratio_range(run, key="iters_per_s"):
    """min-max over batch sizes of mmdet/torchvision for a detector_bs*.json key."""
    ratios = [load(f"{run}/detector_bs{bs}_sm90.json")["results"] for bs in _BATCHES]
    return _range(r["mmdet"][key] / r["torchvision-matched"][key] for r in ratios)


def _range(values, spec="{:.2f}"):
    values = list(values)
    return f"{spec.format(min(values))}-{spec.format(max(values))}"


def _fp16_fwd_bwd(doc, op, key="ratio_tv_over_mmcv", rows="ops"):
    return [o[key] for o in doc[rows] if o["op"] == op and o["dtype"] == "float16" and o["pass"] == "forward+backward"]


def _upstream_counts(doc):
    sides = {side: doc["upstream"][side]["counts"] for side in ("released", "patched")}
    c = sides["patched"]
    text = f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped"
    return text + (" on both sides" if sides["released"] == c else f" (released: {sides['released']})")


def _build(run: str, tag: str = "fat") -> dict:
    """A gpu-proof run's build of `tag` from its summary.json."""
    return load(f"{run}/summary.json")["builds"][tag]


def _fat_per_target(fat_summary) -> float:
    """(fat .conda - sm_90 .conda) / (targets - 1): what one more SASS target adds to the package."""
    fat = fat_summary["builds"]["fat"]["packages"][0]
    sm90 = load(f"{_R7}/summary.json")["builds"]["sm90"]["packages"][0]
    return (fat["conda_bytes"] - sm90["conda_bytes"]) / (len(fat["variant"]["mmcv_arch_list"].split(";")) - 1)


def _size_ratios(bench, arch_set: str) -> list[float]:
    """bench_arch_sets.py: per unit, the device code with --compress-mode=size over -compress-all's."""
    return [r[arch_set + "+size"]["fatbin_bytes"] / r[arch_set + "+cmp"]["fatbin_bytes"] for r in bench["units"].values()]


def _size_mode_device_ratios(fat2_sizes) -> list[float]:
    """Per arch, the device code stored with --compress-mode=size over -compress-all's: the fat
    packages of one machine (recipe-fat2, recipe-fat3) and the two sm_90 ones (run8, run7)."""
    size, cmp_ = fat2_sizes["packages"][0], load(f"{_FAT3}/conda_sizes.json")["packages"][0]
    sm90 = [load(f"{r}/conda_sizes_sm90.json")["packages"][0]["stored_by_arch"]["9.0"] for r in (_R8, _R7)]
    return [size["stored_by_arch"][a] / cmp_["stored_by_arch"][a] for a in size["stored_by_arch"]] + [sm90[0] / sm90[1]]


def _size_projection(bench) -> float:
    """The fat/sm_90 .conda ratio with --compress-mode=size: both packages' non-device bytes as the
    sm_90 one's, device code scaled by the bench's median size/compress-all ratio per arch set."""
    sizes = load(f"{_R7}/conda_sizes_sm90.json")["packages"][0]
    fat_conda = load(f"{_FAT}/summary.json")["builds"]["fat"]["packages"][0]["conda_bytes"]
    host = sizes["conda_bytes"] - sizes["nv_fatbin_bytes"]
    ratio = {k: statistics.median(_size_ratios(bench, k)) for k in ("per-gen", "fat")}
    return (host + (fat_conda - host) * ratio["fat"]) / (host + sizes["nv_fatbin_bytes"] * ratio["per-gen"])


# Values made per loop item take the item first (functools.partial binds it) and the doc last.

def _retime_value(design: str, bs: str, _doc: Doc) -> str:
    return _retime_range(design, bs)


def _retime_call3_mmdet(design: str, _doc: Doc) -> str:
    return " and ".join(f"{_retime_ratio(load(f'{_RETIME}/{design}_bs8_{k}.json'))[2]:.2f}" for k in (1, 2))


def _batched_nms_10k(key: str, doc: Doc) -> object:
    return next(r for r in doc["times"] if r["op"] == "batched_nms" and r["shape"].startswith("10000 "))[key]


def _ops_and_waits(stage: str, doc: Doc) -> str:
    return "{} against {} ops, {} against {} host waits".format(
        *(_stage(doc, side, stage)[k] for k in ("ops", "host_waits") for side in ("mmdet", "torchvision")))


def _unit_cpu_over(base: str, _doc: Doc) -> float:
    return _build(_FAT3)["compile"]["unit_cpu_s"] / _build(base)["compile"]["unit_cpu_s"]


_CB = "tests/data/conda_build_build/comparison.json"  # the real conda-build's build, recorded


def _cb_upstream(doc: Doc) -> str:
    u = doc["tests"]["conda_build"]["upstream"]
    return f"{u['passed']} passed, {u['failed']} failed, {u['skipped']} skipped"


_PAIR16 = "cpu-dev/proof-cpu-pair16"  # the sm_90 build without (A) and with (B) mmcv 0016, side by side


def _pair_seconds(pair: str, sides: tuple[str, str]) -> tuple[float, float]:
    """A build pair's CPU seconds, without and with the patch."""
    a, b = (load(f"{pair}/{side}/build_time_sm90.json")["cpu_s"] for side in sides)
    return a, b


def _pair_cpu(pair: str, sides: tuple[str, str]) -> str:
    a, b = _pair_seconds(pair, sides)
    return f"{a:,.1f} -> {b:,.1f} CPU-s, {b / a:.3f}"


# the pairs of issue 43 item 3, each the sm_90 build without and with the patch it adds (docs value name ->
# folder, the two sides): 0015 (A, P), 0016 (A, B), 0018 with the Python-only 0017 (A, B)
_BUILD_PAIRS = {"cpu-pair15-build-cpu": ("cpu-dev/proof-cpu-proposed90", ("A", "P")),
                "cpu-pair16-build-cpu": (_PAIR16, ("A", "B")),
                "cpu-pair18-build-cpu": ("cpu-dev/proof-cpu-pair18", ("A", "B"))}


def _pair_value(pair: str, sides: tuple[str, str]) -> Value:
    """The docs value of one build pair: read from its patched side, computed from both."""
    def compute(_doc: Doc) -> str:
        return _pair_cpu(pair, sides)
    return Value(f"{pair}/{sides[1]}/build_time_sm90.json", compute=compute)


def _pairs_chained(_doc: Doc) -> str:
    ratio = 1.0
    for pair, sides in _BUILD_PAIRS.values():
        a, b = _pair_seconds(pair, sides)
        ratio *= b / a
    return f"{ratio:.3f} ({(1 - ratio) * 100:.1f}% less)"


_CONDA_SOLVES = "tests/data/solver_selection/conda.json"  # the real conda's answers over the recipe's builds


def _mmcv_build_numbers(doc: Doc) -> str:
    """The build numbers the real conda saw on the channel of the recipe's builds (the CPU build's is the
    recipe's base): `CPU 1, fat 101, per-generation 201 (sm_80) to 701 (sm_120)`."""
    import re

    seen = {a["build"]: a["build_number"] for a in doc["answers"]
            if a.get("build", "").startswith(("cpu_", "cuda")) and not a["id"].endswith("-unguarded")}
    (cpu,) = {n for b, n in seen.items() if b.startswith("cpu_")}
    (fat,) = {n for b, n in seen.items() if "_all_" in b}
    gens = sorted((n, m.group(1)) for b, n in seen.items() if (m := re.search(r"_sm(\d+)_", b)))
    return f"CPU {cpu}, fat {fat}, per-generation {gens[0][0]} (sm_{gens[0][1]}) to {gens[-1][0]} (sm_{gens[-1][1]})"


_E2E_310 = "cpu-dev/e2e_py310_noarch_job.json"  # tests/test_build_e2e.py -k python_min's noarch job (issue 42)


VALUES: dict[str, Value] = {
    "cb-build-seconds": Value(_CB, "build_seconds"),
    **{name: _pair_value(pair, sides) for name, (pair, sides) in _BUILD_PAIRS.items()},
    "cpu-build-cpu-chained": Value("cpu-dev/proof-cpu-pair18/B/build_time_sm90.json", compute=_pairs_chained),
    "cb-rattler-seconds": Value(_CB, "rattler_build_seconds"),
    "cb-build-string": Value(_CB, "index.conda_build.build", spec="`{}`"),
    "mmcv-base-build-number": Value(_CONDA_SOLVES, compute=lambda d: next(
        a["build_number"] for a in d["answers"] if a.get("build", "").startswith("cpu_"))),
    "mmcv-build-numbers": Value(_CONDA_SOLVES, compute=_mmcv_build_numbers),
    "cb-common-files": Value(_CB, "files.common"),
    "cb-ext-bytes": Value(_CB, "packages.conda_build.ext_size", spec="{:,}"),
    "cb-rattler-ext-bytes": Value(_CB, "packages.rattler_build.ext_size", spec="{:,}"),
    "cb-package-mb": Value(_CB, compute=lambda d: _mb(d["packages"]["conda_build"]["size"])),
    "cb-rattler-package-mb": Value(_CB, compute=lambda d: _mb(d["packages"]["rattler_build"]["size"])),
    "cb-upstream": Value(_CB, compute=_cb_upstream),
    "ci-cpu-hours": Value(_cost_sources()[0], spec="{:.1f}", compute=_ci_hours),
    "e2e-py313-passed": Value("cpu-dev/e2e_py313_cpu.json", "upstream_tests.counts.passed"),
    "e2e-py313-failed": Value("cpu-dev/e2e_py313_cpu.json", "upstream_tests.counts.failed"),
    "e2e-py313-skipped": Value("cpu-dev/e2e_py313_cpu.json", "upstream_tests.counts.skipped"),
    "e2e-py313-minutes": Value("cpu-dev/e2e_py313_cpu.json", "wall_s", compute=lambda d: round(d["wall_s"] / 60)),
    "e2e-py310-mmengine-passed": Value(_E2E_310, "upstream_tests.mmengine.counts.passed"),
    "e2e-py310-mmengine-failed": Value(_E2E_310, "upstream_tests.mmengine.counts.failed"),
    "e2e-py310-noarch-s": Value(_E2E_310, "seconds.noarch_job"),
    "e2e-py310-standin-s": Value(_E2E_310, "seconds.stand_in_channel_py310"),
    "ci-variants": Value(_cost_sources()[0], compute=_ci_variants),
    "h200-r5-roi-align-fp16-bwd-range": Value(f"{_R5}/ops_full_sm90.json",
                                              compute=lambda d: _range(_fp16_fwd_bwd(d, "roi_align"))),
    "h200-roi-align-fp16-bwd-range": Value(f"{_R6}/ops_full_sm90.json",
                                           compute=lambda d: _range(_fp16_fwd_bwd(d, "roi_align"))),
    "h200-deform-fp16-bwd-ratio": Value(f"{_R6}/ops_full_sm90.json", spec="{:.2f}",
                                        compute=lambda d: _fp16_fwd_bwd(d, "deform_conv2d")[0]),
    "h200-patchab-0010-range": Value(f"{_R6}/patchab_mmcv-{_P10}.json",
                                     compute=lambda d: _range(_fp16_fwd_bwd(d, "roi_align", "patched_over_released", "times"))),
    "h200-patchab-0010-upstream": Value(f"{_R6}/patchab_mmcv-{_P10}.json", compute=_upstream_counts),
    "h200-batched-nms-10k-ratio": Value(f"{_R6}/ops_full_sm90.json", spec="{:.2f}",
                                        compute=lambda d: _op(d, "batched_nms", "10000 ")["ratio_tv_over_mmcv"]),
    "h200-nms-100-ratio": Value(f"{_R6}/ops_full_sm90.json", spec="{:.2f}",
                                compute=lambda d: _op(d, "nms", "100 ")["ratio_tv_over_mmcv"]),
    **{f"h200-retime-{design}-bs{bs}": Value(f"{_RETIME}/{f}", compute=partial(_retime_value, design, bs))
       for design, bs, f in (("sequential", "2", "sequential_bs2_1.json"), ("sequential", "8", "sequential_bs8_1.json"),
                             ("paired", "8", "paired_bs8.json"))},
    "h200-retime-paired-range": Value(f"{_RETIME}/paired_bs2.json", compute=lambda _d: _range(
        _retime_ratio(load(f"{_RETIME}/{f}"))[0] for _, d, _b, f in _RETIME_RUNS if d == "paired")),
    "h200-r6-bs8-ratio": Value(f"{_R6}/detector_bs8_sm90.json", spec="{:.2f}", compute=lambda d: (
        d["results"]["mmdet"]["iters_per_s"] / d["results"]["torchvision-matched"]["iters_per_s"])),
    **{f"h200-retime-call3-mmdet-{design}": Value(f"{_RETIME}/{design}_bs8_1.json", compute=partial(_retime_call3_mmdet, design))
       for design in ("sequential", "paired")},
    "h200-r6-stages-bs8": Value(f"{_R6}/stages_bs8_sm90.json", compute=lambda d: "{:.1f} against {:.1f} ms per iteration, {:.2f}".format(
        *(d["frameworks"][s]["stages"]["iteration"]["gpu_ms"] for s in ("mmdet", "torchvision")),
        d["frameworks"]["torchvision"]["stages"]["iteration"]["gpu_ms"] / d["frameworks"]["mmdet"]["stages"]["iteration"]["gpu_ms"])),
    "h200-retime-bs8-16-range": Value(f"{_RETIME}/paired_bs8.json", compute=lambda _d: _range(
        _retime_ratio(load(f"{_RETIME}/{f}"))[0] for _, _d2, b, f in _RETIME_RUNS if b in ("8", "16"))),
    **{f"h200-patchab-0012-{key.replace('_', '-')}": Value(f"h200/recipe-run9/patchab_mmcv-{_P12}.json", spec=spec,
                                                            compute=partial(_batched_nms_10k, key))
       for key, spec in (("patched_over_released", "{:.3f}"), ("torchvision_over_patched", "{:.1f}"),
                         ("released_median_us", "{:,.0f}"), ("patched_median_us", "{:,.0f}"))},
    "h100-patchab-0005-bs8": Value(f"h100/perf-run1/patchab_mmdet-{_P5}.json", compute=lambda d: _vs_torchvision(d, 8)),
    "h100-patchab-0014-cases": Value(f"h100/perf-run2/patchab_mmcv-{_P14}.json", compute=lambda d: "{} {:,}".format(
        "all" if d["same"]["nms"]["identical"] else f"{d['same']['nms']['n_differing']:,} differ of", d["same"]["nms"]["cases"])),
    "h100-patchab-0019-cases": Value(f"h100/perf-run17/patchab_mmcv-{_P19}.json", compute=lambda d: "{} {:,}".format(
        "all" if d["same"]["nms"]["identical"] else f"{d['same']['nms']['n_differing']:,} differ of", d["same"]["nms"]["cases"])),
    "gpu-time-before-sm90": Value(f"{GPU_TIME}", compute=lambda d: _gpu_seconds(d["before"], "build+test sm90")),
    "gpu-time-after-sm90": Value(f"{GPU_TIME}", compute=lambda d: _gpu_seconds(d["after"], "test mmcv_cuda130_sm90")),
    "gpu-time-cpu-sm90": Value(CPU_BUILD, compute=lambda d: f"{d['wall_s']:,.0f} s wall, {d['cpu_s']:,.0f} CPU-s"),
    "gpu-time-ratio": Value(f"{GPU_TIME}", compute=lambda d: f"{d['like_for_like']['after_over_before']:.2f}"),
    "h100-detprocs-proposed-bs8": Value("h100/perf-run2/detprocs_bs8_sm90.json", compute=_processes_ratio),
    **{f"h100-detprocs-bs{bs}": Value(f"h100/perf-run1/detprocs_bs{bs}_sm90.json", compute=_processes_ratio)
       for bs in (8, 16)},
    **{f"h100-detprocs-build3-bs{bs}": Value(f"h100/perf-run5/detprocs_bs{bs}_sm90.json", compute=_processes_ratio)
       for bs in (8, 16)},
    # the recipe's packages today (mmdet build 4): issue 43 item 1's parity goal
    **{f"h100-detprocs-build4-bs{bs}": Value(f"h100/perf-run9/detprocs_bs{bs}_sm90.json", compute=_processes_ratio)
       for bs in (8, 16)},
    "h100-detprocs-build4-pairs": Value("h100/perf-run9/detprocs_bs8_sm90.json", spec="{}",
                                        compute=lambda d: len(d["processes"]["child_seconds"]) // 2),
    # how fast each host drove the matched torchvision at batch 8 (the ratio follows the host)
    "h100-detprocs-build3-torchvision-bs8": Value("h100/perf-run5/detprocs_bs8_sm90.json", spec="{:.2f}",
                                                  compute=_torchvision_rate),
    **{f"h100-detprocs-run{run}-torchvision-bs8": Value(f"h100/perf-run{run}/detprocs_bs8_sm90.json", spec="{:.2f}",
                                                       compute=_torchvision_rate) for run in (2, 4, 9)},
    "h100-patchab-0008-same": Value(f"h100/perf-run5/patchab_mmdet-{_P08}.json", spec="{}", compute=partial(_same_cases, "rpn_proposals")),
    "h200-patchab-0012-upstream": Value(f"h200/recipe-run9/patchab_mmcv-{_P12}.json", compute=_upstream_counts),
    "h200-run9-upstream": Value("h200/recipe-run9/summary.json", compute=lambda d: "{passed} passed, {failed} failed, {skipped} skipped".format(
        **next(t for t in d["builds"]["sm90"]["packages"][0]["test_results"] if t["kind"] == "upstream-tests")["counts"])),
    **{f"cpu-runner-{name}": Value("cpu-dev/runner_overhead.json", f"{key}.{stat}", spec="{:.3f}")
       for name, key, stat in (("hooks-median", "hooks_and_logging_ms", "median_ms"), ("hooks-mean", "hooks_and_logging_ms", "mean_ms"),
                               ("loading", "loading_ms", "median_ms"))},
    "cpu-runner-cpu": Value("cpu-dev/runner_overhead.json", compute=lambda d: "{} ({}, mmengine {})".format(
        d["cpu"], d["device"], d["versions"]["mmengine"])),
    "cpu-runner-share-bs2": Value("cpu-dev/runner_overhead.json", compute=lambda d: "{:.2f}% of {:.1f} ms".format(
        100 * (d["hooks_and_logging_ms"]["mean_ms"] + d["loading_ms"]["mean_ms"])
        / load(f"{_R6}/stages_bs2_sm90.json")["frameworks"]["mmdet"]["stages"]["iteration"]["gpu_ms"],
        load(f"{_R6}/stages_bs2_sm90.json")["frameworks"]["mmdet"]["stages"]["iteration"]["gpu_ms"])),
    "cpu-detprocs-setting": Value("cpu-dev/detprocs_cpu.json", compute=lambda d: "{} px, batch {}, {}, {} cores ({})".format(
        d["image_size"], d["batch_size"], "AMP" if d["amp"] else "fp32", d["host"]["cpu_cores"], d["host"]["cpu"])),
    "cpu-detprocs-versions": Value("cpu-dev/detprocs_cpu.json", compute=lambda d: "{} and {}".format(
        *(d["processes"]["sides"]["torchvision-matched"]["versions"][k] for k in ("torch", "torchvision")))),
    "cpu-detprocs-child-seconds": Value("cpu-dev/detprocs_cpu.json", spec="{}", compute=lambda d: _range(
        d["processes"]["child_seconds"], "{:.0f}")),
    "cpu-ops-setting": Value(_DETECTOR_OPS[0][1], compute=lambda d: "{} px, batch 2 and 8, {}, torch {}, torchvision {}".format(
        d["image_size"], "AMP" if d["amp"] else "fp32", *(d["frameworks"]["torchvision"]["versions"][k] for k in ("torch", "torchvision")))),
    "cpu-ops-rpn-targets-per-image": Value(_DETECTOR_OPS[1][1], compute=lambda d: "{:.0f} ops and {:.0f} host waits, torchvision's {:.0f} and {:.0f}".format(
        *(_stage(d, side, "rpn.targets")[k] / d["batch_size"] for side in ("mmdet", "torchvision") for k in ("ops", "host_waits")))),
    "cpu-ops-rpn-loss-beyond-targets": Value(_DETECTOR_OPS[1][1], compute=lambda _d: "{} and {} ops at batch 2 and 8 (torchvision's whole rpn.loss: {} and {})".format(
        *(f"{_stage(load(f), 'mmdet', 'rpn.loss')['ops'] - _stage(load(f), 'mmdet', 'rpn.targets')['ops']:,}" for _, f in _DETECTOR_OPS),
        *(f"{_stage(load(f), 'torchvision', 'rpn.loss')['ops']:,}" for _, f in _DETECTOR_OPS))),
    **{f"cpu-ops-{name}-bs2": Value(_DETECTOR_OPS[0][1], compute=partial(_ops_and_waits, stage))
       for name, stage in (("roi-targets", "roi.targets"), ("proposals", "rpn.proposals"))},
    "cpu-ops-p0004-waits": Value("cpu-dev/detector_ops_p0004_bs8.json", compute=lambda d: " and ".join(
        "{} to {} ({})".format(_stage(load("cpu-dev/detector_ops_bs8.json"), "mmdet", st)["host_waits"],
                               _stage(d, "mmdet", st)["host_waits"], st) for st in ("rpn.targets", "roi.targets"))),
    "cpu-ops-p0006-waits": Value("cpu-dev/detector_ops_p0006_bs8.json", compute=lambda d: ", ".join(
        "{} to {} ({})".format(_stage(load("cpu-dev/detector_ops_bs8.json"), "mmdet", st)["host_waits"],
                               _stage(d, "mmdet", st)["host_waits"], st) for st in ("rpn.targets", "rpn.loss", "iteration"))),
    **{f"cpu-ops-p{p}-bs{bs}": Value(f"cpu-dev/detector_ops_p{p}_bs{bs}.json", compute=partial(_iteration_ops, "mmdet"))
       for p in ("0006", "0007", "0008", "0009") for bs in (8,)},
    "cpu-ops-torchvision-bs8": Value("cpu-dev/detector_ops_bs8.json", compute=partial(_iteration_ops, "torchvision")),
    "cpu-ops-p0008-proposals-bs8": Value("cpu-dev/detector_ops_p0008_bs8.json", compute=partial(_proposals_ops_0008, 8)),
    "cpu-ops-p0009-targets-bs8": Value("cpu-dev/detector_ops_p0009_bs8.json", compute=partial(_targets_ops_0009, 8)),
    "h100-patchab-0009-same": Value(f"h100/perf-run7/patchab_mmdet-{_P09}.json", spec="{}",
                                    compute=partial(_same_cases, "rpn_targets")),
    **{f"h100-patchab-{p[:4]}-processes": Value(f"h100/perf-run7/patchab_mmdet-{p}.json", compute=_patch_processes_ratio)
       for p in (_P08, _P09)},
    # the same A/B in the package with both (perf-run8): each candidate reversed from it
    **{f"h100-patchab-{p[:4]}-processes-build4": Value(f"h100/perf-run8/patchab_mmdet-{p}.json", compute=_patch_processes_ratio)
       for p in (_P08, _P09)},
    # the recipe's build 4 package itself through its test section (perf-run8 tested the proposed build)
    "h100-build4-upstream": Value("h100/perf-run9/test_mmdet.json", compute=lambda d: "{passed} passed, {failed} failed, {skipped} skipped".format(
        **next(t for t in d["packages"][0]["test_results"] if t["kind"] == "upstream-tests")["counts"])),
    "h200-detector-ratio-range": Value(f"{_R6}/detector_bs2_sm90.json", compute=lambda _d: _stage_ratio_range(_R6)),
    "h200-r5-detector-ratio-range": Value(f"{_R5}/detector_bs2_sm90.json", compute=lambda _d: _stage_ratio_range(_R5)),
    "h200-r5-profile-busy-ms": Value(f"{_R5}/profile_sm90.json", spec="{:.1f}",
                                     compute=lambda d: _profile(d)["gpu_busy_ms_per_iter"]),
    "h200-r5-profile-top-kernel-ms": Value(f"{_R5}/profile_sm90.json", spec="{:.1f}",
                                           compute=lambda d: _profile(d)["top_kernels"][0]["ms_per_iter"]),
    **{f"h200-profile{bs}-{side[:2]}-{name}": Value(f"{_R6}/{f}", f"results.{side}.{key}", spec=spec)
       for bs, f in (("2", "profile_sm90.json"), ("8", "profile_bs8_sm90.json"))
       for side in ("mmdet", "torchvision-matched")
       for name, key, spec in (("busy-ms", "gpu_busy_ms_per_iter", "{:.1f}"), ("wall-ms", "wall_ms_per_iter", "{:.1f}"),
                               ("idle-ms", "gpu_idle_ms_per_iter", "{:.1f}"), ("launches", "kernel_launches_per_iter", "{:,.0f}"))},
    "h200-run6-longest-unit": Value(f"{_R6}/summary.json", compute=lambda d: "`{unit}` ({s:.0f} s)".format(
        **d["builds"]["sm90"]["compile"]["longest_unit"])),
    "h200-run6-span-over-limit": Value(f"{_R6}/summary.json", "builds.sm90.compile.span_over_limit", spec="{:.3f}"),
    "h200-fat-span-over-limit": Value(f"{_FAT}/summary.json", "builds.fat.compile.span_over_limit", spec="{:.3f}"),
    "h200-fat-longest-unit": Value(f"{_FAT}/summary.json", compute=lambda d: "`{unit}` ({s:.0f} s)".format(
        **d["builds"]["fat"]["compile"]["longest_unit"])),
    "h200-fat-limit-by": Value(f"{_FAT}/summary.json", compute=lambda d: "{:,.0f} unit CPU-s / {} cores = {:.0f} s".format(
        d["builds"]["fat"]["compile"]["unit_cpu_s"], d["builds"]["fat"]["compile"]["cores"],
        d["builds"]["fat"]["compile"]["unit_cpu_s"] / d["builds"]["fat"]["compile"]["cores"])),
    "h200-fat-arch-list": Value(f"{_FAT}/summary.json", compute=lambda d: "`{}`".format(
        d["builds"]["fat"]["packages"][0]["variant"]["mmcv_arch_list"])),
    "h200-fat-conda-ratio": Value(f"{_FAT}/summary.json", spec="{:.2f}", compute=lambda d: (
        d["builds"]["fat"]["packages"][0]["conda_bytes"] / load(f"{_R7}/summary.json")["builds"]["sm90"]["packages"][0]["conda_bytes"])),
    "h200-fat-cpu-ratio": Value(f"{_FAT}/summary.json", spec="{:.1f}", compute=lambda d: (
        d["builds"]["fat"]["compile"]["unit_cpu_s"] / load(f"{_R7}/summary.json")["builds"]["sm90"]["compile"]["unit_cpu_s"])),
    "h200-run7-span-over-limit": Value(f"{_R7}/summary.json", "builds.sm90.compile.span_over_limit", spec="{:.3f}"),
    "h200-patchab-0011-range": Value(f"{_R7}/patchab_mmcv-{_P11}.json", compute=lambda d: _range(
        _fp16_fwd_bwd(d, "deform_conv2d", "patched_over_released", "times")
        + _fp16_fwd_bwd(d, "modulated_deform_conv2d", "patched_over_released", "times"))),
    "h200-patchab-0011-vs-tv": Value(f"{_R7}/patchab_mmcv-{_P11}.json", compute=lambda d: _range(
        _fp16_fwd_bwd(d, "deform_conv2d", "torchvision_over_patched", "times")
        + _fp16_fwd_bwd(d, "modulated_deform_conv2d", "torchvision_over_patched", "times"))),
    "h200-patchab-0011-upstream": Value(f"{_R7}/patchab_mmcv-{_P11}.json", compute=_upstream_counts),
    "h200-sm90-device-bytes": Value(f"{_R7}/conda_sizes_sm90.json", compute=lambda d: _mb(d["packages"][0]["nv_fatbin_bytes"])),
    "h200-fat-per-target": Value(f"{_FAT}/summary.json", compute=lambda d: _mb(_fat_per_target(d))),
    "h200-size-fat-ratio": Value(f"{_FAT2}/conda_sizes.json", spec="{:.2f}", compute=lambda d: (
        d["packages"][0]["conda_bytes"] / load(f"{_FAT3}/conda_sizes.json")["packages"][0]["conda_bytes"])),
    "h200-size-sm90-ratio": Value(f"{_R8}/conda_sizes_sm90.json", spec="{:.2f}", compute=lambda d: (
        d["packages"][0]["conda_bytes"] / load(f"{_R7}/conda_sizes_sm90.json")["packages"][0]["conda_bytes"])),
    "h200-size-device-range": Value(f"{_FAT2}/conda_sizes.json", compute=lambda d: _range(_size_mode_device_ratios(d))),
    "h200-size-fat-over-sm90": Value(f"{_FAT2}/conda_sizes.json", spec="{:.2f}", compute=lambda d: (
        d["packages"][0]["conda_bytes"] / load(f"{_R8}/conda_sizes_sm90.json")["packages"][0]["conda_bytes"])),
    **{f"h200-l3-{k}": Value(f"{r}/summary.json", spec="{:.1f}", compute=lambda d: d["builds"]["fat"]["sandbox_ladder"]["levels"]["L3"]["seconds"])
       for k, r in (("size", _FAT2), ("cmp", _FAT3))},
    "h200-lease-driver": Value(f"{_FAT2}/summary.json", compute=lambda d: d["machine"][0].split(", ")[2]),
    "h200-size-cpu-ratios": Value(f"{_FAT2}/summary.json", compute=lambda d: "{:.2f} (fat2 / fat1) and {:.2f} (run8 / run7)".format(
        _build(_FAT2)["compile"]["unit_cpu_s"] / _build(_FAT)["compile"]["unit_cpu_s"],
        _build(_R8, "sm90")["compile"]["unit_cpu_s"] / _build(_R7, "sm90")["compile"]["unit_cpu_s"])),
    "h200-fat-span-range": Value(f"{_FAT}/summary.json", compute=lambda d: _range(
        (_build(r)["compile"]["span_over_limit"] for r in (_FAT, _FAT2, _FAT3)), "{:.3f}")),
    **{name: Value(f"{_FAT3}/summary.json", spec="{:.2f}", compute=partial(_unit_cpu_over, base))
       for name, base in (("h200-threads-cpu-ratio", _FAT2), ("h200-threads-cpu-ratio-fat1", _FAT))},
    "h200-threads-longest": Value(f"{_FAT3}/summary.json", compute=lambda d: "{:.0f} s against {:.0f} s".format(
        _build(_FAT3)["compile"]["longest_unit"]["s"], _build(_FAT2)["compile"]["longest_unit"]["s"])),
    "h200-threads-wall": Value(f"{_FAT3}/summary.json", compute=lambda d: "{:.0f} s against {:.0f} s".format(
        _build(_FAT3)["command_wall_s"], _build(_FAT2)["command_wall_s"])),
    "h200-fat-size-projection": Value("cpu-dev/fatbin_compress.json", spec="{:.2f}", compute=lambda d: _size_projection(d)),
    "cpu-fatbin-size-range": Value("cpu-dev/fatbin_compress.json",
                                   compute=lambda d: _range(_size_ratios(d, "per-gen") + _size_ratios(d, "fat"))),
    "cpu-fat-cf-extra-share": Value("cpu-dev/fatbin_compress.json", compute=lambda d: _range(
        (b.get("11.0", 0) + b.get("12.0 ptx", 0)) / sum(b.values())
        for b in (r["fat+cmp"]["fatbin_by_arch"] for r in d["units"].values()))),
    "cpu-ccache-recipe-warm-ratio": Value("cpu-dev/ccache_recipe.json", spec="{:.2f}", compute=lambda d: (
        next(b for b in d["builds"] if b["build"] == "warm")["wall_s"] / next(b for b in d["builds"] if b["build"] == "cold")["wall_s"])),
    "cpu-ci-run-min": Value("cpu-dev/ci_run.json", compute=lambda d: d["wall_s"] / 60, spec="{:.0f}"),
    "cpu-ci-pytest-passed": Value("cpu-dev/ci_run.json", "pytest.passed"),
    "cpu-fast-suite-s": Value("cpu-dev/fast_suite.json", "wall_s", spec="{:.0f}"),
    "h200-upstream-sandbox": Value("h200/recipe-run9/build_sm90.json", compute=lambda d: _upstream(
        {"packages": d["packages"]})),
    "ops-now-repeats": Value("h200/recipe-run6/ops_full_sm90.json", "repeats"),
    "ops-now-iters": Value("h200/recipe-run6/ops_full_sm90.json", "iters"),
    "h200-ops-repeats": Value("h200/run2-fixed/ops_sm90.json", "repeats"),
    "h200-ops-iters": Value("h200/run2-fixed/ops_sm90.json", "iters"),
    "h200-detector-size": Value("h200/run2-fixed/detector_sm90.json", "image_size"),
    "h200-detector-iters": Value("h200/run2-fixed/detector_sm90.json", "iters"),
    "h200-detector-repeats": Value("h200/run2-fixed/detector_sm90.json", "repeats"),
    "h200-l4-max-vs-cpu": Value("h200/run2-fixed/verify_sm90.json", compute=lambda d: max(
        v["vs_cpu"] for v in next(x for x in d["levels"] if x["level"] == "L4")["evidence"].values()
        if isinstance(v, dict) and isinstance(v.get("vs_cpu"), float)), spec="{:.2g}"),
}


_BUILDS = {"recipe-run1": ("sm90", "ptx", "sm90nt"), "recipe-run2": ("sm90",), "recipe-run3": ("sm90",), "recipe-run4": ("sm90",),
           "recipe-run5": ("ptx",), "recipe-run6": ("sm90",), "recipe-run7": ("sm90",), "recipe-fat1": ("fat",),
           "recipe-run8": ("sm90",), "recipe-fat2": ("fat",), "recipe-fat3": ("fat",),
           "recipe-run9": ("sm90",)}
PLOTS: dict[str, Plot] = {
    **{f"h200-units-{run}-{tag}": Plot(
        sources=[f"h200/{run}/units_{tag}.json", f"h200/{run}/rattler-build-{tag}.log", f"h200/{run}/machine.txt"],
        draw=lambda *a: plots_module().timeline(*a), title=f"H200 {run}, mmcv {_RECIPE_ARCH.get(tag, tag)}")
       for run, tags in _BUILDS.items() for tag in tags},
    "h200-ops-ratio": Plot(sources=["h200/run2-fixed/ops_sm90.json"], draw=lambda *a: plots_module().ops_ratio(*a),
                           title="H200 run 2: mmcv ops against torchvision (same GPU, same shapes)"),
}


# -- which mmcv build each solver installs (docs/solver.md; tests/data/solver_selection/) ---------------
# The fixtures are the tests' (tests/test_variants_selection.py compares py-rattler's answers with
# them), not lab results: this table reads them from tests/data and names them as its source.

SOLVER_DATA = "tests/data/solver_selection"


class FixtureTable(Table):
    """A table over committed test fixtures (`sources` relative to the repository root)."""

    def render(self) -> str:
        import json

        docs = [json.loads((ROOT / s).read_text()) for s in self.sources]
        assert self.build is not None
        header, body = self.build(docs)
        where = ", ".join(f"`{s}`" for s in self.sources)
        return results.markdown(header, body) + f"\n\nSource: {where} (rendered by `mmstack_lab.docs.render_docs`)."


def _solver_answer(answer: dict | None) -> str:
    if answer is None:
        return MISSING
    if "unsatisfiable" in answer:
        import re

        named = sorted(set(re.findall(r"__cuda_arch|__cuda(?!_)", answer["unsatisfiable"])))
        return "unsatisfiable" + (f" (names {', '.join(f'`{n}`' for n in named)})" if named else "")
    return f"`{answer['build']}`"


def _solver_selection(docs: list[Doc]) -> Body:
    cases, rattler, conda, pixi = docs
    by = {name: {a["id"]: a for a in d["answers"]} for name, d in (("rattler", rattler), ("conda", conda))}
    platforms = {(a["virtual_packages"].get("__cuda"), a["virtual_packages"].get("__cuda_arch")): a
                 for a in pixi["answers"]}
    body = []
    for case in cases["cases"]:
        machine = ", ".join(f"`{n} {v}`" for n, v in (("__cuda", case["cuda"]), ("__cuda_arch", case["cuda_arch"])) if v) or "neither"
        specs = " ".join(case.get("specs") or [*cases["specs"], *case.get("extra_specs", [])])
        channel = ("a probe: no mmcv asked for" if "specs" in case else
                   "without the `__cuda_arch` dependency" if case.get("channel") == "unguarded" else "as recipes/mmcv builds them")
        plat = platforms.get((case["cuda"], case["cuda_arch"])) if "channel" not in case and "specs" not in case else None
        pixi_cell = f"`{plat['platform']}`: {_solver_answer(plat)}" if plat else MISSING
        body.append([machine, f"`{specs}`", channel, _solver_answer(by["rattler"].get(case["id"])),
                     _solver_answer(by["conda"].get(case["id"])), pixi_cell])
    header = ["machine", "specs", "mmcv builds", f"py-rattler {rattler['py_rattler']}",
              f"conda {conda['conda']} ({conda['solver']}) + nvidia-virtual-packages {conda['nvidia_virtual_packages']}",
              f"pixi {pixi['pixi']['version']}'s rules (platform of pixi.toml)"]
    return header, body


TABLES["solver-selection"] = FixtureTable(
    sources=[f"{SOLVER_DATA}/{f}" for f in ("cases.json", "rattler.json", "conda.json", "pixi.json")],
    build=_solver_selection)


# -- what the driver's JIT costs a '+PTX' build (docs/solver.md; lab/results/h100/recipe-run10) -----------------

JIT_RUN = "h100/recipe-run10"
JIT_TAGS = (("8.9+PTX (JIT on sm_90)", "sm89ptx"), ("9.0 (native)", "sm90"))
JIT_KINDS = ("jit_startup_cold", "jit_startup_warm", "jit_l4_time_cold1", "jit_l4_time_warm1", "jit_l4_time_warm2")


def _jit_cost(docs: list[Doc]) -> Body:
    """The proof's `jit` stage: the first kernel in fresh processes and the complete L4, with the JIT
    cache disabled (every process compiles the PTX) and with a cache the first process fills."""
    by = dict(zip([(kind, tag) for _, tag in JIT_TAGS for kind in JIT_KINDS], docs, strict=True))

    def first_kernel(tag: str, mode: str) -> list[float]:
        runs = by[(f"jit_startup_{mode}", tag)]["runs"]
        return [r["first_kernel_s"] for r in (runs if mode == "cold" else runs[1:])]  # warm: after the filling run

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:,.1f} ms (n={len(values)})"

    def wall(tag: str, name: str) -> str:
        return f"{by[(f'jit_l4_time_{name}', tag)]['wall_s']:.1f} s"

    rows = [
        ["first kernel (roi_align), JIT cache off", *(ms(first_kernel(t, "cold")) for _, t in JIT_TAGS)],
        ["first kernel, cache warm", *(ms(first_kernel(t, "warm")) for _, t in JIT_TAGS)],
        ["L1-L4 (L4 complete), JIT cache off", *(wall(t, "cold1") for _, t in JIT_TAGS)],
        ["L1-L4, first run filling the cache", *(wall(t, "warm1") for _, t in JIT_TAGS)],
        ["L1-L4, cache warm", *(wall(t, "warm2") for _, t in JIT_TAGS)],
    ]
    return ["", *(label for label, _ in JIT_TAGS)], rows


TABLES["jit-cost"] = Table(sources=[f"{JIT_RUN}/{kind}_{tag}.json" for _, tag in JIT_TAGS for kind in JIT_KINDS],
                           build=_jit_cost)


def _jit_test_section(docs: list[Doc]) -> Body:
    """The '+PTX' package's whole test section (`mmstack test`) on the GPU machine, through the JIT."""
    (doc,) = docs
    pkg = doc["packages"][0]
    rows = []
    for res in pkg["test_results"]:
        if res["kind"] == "ladder":
            levels = ", ".join(f"{lv['level']} {lv['status']}" for lv in res["levels"])
            rows.append(["the ladder, L4 complete, `--expect-gpu`", levels, f"{res['seconds']:.1f} s"])
        elif res["kind"] == "upstream-tests":
            c = res["counts"]
            rows.append([f"upstream's `{res['path']}`",
                         f"{c['passed']} passed, {c['failed']} failed, {c['error']} errors, {c['skipped']} skipped",
                         f"{res['seconds']:.1f} s"])
    rows.append([f"whole section ({len(pkg['tests'])} tests), `{pkg['build_string']}`",
                 "passed" if pkg["passed"] else "FAILED", f"{pkg['seconds']:.1f} s"])
    return ["test", "result", "time"], rows


TABLES["jit-test-section"] = Table(sources=[f"{JIT_RUN}/test_mmcv_cuda130_sm89ptx.json"], build=_jit_test_section)
