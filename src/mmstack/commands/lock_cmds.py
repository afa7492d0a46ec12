"""`mmstack lock` and `mmstack lock check`: the commands' bodies (what they print, their exit codes);
the solve, the files and the policy are the lock stage's (envs/lock.py, envs/policy.py)."""

from __future__ import annotations

from pathlib import Path

from mmstack import progress, report
from mmstack.builder.reach import require_reachable
from mmstack.commands import interrupts, targets
from mmstack.envs import lock, lockfile, policy
from mmstack.envs.lockfile import LockedEnv
from mmstack.facts.gpus import Facts


def run_lock(*, root: Path = Path("."), envs: list[str] | None = None, channels: list[str] | None = None,
             facts: Facts | None = None, config: Path | None = None, yml_only: bool = False,
             as_json: bool = False, quiet: bool = False) -> int:
    """Solve and write pixi.lock + envs/; nothing is written unless every environment solves.

    Unless `quiet`, stderr shows which environment is being solved (step i of n): a live bar on a
    terminal, else a plain line at most every 30 s (mmstack/progress.py)."""
    inputs = lock.load_inputs(root, facts, config, channels)
    drift = policy.manifest_problems(inputs.manifest, inputs.facts, inputs.matrix)
    if drift:
        for p in drift:
            report.error_line(p.line())
        report.error_line(f"{len(drift)} problem(s) in pixi.toml; nothing locked")
        return 1
    arm = lock.arm_workspace_lines(inputs, config)  # BadInput (exit 2) when envs/arm/pixi.toml drifted, before any write
    root = inputs.root
    ymls = lock.env_ymls(inputs)
    targets.writable_dir(root / "envs", option="--root", what="envs/*.yml", given=root)  # before any solve
    if not yml_only:
        targets.writable_dir(root, option="--root", what="pixi.lock")
    if yml_only:
        with interrupts.deferred():  # renamed into place all together or not at all
            lockfile.write_atomically(ymls)
        report.info(f"wrote {len(ymls)} envs/*.yml")
        if as_json:
            report.print_json({"ok": True, "written": sorted(str(f.relative_to(root)) for f in ymls), "environments": {}})
        return 0

    names = lock.selected_envs(inputs.manifest, envs)
    require_reachable(inputs.channels, option="--channel")
    lock_path = root / lockfile.PIXI_LOCK
    old = lockfile.read_pixi_lock_platforms(lock_path, inputs.manifest.platforms) if lock_path.is_file() else {}
    report.info(f"solving {len(names)} environment(s) against {', '.join(inputs.channels)}")
    watch = progress.steps_on_stderr("lock", quiet=quiet)
    try:
        # in a worker thread: a signal is raised in this thread's wait, never inside py-rattler (interrupts.py)
        solved = interrupts.in_worker(lock.solve_envs, inputs, names,
                                      on_env=(lambda i, n, name: watch.step(f"solving {name}", i, n)) if watch else None)
    finally:
        if watch:
            watch.close()
    files, all_envs = lock.lock_files(inputs, solved, old, ymls)
    with interrupts.deferred():
        lockfile.write_atomically(files)

    if as_json:  # stdout for CI: what was written and each solved environment's packages (per platform where several)
        report.print_json({"ok": True, "written": sorted(str(Path(f).relative_to(root)) for f in files),
                           "environments": {name: ({"platform": per_env[0][0].name, "packages": len(per_env[0][2])}
                                                   if len(per_env) == 1 else
                                                   {"platforms": {plat.name: {"packages": len(records)}
                                                                  for plat, _, records in per_env}})
                                            for name, per_env in solved.items()}})
    else:
        for name, per_env in solved.items():
            before = {lk.platform: lk for lk in old.get(name, ())}
            for plat, chans, records in per_env:
                label = name if len(per_env) == 1 else f"{name} on {plat.name}"
                prev = before.get(plat.name) if len(per_env) > 1 else next(iter(old.get(name, ())), None)
                _print_changes(label, prev, lock.locked_env(name, plat, chans, records))
    n_cl = sum(len(per_env) for per_env in solved.values())
    report.info(f"wrote {lock_path.name} ({len(all_envs)} environments: {', '.join(all_envs)}) and {n_cl} envs/*.conda-lock.yml")
    for line in arm:
        report.info(line)
    return 0


def _print_changes(name: str, before: LockedEnv | None, after: LockedEnv) -> None:
    out = report.console()
    if before is None:
        out.print(f"{name}: new, {len(after.packages)} packages", highlight=False)
        return
    a = {p.name: p for p in before.packages}
    b = {p.name: p for p in after.packages}
    added = sorted(set(b) - set(a))
    removed = sorted(set(a) - set(b))
    changed = sorted(n for n in set(a) & set(b) if (a[n].version, a[n].build, a[n].sha256) != (b[n].version, b[n].build, b[n].sha256))
    if not (added or removed or changed):
        out.print(f"{name}: unchanged ({len(b)} packages)", highlight=False)
        return
    out.print(f"{name}: +{len(added)} -{len(removed)} ~{len(changed)}", highlight=False)
    for n in added:
        out.print(f"  + {b[n].label}", highlight=False, markup=False)
    for n in removed:
        out.print(f"  - {a[n].label}", highlight=False, markup=False)
    for n in changed:
        out.print(f"  ~ {n} {a[n].version} {a[n].build} -> {b[n].version} {b[n].build}", highlight=False, markup=False)


def run_lock_check(*, root: Path = Path("."), envs: list[str] | None = None, channels: list[str] | None = None,
                   facts: Facts | None = None, config: Path | None = None, require_lock: bool = False,
                   as_json: bool = False) -> int:
    problems, summary = lock.collect_problems(root=root, envs=envs, channels=channels, facts=facts, config=config,
                                              require_lock=require_lock)
    if as_json:  # for a CI step that parses stdout: the same verdict and exit code
        report.print_json({"ok": not problems, "summary": None if problems else summary,
                           "problems": [{"env": p.env, "package": p.package, "rule": p.rule, "message": p.message,
                                         "fix": p.fix} for p in problems]})
        return 1 if problems else 0
    out = report.console()
    for p in problems:
        out.print(p.line(), highlight=False, markup=False, soft_wrap=True)
    if problems:
        report.error_line(f"lock check: {len(problems)} problem(s)")
        return 1
    out.print(f"lock check: OK: {summary}", highlight=False, markup=False, soft_wrap=True)
    return 0
