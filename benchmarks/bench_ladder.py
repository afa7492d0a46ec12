"""What the ladder's crash isolation costs: `mmstack verify --levels L1,L3,L4` against one bare process.

    python benchmarks/bench_ladder.py --runs 5 [--python EXE] [--json]

bare:   `python -c "import torch, mmcv.ops; <nms on 4 boxes>"`, one process (the least a check can do)
ladder: run_ladder(levels L1,L3,L4) in this process: four child processes (L1; L3's load and info
        children side by side; L4 with five ops and their comparisons), each importing torch
cli:    the same through `mmstack verify --levels L1,L3,L4 --json` (adds the CLI's own start-up)
Medians over --runs; the ratio is ladder / bare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

BARE = ("import torch, mmcv.ops; b = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11.]]);"
        " mmcv.ops.nms(b, torch.tensor([0.9, 0.8]), 0.5)")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    from mmstack.ladder import run_ladder

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-cli", action="store_true", help="skip the `mmstack verify` timing")
    args = ap.parse_args()

    def bare():
        subprocess.run([args.python, "-c", BARE], check=True, capture_output=True)

    def ladder():
        result = run_ladder(levels=("L1", "L3", "L4"), python=args.python)
        if not result.ok:
            raise SystemExit(f"the ladder failed: {json.dumps(result.as_dict(), default=str)[:2000]}")

    def cli():
        subprocess.run([sys.executable, "-m", "mmstack.cli", "verify", "--levels", "L1,L3,L4", "--json",
                        "--python", args.python], check=True, capture_output=True)

    bare()  # warm the page cache once so the first run is not an outlier
    steps = [("bare", bare), ("ladder", ladder)] + ([] if args.no_cli else [("cli", cli)])
    times = {name: [] for name, _ in steps}
    for _ in range(args.runs):  # interleaved, so a noisy neighbour hits each alike
        for name, fn in steps:
            times[name].append(timed(fn))
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = {f"{k}_over_bare": med[k] / med["bare"] for k in med if k != "bare"}
    if args.json:
        print(json.dumps({"runs": args.runs, "python": args.python, "seconds": times, "median": med, "ratio": ratio},
                         indent=2))
    else:
        print(f"bare import+op   {med['bare']:8.2f} s")
        print(f"ladder L1,L3,L4  {med['ladder']:8.2f} s   ({ratio['ladder_over_bare']:.2f}x bare)")
        if "cli" in med:
            print(f"mmstack verify   {med['cli']:8.2f} s   ({ratio['cli_over_bare']:.2f}x bare)")
        print(f"median of {args.runs} runs, python {args.python}")


if __name__ == "__main__":
    main()
