"""Per-compile-unit times from a ninja log: count, CPU-seconds, the longest units (critical path).

    python -m mmstack_lab.build_cost.ninja_units build/temp.linux-x86_64-cpython-312/.ninja_log --json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def units(log: Path) -> list[tuple[str, float, float, float]]:
    """(target, start_s, end_s, duration_s) for the last build recorded in the log."""
    rows = {}
    for line in log.read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _mtime, target, *_ = line.split("\t")
        rows[target] = (target, int(start) / 1e3, int(end) / 1e3, (int(end) - int(start)) / 1e3)
    return sorted(rows.values(), key=lambda r: -r[3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    rows = units(args.log)
    durations = [r[3] for r in rows]
    longest = [{"unit": Path(r[0]).name, "s": round(r[3], 1)} for r in rows[: args.top]]
    data = {
        "units": len(rows),
        "unit_cpu_s": round(sum(durations), 1),
        "mean_s": round(statistics.mean(durations), 1) if durations else 0,
        "span_s": round(max(r[2] for r in rows) - min(r[1] for r in rows), 1) if rows else 0,
        "longest": longest,
    }
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(f"{data['units']} units, {data['unit_cpu_s']} unit-seconds, mean {data['mean_s']} s, span {data['span_s']} s")
        for u in longest:
            print(f"  {u['s']:8.1f} s  {u['unit']}")


if __name__ == "__main__":
    main()
