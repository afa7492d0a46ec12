"""Run a command; print its wall time, CPU time (user+sys of it and its children) and peak RSS.

    python -m mmstack_lab.common.timed --json out.json -- bash recipes/mmcv/build.sh
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the numbers here too")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    t = time.perf_counter()
    rc = subprocess.call(cmd)
    wall = time.perf_counter() - t
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    data = {"cmd": cmd, "rc": rc, "wall_s": round(wall, 1), "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
            "max_rss_mb": round(ru.ru_maxrss / 1024, 1)}
    print(f"timed: wall {data['wall_s']} s, cpu {data['cpu_s']} s, max rss {data['max_rss_mb']} MB, rc {rc}",
          file=sys.stderr)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(data, fh, indent=2)
    return rc


if __name__ == "__main__":
    sys.exit(main())
