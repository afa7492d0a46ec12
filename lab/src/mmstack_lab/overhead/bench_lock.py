"""Solve + lock time for every generation against real conda-forge records.

Uses ../shared/fixtures/conda-forge-subset (pytorch 2.7.1 cuda126 / 2.8.0 cpu, cuda-nvcc 12.8):
seven environments shaped like pixi.toml's (cpu, and one per GPU generation on its own platform
with `__cuda=12.8` and its `__cuda_arch`), each `python 3.11.*` + pytorch (cuda*/cpu*) +
cuda-nvcc + cuda-version 12.8.* for the GPU ones. The fixture has no mmcv, so mmcv is left out.

Prints, as the median of N runs: each environment's solve, then the whole `mmstack lock`
pipeline (solve all, write pixi.lock and seven conda-lock files atomically) and reading the
result back through the `lock check` rules.

    python -m mmstack_lab.overhead.bench_lock [-n 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mmstack.envs import lockfile, policy
from mmstack.envs.lock import locked_env, solve_env
from mmstack.envs.pixi_manifest import parse
from mmstack.facts.gpus import load as load_facts
from mmstack_lab.paths import ROOT

FIXTURE = ROOT.parent / "shared" / "fixtures" / "conda-forge-subset" / "conda-forge"


def manifest(facts):
    gpu = [g for g in facts.generation if g.is_gpu]
    raw = {
        "workspace": {
            "channels": [FIXTURE.as_uri()],
            "platforms": ["linux-64"] + [
                {"name": f"linux-64-{g.env}", "platform": "linux-64",
                 "cuda": {"driver": "12.8", "arch": g.compute_capability}, "glibc": "2.28"} for g in gpu],
        },
        "dependencies": {"python": "3.11.*"},
        "feature": {
            "cuda": {"dependencies": {"pytorch": {"version": "*", "build": "cuda*"}, "cuda-nvcc": "*"}},
            "cpu": {"platforms": ["linux-64"], "dependencies": {"pytorch": {"version": "*", "build": "cpu*"}}},
            **{f"gen-{g.env}": {"platforms": [f"linux-64-{g.env}"], "dependencies": {"cuda-version": "12.8.*"}} for g in gpu},
        },
        "environments": {"cpu": ["cpu"], **{g.env: ["cuda", f"gen-{g.env}"] for g in gpu}},
    }
    return parse(raw, Path("bench/pixi.toml"))


def lock_all(m, facts, gateway, out: Path) -> dict[str, float]:
    """The `mmstack lock` pipeline; returns each environment's solve time."""
    times, solved = {}, {}
    chans = m.channel_urls()
    for name, env in m.envs.items():
        t = time.perf_counter()
        plat, records = solve_env(env, facts, chans, gateway=gateway)
        times[name] = time.perf_counter() - t
        solved[name] = (plat, chans, records)
    files = {}
    lf = lockfile.build_pixi_lock(solved)
    files[out / "pixi.lock"] = lambda p: lf.to_path(p)
    for name, (plat, ch, records) in solved.items():
        doc = lockfile.conda_lock_document(env=locked_env(name, plat, ch, records), channels=ch, sources=["../pixi.toml"],
                                           digests={}, content_hash="-")
        files[lockfile.conda_lock_path(out, name)] = lockfile.text_writer(lockfile.dump_yaml(doc))
    lockfile.write_atomically(files)
    return times


def check_all(m, facts, out: Path) -> int:
    locked = lockfile.read_pixi_lock(out / "pixi.lock")
    n = 0
    for name, env in m.envs.items():
        cl = lockfile.read_conda_lock(lockfile.conda_lock_path(out, name))
        n += len(policy.conda_lock_problems(name, locked[name], cl))
        n += len(policy.lock_problems(env=env, locked=locked[name], facts=facts, matrix=[], channels=m.channel_urls(),
                                      stored_digests=None, channel_index=policy.ChannelIndex(m.channel_urls())))
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="runs (median reported)")
    args = ap.parse_args()
    if not FIXTURE.is_dir():
        print(f"skip: fixture not found at {FIXTURE}")
        return 0
    from rattler import Gateway

    facts = load_facts()
    facts = facts.model_copy(update={"generation": tuple(g.model_copy(update={"cuda": "12.8"}) if g.is_gpu else g
                                                         for g in facts.generation)})
    m = manifest(facts)
    per_env: dict[str, list[float]] = {e: [] for e in m.envs}
    totals, checks = [], []
    sizes = {}
    for _ in range(args.n):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            gateway = Gateway()  # a fresh one each run: repodata parsed every time, as in a CLI call
            t = time.perf_counter()
            times = lock_all(m, facts, gateway, out)
            totals.append(time.perf_counter() - t)
            for e, s in times.items():
                per_env[e].append(s)
            t = time.perf_counter()
            problems = check_all(m, facts, out)
            checks.append(time.perf_counter() - t)
            sizes = {e: len(v.packages) for e, v in lockfile.read_pixi_lock(out / "pixi.lock").items()}
    print(f"fixture: {FIXTURE}  runs: {args.n}  (median)")
    print(f"{'environment':<12} {'records':>7} {'solve s':>8}")
    for e, ts in per_env.items():
        print(f"{e:<12} {sizes.get(e, 0):>7} {statistics.median(ts):>8.3f}")
    print(f"solve + write pixi.lock + {len(m.envs)} conda-lock files: {statistics.median(totals):.3f} s")
    print(f"read back + lock rules ({len(m.envs)} envs): {statistics.median(checks):.3f} s; problems (mmcv absent by design): {problems}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
