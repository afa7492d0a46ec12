"""The pictures in docs/img/, drawn from committed results (render_docs.py calls `draw`).

Each figure is a pure function of its sources: Agg backend, fixed size, dpi and font (DejaVu Sans,
which matplotlib ships), no date or software version in the PNG, so the same results and the same
matplotlib give the same bytes. `pixels` is what render_docs.py --check compares (a PNG encoder
other than the one that wrote the committed file may pack the same pixels differently).

Compile-unit timeline: ninja logs each unit's duration (.ninja_log -> units_*.json by
mmstack_lab.build_cost.ninja_units) and rattler-build's log (rattler-build-*.log) has the second at which
each `[N/M]` unit finished; start = end - duration. Bars are laid on job slots greedily by start
time (a slot is free again at its last unit's end, within the log's 1 s resolution). units_*.json
names units by object file only: where several sources make objects of one name (nms.o), the
longest time goes to the object under cuda/, then in path order (as schedule_units.py pairs them).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from mmstack_lab.common.result_logs import read_log

DPI = 100
_STAMP = re.compile(r"^(\d\d):(\d\d):(\d\d) \[\w+\] \[(\d+)/(\d+)\] .*?\s-o\s+(\S+)")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcdefaults()
    plt.rcParams.update({"font.family": "DejaVu Sans", "font.size": 9,
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def pixels(data: bytes) -> tuple[tuple[int, int], bytes]:
    """(size, RGBA bytes) of a PNG: what a picture shows, whatever encoder packed it."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return im.size, im.convert("RGBA").tobytes()


# -- compile-unit timeline ---------------------------------------------------------------------------

def unit_spans(units_json: Path, log: Path) -> list[tuple[str, float, float]]:
    """(object path, start s, end s) per unit, times from the first unit's start."""
    ends: list[tuple[str, float]] = []
    day = 0
    last = -1
    for line in read_log(log).splitlines():
        m = _STAMP.match(line)
        if not m:
            continue
        t = int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])
        if t < last:  # past midnight
            day += 86400
        last = t
        ends.append((m[6], float(t + day)))
    measured: dict[str, list[float]] = {}
    for row in json.loads(units_json.read_text())["longest"]:
        measured.setdefault(row["unit"], []).append(row["s"])
    by_name: dict[str, list[str]] = {}
    for path, _ in ends:
        by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
    duration: dict[str, float] = {}
    for name, paths in by_name.items():
        times = sorted(measured.get(name, []), reverse=True)
        if len(times) != len(paths):
            raise ValueError(f"{units_json}: {len(times)} times for {name}, the log has {len(paths)} units")
        for path, seconds in zip(sorted(paths, key=lambda p: ("/cuda/" not in p, p)), times, strict=True):
            duration[path] = seconds
    spans = [(path, end - duration[path], end) for path, end in ends]
    t0 = min(s for _, s, _ in spans)
    return [(p, s - t0, e - t0) for p, s, e in spans]


def slots(spans: list[tuple[str, float, float]], cores: int, slack: float = 1.0) -> list[int]:
    """A job slot per unit (the spans' order): the lowest slot free by the unit's start (+ slack),
    else a new one up to `cores`, else the slot free first (the log relays a line a little after
    ninja printed it, so a derived start can precede its slot's previous end by a second or two)."""
    free_at: list[float] = []
    out = [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda i: (spans[i][1], spans[i][0])):
        _, start, end = spans[i]
        slot = next((k for k, t in enumerate(free_at) if t <= start + slack), len(free_at))
        if slot == len(free_at) == cores:
            slot = min(range(cores), key=lambda k: free_at[k])
        if slot == len(free_at):
            free_at.append(end)
        else:
            free_at[slot] = end
        out[i] = slot
    return out


def timeline(title: str, units_json: Path, log: Path, machine: Path) -> bytes:
    plt = _pyplot()
    spans = unit_spans(units_json, log)
    cores = int(re.search(r"^cores: (\d+)$", machine.read_text(), re.M)[1])  # type: ignore[index]
    lanes = slots(spans, cores)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for (path, start, end), lane in zip(spans, lanes, strict=True):
        cuda = "/cuda/" in path
        ax.barh(lane, end - start, left=start, height=0.8, color="#4c72b0" if cuda else "#dd8452",
                edgecolor="white", linewidth=0.4)
    longest = max(spans, key=lambda s: s[2] - s[1])
    lane = lanes[spans.index(longest)]
    ax.annotate(f"{longest[0].rsplit('/', 1)[-1]} {longest[2] - longest[1]:.0f} s", (longest[2], lane),
                xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    span = max(e for _, _, e in spans)
    ax.set_xlim(0, span * 1.15)
    ax.set_ylim(-0.6, max(lanes) + 0.6)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first unit started")
    ax.set_ylabel(f"job slot ({cores} cores)")
    ax.set_title(f"{title}: {len(spans)} units, span {span:.0f} s (blue: CUDA units, orange: C++)", fontsize=10)
    fig.tight_layout()
    return png(fig)


# -- ops against torchvision ------------------------------------------------------------------------

def ops_ratio(title: str, ops_json: Path) -> bytes:
    plt = _pyplot()
    ops = [o for o in json.loads(ops_json.read_text())["ops"] if o.get("ratio_tv_over_mmcv") is not None]
    labels = [f"{o['op']}\n{o['shape']}" for o in ops]
    ratios = [o["ratio_tv_over_mmcv"] for o in ops]
    fig, ax = plt.subplots(figsize=(7, 0.7 * len(ops) + 1.2))
    colors = ["#8c8c8c" if abs(r - 1) < 0.05 else "#55a868" if r > 1 else "#c44e52" for r in ratios]
    ax.barh(range(len(ops)), ratios, color=colors, height=0.6)
    for i, r in enumerate(ratios):
        ax.annotate(f"{r:.2f}", (r, i), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(ops)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(ratios) * 1.2)
    ax.set_xlabel("torchvision time / mmcv time (above 1: mmcv faster; grey: within 5%)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return png(fig)
