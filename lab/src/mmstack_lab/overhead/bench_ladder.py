"""What `mmstack verify` costs against one bare process doing the least a check can do.

    python -m mmstack_lab.overhead.bench_ladder --runs 5 [--python EXE] [--out lab/results/cpu-dev/ladder.json]

mmstack comes from the running interpreter (installed, or the checkout's src/ on PYTHONPATH); EXE is the environment under test and
needs torch + mmcv only. The `cli` step needs mmstack's CLI dependencies (typer, rich) in the
interpreter running this script; without them it is left out and the JSON says why.

bare:    `python -c "import torch, mmcv.ops; <nms on 2 boxes>"`, one process
bare-no-teardown: the same ending in os._exit(0), as the ladder's child ends (it skips Python's
         finalisation, 1.2-2 s of torch teardown here): the ratio against it shows what the levels
         themselves cost beyond the imports
L1-L4:   run_ladder(levels L1..L4) in this process: one child runs the levels in order
L1-L5:   the same with L5 (a few training steps of DeformConv2d + RoIAlign, mmengine's optimiser)
cli:     `mmstack verify --levels L1,L2,L3,L4 --json` (adds the CLI's own start-up)
All four are interleaved per round, so a noisy neighbour hits each alike; medians over --runs and
the ratios median(x) / median(bare) come from this one run. The JSON also keeps each run, the
per-level seconds the ladder reported, the interpreters it started, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

BARE = ("import torch, mmcv.ops; b = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11.]]);"
        " mmcv.ops.nms(b, torch.tensor([0.9, 0.8]), 0.5)")
VERSIONS = "import sys, torch, mmcv; print(sys.version.split()[0], torch.__version__, mmcv.__version__)"


def main() -> None:
    from mmstack.verify.ladder import run_ladder

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose mmcv is verified")
    ap.add_argument("--out", type=Path, help="write the result JSON here")
    ap.add_argument("--machine", default=platform.node(), help="a label for the machine, kept in the JSON")
    ap.add_argument("--no-cli", action="store_true", help="skip the `mmstack verify` timing")
    args = ap.parse_args()
    if args.runs < 1:
        raise SystemExit("--runs: expected 1 or more")

    level_seconds: dict[str, list] = {"L1-L4": [], "L1-L5": []}
    interpreters: dict[str, list] = {"L1-L4": [], "L1-L5": []}

    def bare():
        subprocess.run([args.python, "-c", BARE], check=True, capture_output=True)

    def bare_no_teardown():
        subprocess.run([args.python, "-c", BARE + "; import os; os._exit(0)"], check=True, capture_output=True)

    def ladder(levels, key):
        def go():
            result = run_ladder(levels=levels, python=args.python)
            if not result.ok:
                raise SystemExit(f"the ladder failed: {json.dumps(result.as_dict(), default=str)[:3000]}")
            level_seconds[key].append({r.level: r.seconds for r in result.levels})
            interpreters[key].append(result.timings["interpreters"])
        return go

    # the child finds mmstack as this process did (installed, or the inherited PYTHONPATH)
    def cli():
        subprocess.run([sys.executable, "-m", "mmstack.cli", "verify", "--levels", "L1,L2,L3,L4", "--json",
                        "--python", args.python], check=True, capture_output=True)

    no_cli = "--no-cli" if args.no_cli else None
    if not no_cli:
        try:
            import typer  # noqa: F401 - the CLI's own dependency
        except ImportError as exc:
            no_cli = f"this interpreter cannot run mmstack's CLI ({exc})"

    versions = subprocess.run([args.python, "-c", VERSIONS], check=True, capture_output=True, text=True).stdout.split()
    bare()  # warm the page cache once so the first round is not an outlier
    steps = [("bare", bare), ("bare-no-teardown", bare_no_teardown), ("L1-L4", ladder(("L1", "L2", "L3", "L4"), "L1-L4")),
             ("L1-L5", ladder(("L1", "L2", "L3", "L4", "L5"), "L1-L5"))] + ([] if no_cli else [("cli", cli)])
    times: dict[str, list] = {name: [] for name, _ in steps}
    load_before = os.getloadavg()
    for _ in range(args.runs):
        for name, fn in steps:
            start = time.perf_counter()
            fn()
            times[name].append(round(time.perf_counter() - start, 3))
    load_after = os.getloadavg()
    med = {k: round(statistics.median(v), 3) for k, v in times.items()}
    ratio = {f"{k}_over_bare": round(med[k] / med["bare"], 3) for k in med if k != "bare"}
    ratio.update({f"{k}_over_bare-no-teardown": round(med[k] / med["bare-no-teardown"], 3)
                  for k in med if not k.startswith("bare")})
    per_level = {key: {lv: round(statistics.median(r[lv] for r in runs), 3) for lv in runs[0]}
                 for key, runs in level_seconds.items() if runs}
    data = {
        "benchmark": "bench_ladder", "machine": args.machine, "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
        "python": args.python, "python_version": versions[0], "torch": versions[1], "mmcv": versions[2],
        "runs": args.runs, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(["python", "mmstack_lab.overhead.bench_ladder", *sys.argv[1:]]),
        "seconds": times, "median": med, "ratio": ratio, "median_level_seconds": per_level,
        "interpreters": interpreters, "cli_left_out": no_cli,
    }
    text = json.dumps(data, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text if not args.out else
          "\n".join([f"bare import+op  {med['bare']:7.2f} s"]
                    + [f"{k:15s} {med[k]:7.2f} s  ({ratio[k + '_over_bare']:.2f}x bare)" for k in med if k != "bare"]
                    + [f"median of {args.runs} runs; load {load_before[0]:.2f} -> {load_after[0]:.2f}; wrote {args.out}"]))


if __name__ == "__main__":
    main()
