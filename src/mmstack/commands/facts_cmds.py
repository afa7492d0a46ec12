"""`mmstack gpus`, `mmstack arch check`, `mmstack matrix`."""

from __future__ import annotations

import json as jsonlib
import os
import re
from pathlib import Path

from mmstack import report
from mmstack.errors import BadInput
from mmstack.facts import arch as archmod
from mmstack.facts.gpus import load, version_key
from mmstack.progress import steps_on_stderr
from mmstack.variants import matrix as variants

_MB = 1 << 20
LARGE_PACKAGE = 100 * _MB  # compressed members: `arch check --package` shows its progress above this


def _fat_builds(facts) -> tuple[archmod.Build, ...]:
    """The matrix's builds no generation environment takes (the fat `cuda129_all`), from the
    conda_build_config.yaml here (a checkout of mmstack); none where it cannot be read."""
    from mmstack.errors import CheckFailed

    config = Path(variants.CONFIG_FILE)
    if not config.is_file():
        return ()
    try:
        matrix = variants.load_matrix(facts, config)
    except (BadInput, CheckFailed):
        return ()
    return tuple(archmod.Build(v.build_string_prefix, v.cuda, v.targets) for v in matrix
                 if v.cuda is not None and v.arch_tag == variants.FAT_TAG)


def _arm_matrix(facts) -> tuple[list, list]:
    """The linux-aarch64 rows of the conda_build_config.yaml here and envs/arm/pixi.toml's generations."""
    from mmstack.envs import arm_platforms

    return arm_platforms.load_rows(facts, Path(variants.CONFIG_FILE))


def _gpu_row(facts, gpu, builds: tuple = (), arm: tuple[list, list] = ([], [])) -> dict:
    from mmstack.envs import arm_platforms

    host_build, host_env = arm_platforms.host_choice(gpu.name, gpu.compute_capability, gpu.host, *arm)
    served = archmod.serving_env(facts, gpu.compute_capability, segment=gpu.segment, host=gpu.host, builds=builds,
                                 host_build=host_build, host_env=host_env)
    return {
        "name": gpu.name,
        "compute_capability": gpu.compute_capability,
        "architecture": gpu.architecture,
        "segment": gpu.segment,
        "host": gpu.host or "linux-64 or linux-aarch64",
        "first_cuda": facts.first_cuda(gpu.compute_capability),
        "last_cuda": facts.last_cuda(gpu.compute_capability),
        "environment": served.env,
        "environment_runs": served.coverage.value,
        "environment_reason": served.reason,
        "build": served.build,
    }


def _arch_filter(text: str):
    """'8.6' / 'sm_86' -> exactly that capability; '8' / '8.x' / 'sm_8x' -> the whole major."""
    t = text.strip().lower()
    m = re.fullmatch(r"(\d{1,2})(?:\.x)?|sm_(\d{1,2})x", t)
    if m:
        major = int(m.group(1) or m.group(2))
        return lambda cc: archmod.parse_arch(cc).major == major
    want = archmod.parse_arch(text, where="--arch")
    return lambda cc: archmod.parse_arch(cc) == want.plain


def run_gpus(*, name: str | None, as_json: bool, arch: str | None = None, env: str | None = None) -> int:
    facts = load()
    if name:
        gpu = facts.find_gpu(name)
        cc = gpu.compute_capability
        row = _gpu_row(facts, gpu, _fat_builds(facts), _arm_matrix(facts))
        gen = facts.env(row["environment"]) if row["environment"] else None
        data = {
            **row,
            "aliases": list(gpu.aliases),
            "sm": archmod.parse_arch(cc).sm,
            "binary_compatibility": (f"Tegra: only {archmod.parse_arch(cc).sm} SASS runs (or PTX)" if cc in facts.tegra
                                     else f"desktop: SASS of {cc.split('.')[0]}.x at or below {cc} runs"),
            "cuda_versions": [t.version for t in sorted(facts.toolkits_for(cc), key=lambda t: t.key)],
            "env_cuda": gen.cuda if gen else None,
            "min_driver_for_env_cuda": facts.toolkit(gen.cuda).driver if gen else None,
            "verify": f"pixi run -e {gen.env} verify" if gen else None,
            "chip": gpu.chip,
            "nvidia_list_says": gpu.nvidia_list_says or None,
            "same_chip_as": gpu.same_chip_as or None,
            "source": gpu.source,
        }
        if as_json:
            report.print_json(data)
        else:
            report.print_table(["field", "value"], [(k, ", ".join(v) if isinstance(v, list) else v) for k, v in data.items()],
                               title=gpu.name)
        return 0
    keep_arch = _arch_filter(arch) if arch else (lambda cc: True)
    if env is not None and env != "none":
        facts.env(env)  # unknown env: exit 2 with a did-you-mean
    rows = []
    builds = _fat_builds(facts)
    arm = _arm_matrix(facts)
    for gpu in sorted(facts.gpu, key=lambda g: (archmod.parse_arch(g.compute_capability), g.name)):
        if not keep_arch(gpu.compute_capability):
            continue
        row = _gpu_row(facts, gpu, builds, arm)
        if env is not None and (row["environment"] or "none") != env:
            continue
        rows.append(row)
    if as_json:
        report.print_json(rows)
    else:
        runs = {"native": "native", "lower-minor": "lower minor", "ptx-jit": "PTX JIT", "none": "-"}
        report.print_table(["GPU", "CC", "architecture", "first CUDA", "env", "runs"],
                           [(r["name"], r["compute_capability"], r["architecture"], r["first_cuda"],
                             r["environment"] or (f"none ({r['build']})" if r["build"] else "none"),
                             runs[r["environment_runs"]]) for r in rows],
                           title=f"{len(rows)} GPUs" + (f" (--arch {arch})" if arch else "") + (f" (--env {env})" if env else ""))
    return 0


def _system_glibc() -> str | None:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").split()[-1]
    except (ValueError, OSError, AttributeError, IndexError):
        return None


def with_glibc(a, listings, glibc: str | None):
    """A package's assessment plus what its objects need from glibc: a note always, and a failure
    when they need a newer glibc than `glibc` (the system it is meant for)."""
    from dataclasses import replace

    from mmstack.facts.elf import glibc_version_key
    from mmstack.facts.fatbin import glibc_floor

    needed, where = glibc_floor(listings)
    if needed is None or where is None:
        return a
    obj = where.split("!")[-1]
    note = f"its objects need glibc >= {needed} (GLIBC_{needed} symbols in {obj})"
    if glibc and glibc_version_key(needed) > glibc_version_key(glibc):
        return replace(a, ok=False, notes=(*a.notes, note),
                       reason=f"{a.reason}; and it cannot load on glibc {glibc}: {obj} needs "
                              f"GLIBC_{needed} (a build linked against a newer glibc than this system's)",
                       fix=f"use a build made against an older sysroot (conda-forge's sysroot_linux-64 <= {glibc}: "
                           f"its `__glibc` run requirement says which), or a system with glibc >= {needed}")
    return replace(a, notes=(*a.notes, note))


def _read_package(package: Path, *, quiet: bool) -> list:
    """The package's listings; unless `quiet`, stderr shows the megabytes read of one over LARGE_PACKAGE."""
    from mmstack.facts.fatbin import list_fatbins

    watch = steps_on_stderr("arch check", quiet=quiet)

    def on_read(done: int, total: int) -> None:
        if watch and total > LARGE_PACKAGE:
            watch.count(f"reading {package.name}", done // _MB, total // _MB, "MB")

    try:
        return list_fatbins(package, on_read=on_read)
    finally:
        if watch:
            watch.close()


def run_arch_check(*, gpu: str | None, arch_list: str | None, cuda: str | None, as_json: bool,
                   cc: str | None = None, package: Path | None = None, glibc: str | None = None,
                   quiet: bool = False) -> int:
    facts = load()
    if glibc is not None and package is None:
        raise BadInput("--glibc goes with --package (an arch list has no binaries to read)", fix="drop --glibc")
    if glibc is not None and not re.fullmatch(r"\d+\.\d+", glibc):
        raise BadInput(f"--glibc {glibc!r} is not a glibc version", fix="e.g. --glibc 2.28 (ldd --version tells)")
    if arch_list is not None and package is None:
        a = archmod.assess(facts, gpu_name=gpu, cc=cc, arch_list=arch_list, cuda=cuda, builds=_fat_builds(facts))
    elif package is not None and arch_list is None:
        if cuda is not None:
            raise BadInput("--cuda goes with --arch-list (a package is already built)", fix="drop --cuda")
        if gpu is None and cc is None:
            raise BadInput("name the GPU: --gpu NAME or --cc X.Y", fix="e.g. --gpu 'RTX 4090' or --cc 8.9")
        listings = _read_package(package, quiet=quiet)
        a = archmod.assess_package(facts, listings, package=str(package), gpu_name=gpu, cc=cc, builds=_fat_builds(facts))
        a = with_glibc(a, listings, glibc or _system_glibc())
    else:
        raise BadInput("give exactly one of --arch-list LIST or --package PATH",
                       fix="e.g. --arch-list '8.6;9.0+PTX' or --package torchvision-*.whl")
    if as_json:
        report.print_json(a.as_dict())
    else:
        label = {"native": "OK", "lower-minor": "WARN", "ptx-jit": "WARN"}.get(a.verdict, "FAIL") if a.ok else "FAIL"
        what = f"{package.name}" if package is not None else f"[bold]{a.arch_list}[/]"
        report.console().print(f"{report.status_style(label)} {a.gpu} (sm {a.compute_capability}) with "
                               f"{what}{f' on CUDA {a.cuda}' if a.cuda else ''}: {a.verdict}")
        report.console().print(f"  why: {a.reason}", markup=False)
        for note in a.notes:
            report.console().print(f"  note: {note}", markup=False)
        for f in a.files:
            report.console().print(f"  file: {f['path'].split('!')[-1]}: SASS [{', '.join(f['sass']) or '-'}],"
                                   f" PTX [{', '.join(f['ptx']) or '-'}] -> {f['verdict']}"
                                   + (f" (bundles with no code for it: {', '.join(f['failing_bundles'])})"
                                      if f.get("failing_bundles") else ""), markup=False)
        if a.fix:
            report.console().print(f"  fix: {a.fix}", markup=False)
    return 0 if a.ok else 1


def run_matrix(*, fmt: str, config: Path, target_platform: str = variants.PLATFORM) -> int:
    if fmt not in {"table", "json", "github"}:
        raise BadInput(f"--format {fmt!r} is not one of table, json, github", fix="pass --format table|json|github")
    from mmstack.errors import CheckFailed
    from mmstack.facts.pytorch import load_pytorch
    from mmstack.variants import ci_cost, pytorch_rows

    matrix = variants.load_matrix(load(), config, target_platform)
    torch_facts = load_pytorch()
    wrong = pytorch_rows.problems(matrix, torch_facts)
    if target_platform != variants.PLATFORM:
        from mmstack.variants import arm_hosts

        arm = arm_hosts.problems(matrix, load())
        if arm:
            raise CheckFailed(arm[0], source=str(config), fix=f"keep the `# [aarch64]` rows to src/mmstack/data/{arm_hosts.ARM_FILE}")
    if wrong:
        raise CheckFailed(wrong[0], source=str(config), fix="build against conda-forge's pin or migration target, for the Pythons it is built for (src/mmstack/data/pytorch.toml)")
    if fmt == "json":
        report.print_json([{**v.as_dict(), "pytorch_role": getattr(torch_facts.row(v.pytorch), "role", None)} for v in matrix])
    elif fmt == "github":
        from mmstack.ci.workflows import github_matrix

        print(jsonlib.dumps(github_matrix(matrix, config_path=config), separators=(",", ":")))
    else:
        report.print_table(
            ["python", "pytorch", "CUDA", "arch list", "build string", "serves env"],
            [(v.python, torch_facts.label(v.pytorch), v.cuda or "-", v.arch_list, v.build_string_glob, _serves(v, matrix))
             for v in matrix],
            title=f"{len(matrix)} variants from {config}" + ("" if target_platform == variants.PLATFORM else f" for {target_platform}"),
        )
        if target_platform != variants.PLATFORM:
            cost = ci_cost.release_cost(matrix)
            print(f"CI cross-compiles these {cost.variants} rows on {variants.PLATFORM} (build.yml's build_aarch64 jobs): "
                  f"about {cost.rows_hours:.1f} CPU-hours per release, an estimate at the {variants.PLATFORM} builds' "
                  f"measured CPU-s per kind ({ci_cost.COSTS_FILE}; no {target_platform} build has been timed); "
                  "`mmstack matrix` prints the release total they are part of")
            return 0
        others = {p: variants.load_matrix(load(), config, p) for p in variants.PLATFORMS if p != variants.PLATFORM}
        total = ci_cost.release_total(matrix, others)
        cost = total.measured
        per_pt = ", ".join(f"pytorch {torch_facts.label(k)} {h:.1f}" for k, h in cost.by_pytorch.items())
        parts = [f"{variants.PLATFORM} {cost.hours:.1f} for {cost.variants} variants ({per_pt}; noarch "
                 f"{cost.noarch_hours * 3600:.0f} CPU-s), from the measured builds in {ci_cost.COSTS_FILE}"]
        parts += [f"{p} {c.rows_hours:.1f} for {c.variants} variants, an estimate at {variants.PLATFORM}'s measured "
                  f"CPU-s per kind (cross-compiled; no {p} build has been timed)" for p, c in total.estimated.items()]
        print(f"CI build cost per release: {total.hours:.1f} CPU-hours for {total.variants} variants: {'; '.join(parts)}")
    return 0


def _serves(v, rows) -> str:
    """`mmstack matrix`'s last column: the environments a row serves; on linux-aarch64 (no
    installable environments yet) the Arm hosts a solver installs it on (arm_hosts.serving_row over
    `rows`, the matrix of its platform)."""
    if v.platform != variants.PLATFORM:
        from mmstack.variants import arm_hosts

        if v.cuda is None:
            return "(any linux-aarch64 machine: no CUDA)"
        hosts = arm_hosts.hosts_of(v, rows)
        return ", ".join(hosts) + (" (and any GPU without __cuda_arch)" if v.arch_tag == variants.FAT_TAG else "")
    return ", ".join(v.envs) or "(any GPU: the install without __cuda_arch)"


# -- `arch check --channel`: the build a solver installs for a GPU (CEP 46's `__cuda_arch`) --------

def solver_pick(facts, machine, channels: list[str]) -> dict:
    """What the solver installs for `mmcv` over `channels` on `machine`, with and without its
    `__cuda_arch` (a conda without the nvidia-virtual-packages plugin), and how the GPU runs the pick
    (the matrix's arch set for that build, where ./conda_build_config.yaml is readable)."""
    from mmstack.errors import CheckFailed
    from mmstack.variants import selection

    urls = selection.channel_urls(channels)
    rows: list = []
    if Path(variants.CONFIG_FILE).is_file():
        try:
            rows = variants.load_matrix(facts, Path(variants.CONFIG_FILE))
        except (BadInput, CheckFailed):
            rows = []

    def one(m) -> dict:
        answer = selection.solve(urls, ["mmcv"], m).as_dict()
        row = next((v for v in rows if answer.get("build") and v.build_string_prefix == selection.build_prefix(answer["build"])), None)
        if row is not None and m.cuda_arch:
            cov = archmod.coverage(archmod.parse_arch(m.cuda_arch), row.targets)
            answer["arch_list"], answer["runs"] = row.arch_list, cov.coverage.value
        return {"virtual_packages": {k: v for k, v in m.virtual_packages().items() if k.startswith("__cuda")}, **answer}

    out = {"channels": channels, "specs": ["mmcv"], "with_cuda_arch": one(machine)}
    if machine.cuda_arch:
        out["without_cuda_arch"] = one(selection.Machine(machine.cuda, None))
    return out


def solver_pick_lines(pick: dict) -> list[str]:
    def say(a: dict) -> str:
        vps = ", ".join(f"{k} {v}" for k, v in a["virtual_packages"].items()) or "no __cuda"
        if "unsatisfiable" in a:
            return f"{vps}: no mmcv installs: {a['unsatisfiable'][:300]}"
        runs = f" ({a['arch_list']}: {a['runs']} here)" if a.get("runs") else ""
        return f"{vps}: mmcv {a['version']} {a['build']}{runs}"
    lines = [f"solver (py-rattler) over {', '.join(pick['channels'])}: {say(pick['with_cuda_arch'])}"]
    if "without_cuda_arch" in pick:
        lines.append(f"  a conda without __cuda_arch (no nvidia-virtual-packages plugin): {say(pick['without_cuda_arch'])}")
    return lines


def run_arch_channel(*, gpu: str | None, cc: str | None, channels: list[str], cuda: str | None, as_json: bool) -> int:
    """`arch check --channel`: which mmcv build of the channels a solver installs for the GPU named."""
    from mmstack.variants import selection

    facts = load()
    if (gpu is None) == (cc is None):
        raise BadInput("name the GPU: --gpu NAME or --cc X.Y", fix="e.g. --gpu 'RTX 4090' --channel ./channel --channel conda-forge")
    name = gpu
    arch = str(archmod.parse_arch(cc, where="--cc").plain) if cc else facts.find_gpu(gpu or "").compute_capability
    if cuda is None:
        served = archmod.serving_env(facts, arch)
        gen = facts.env(served.env) if served.env else None
        newest = max((t.version for t in facts.toolkits_for(arch)), key=version_key, default=None)
        cuda = gen.cuda if gen and gen.cuda else newest
        if cuda is None:
            raise BadInput(f"no CUDA toolkit of the facts builds for compute capability {arch}", fix="pass --cuda X.Y (the driver's CUDA)")
    pick = solver_pick(facts, selection.Machine(cuda, arch), channels)
    pick = {"gpu": name or f"compute capability {arch}", "cuda_arch": arch, **pick}
    if as_json:
        report.print_json(pick)
    else:
        report.console().print(f"{pick['gpu']}: __cuda_arch {arch}", markup=False, highlight=False)
        for line in solver_pick_lines(pick):
            report.console().print(line, markup=False, highlight=False, soft_wrap=True)
    chosen = pick["with_cuda_arch"]
    return 0 if "unsatisfiable" not in chosen and chosen.get("runs", "native") != "none" else 1
