"""`mmstack gpus`, `mmstack arch check`, `mmstack matrix`."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path

from .. import arch as archmod
from .. import report, variants
from ..errors import BadInput
from ..facts import load


def run_gpus(*, name: str | None, as_json: bool) -> int:
    facts = load()
    if name:
        gpu = facts.find_gpu(name)
        cc = gpu.compute_capability
        first = facts.first_toolkit_for(cc)
        gen = facts.env(gpu.generation) if gpu.generation else None
        data = {
            "name": gpu.name,
            "aliases": list(gpu.aliases),
            "compute_capability": cc,
            "sm": archmod.parse_arch(cc).sm,
            "architecture": gpu.architecture,
            "environment": gpu.generation or None,
            "first_cuda": first.version if first else None,
            "cuda_versions": [t.version for t in facts.toolkits_for(cc)],
            "env_cuda": gen.cuda if gen else None,
            "min_driver_for_env_cuda": facts.toolkit(gen.cuda).min_driver if gen else None,
            "verify": f"pixi run -e {gpu.generation} verify" if gpu.generation else None,
            "source": gpu.source,
        }
        if as_json:
            report.print_json(data)
        else:
            report.print_table(["field", "value"], [(k, ", ".join(v) if isinstance(v, list) else v) for k, v in data.items()],
                               title=gpu.name)
        return 0
    rows = []
    for gpu in sorted(facts.gpu, key=lambda g: (archmod.parse_arch(g.compute_capability), g.name)):
        first = facts.first_toolkit_for(gpu.compute_capability)
        rows.append({
            "name": gpu.name,
            "compute_capability": gpu.compute_capability,
            "architecture": gpu.architecture,
            "environment": gpu.generation or None,
            "first_cuda": first.version if first else None,
        })
    if as_json:
        report.print_json(rows)
    else:
        report.print_table(["GPU", "CC", "architecture", "env", "first CUDA"],
                           [(r["name"], r["compute_capability"], r["architecture"], r["environment"] or "-",
                             r["first_cuda"]) for r in rows], title="Known GPUs")
    return 0


def run_arch_check(*, gpu: str, arch_list: str, cuda: str | None, as_json: bool) -> int:
    a = archmod.assess(load(), gpu_name=gpu, arch_list=arch_list, cuda=cuda)
    if as_json:
        report.print_json(a.as_dict())
    else:
        label = {"native": "OK", "lower-minor": "WARN", "ptx-jit": "WARN"}.get(a.verdict, "FAIL")
        report.console().print(f"{report.status_style(label)} {a.gpu} (sm {a.compute_capability}) with "
                               f"[bold]{a.arch_list}[/]{f' on CUDA {a.cuda}' if a.cuda else ''}: {a.verdict}")
        report.console().print(f"  why: {a.reason}", markup=False)
        if a.fix:
            report.console().print(f"  fix: {a.fix}", markup=False)
    return 0 if a.ok else 1


def run_matrix(*, fmt: str, config: Path) -> int:
    if fmt not in {"table", "json", "github"}:
        raise BadInput(f"--format {fmt!r} is not one of table, json, github", fix="pass --format table|json|github")
    matrix = variants.load_matrix(load(), config)
    if fmt == "json":
        report.print_json([v.as_dict() for v in matrix])
    elif fmt == "github":
        from ..workflows import github_matrix

        print(jsonlib.dumps(github_matrix(matrix, config_path=config), separators=(",", ":")))
    else:
        report.print_table(
            ["python", "pytorch", "CUDA", "arch list", "build string", "serves env"],
            [(v.python, v.pytorch, v.cuda or "-", v.arch_list, v.build_string_glob, ", ".join(v.envs) or "(plain install)")
             for v in matrix],
            title=f"{len(matrix)} variants from {config}",
        )
    return 0
