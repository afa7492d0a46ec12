"""Regenerate render.json: the real conda-build's render of recipes/mmcv/meta.yaml, every variant.

Run with a Python that has conda and conda-build installed (not the project's venv: conda-build is
not a dependency of mmstack), from the repository root:

    CONDARC=/dev/null python tests/data/conda_build_render/make_fixture.py
    CONDARC=/dev/null python tests/data/conda_build_render/make_fixture.py --target-platform linux-aarch64
    CONDARC=/dev/null python tests/data/conda_build_render/make_fixture.py --noarch

The third writes render_noarch.json: the noarch recipes' meta.yaml (recipes/mmengine, recipes/mmdet;
recipes/mmstack has none) through the same call, python_min left to the recipes' default as
conda_build_config.yaml sets none (tests/test_build_render.py compares it with recipe.yaml's render:
host `python <python_min>.*`, run `python >=<python_min>`, the test requirements).

The first writes render.json (linux-64), the second render_linux-aarch64.json: the rows that
conda_build_config.yaml's `# [aarch64]` selectors keep, rendered as conda-forge renders a
cross-compiled linux-aarch64 feedstock job: the build machine stays linux-64 and the variant sets
`target_platform: linux-aarch64` (what conda-smithy writes into .ci_support/linux_aarch64_*.yaml),
so `build_platform != target_platform` holds and the recipe's cross-compiling requirements show.
(Config(platform=, arch=) would instead pretend the build machine itself is aarch64.)

conda_build.api.render(..., bypass_env_check=True, finalize=False): no channel is asked for
anything, so the requirements are the recipe's as written (variant pins of bare names and
run_exports are applied only at finalize, by a solve). py-rattler-build's render (no solve either)
is compared against this file by tests/test_build_render.py.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "recipes" / "mmcv"
CONFIG = ROOT / "conda_build_config.yaml"
PLATFORMS = {"linux-64": "render.json", "linux-aarch64": "render_linux-aarch64.json"}
NOARCH = ("mmengine", "mmdet")  # the noarch recipes with a meta.yaml
KEYS = ("python", "cuda_compiler_version", "c_stdlib_version", "mmcv_arch_list", "arch_tag", "pytorch",
        "cuda_arch_min", "mmcv_priority")


def noarch() -> int:
    """render_noarch.json: each noarch meta.yaml as conda-build renders it (no solve)."""
    import conda
    import conda_build
    from conda_build import api
    from conda_build.config import Config

    out = Path(__file__).with_name("render_noarch.json")
    recipes = {}
    for name in NOARCH:
        config = Config(variant_config_files=[str(CONFIG)], exclusive_config_files=[], verbose=False)
        rendered = api.render(str(ROOT / "recipes" / name), config=config, bypass_env_check=True, finalize=False)
        builds = []  # one expected (python_min pins python, so the matrix's python is no loop variable)
        for m in {m.build_id(): m for m, _, _ in rendered}.values():
            reqs, test = m.get_section("requirements"), m.get_section("test")
            builds.append({
                "name": m.name(), "version": m.version(), "build_string": m.build_id(),
                "build_number": int(m.build_number()), "noarch": m.get_value("build/noarch"),
                "requirements": {s: [" ".join(str(x).split()) for x in reqs.get(s) or []] for s in ("build", "host", "run")},
                "test_requires": list(test.get("requires") or []),
                "test_imports": list(test.get("imports") or []),
                "test_commands": list(test.get("commands") or []),
            })
        recipes[name] = builds
    doc = {
        "generated_by": "CONDARC=/dev/null python tests/data/conda_build_render/make_fixture.py --noarch",
        "call": "conda_build.api.render('recipes/<name>', config=Config(variant_config_files=["
                "'conda_build_config.yaml']), bypass_env_check=True, finalize=False)",
        "channel": "none: finalize=False solves nothing",
        "conda_build": conda_build.__version__,
        "conda": conda.__version__,
        "python": sys.version.split()[0],
        "inputs_sha256": {p.relative_to(ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                          for p in (*(ROOT / "recipes" / n / "meta.yaml" for n in NOARCH), CONFIG)},
        "recipes": recipes,
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")
    built = ", ".join(f"{n} {b['build_string']}" for n, bs in recipes.items() for b in bs)
    print(f"{out}: {built}")
    return 0


def main(argv: list[str]) -> int:
    if "--noarch" in argv:
        return noarch()
    target = argv[argv.index("--target-platform") + 1] if "--target-platform" in argv else "linux-64"
    if target not in PLATFORMS:
        print(f"--target-platform: one of {', '.join(PLATFORMS)}", file=sys.stderr)
        return 2
    out = Path(__file__).with_name(PLATFORMS[target])
    import conda
    import conda_build
    from conda_build import api
    from conda_build.config import Config

    config = Config(variant_config_files=[str(CONFIG)], exclusive_config_files=[], verbose=False)
    cross = {} if target == "linux-64" else {"target_platform": target}
    if cross:  # the host (target) platform, also for the config file's `# [aarch64]` selectors
        config.host_platform, config.host_arch = target.split("-")
    rendered = api.render(str(RECIPE), config=config, variants=cross or None, bypass_env_check=True, finalize=False)
    variants = []
    for m, _, _ in rendered:
        reqs = m.get_section("requirements")
        test = m.get_section("test")
        variants.append({
            "variant": {k: str(m.config.variant[k]) for k in KEYS if k in m.config.variant},
            "name": m.name(),
            "version": m.version(),
            "build_string": m.build_id(),
            "build_number": int(m.build_number()),
            "requirements": {s: [" ".join(str(x).split()) for x in reqs.get(s) or []]
                             for s in ("build", "host", "run", "run_constrained")},
            "ignore_run_exports_from": list(m.get_value("build/ignore_run_exports_from") or []),
            "script_env": list(m.get_value("build/script_env") or []),
            "test_requires": list(test.get("requires") or []),
            "test_imports": list(test.get("imports") or []),
            "test_commands": list(test.get("commands") or []),
            "license": m.get_value("about/license"),
            "license_file": m.get_value("about/license_file"),
        })
    variants.sort(key=lambda v: (v["variant"]["python"], v["build_string"]))
    doc = {
        "generated_by": "CONDARC=/dev/null python tests/data/conda_build_render/make_fixture.py"
                        + ("" if target == "linux-64" else f" --target-platform {target}"),
        "call": "conda_build.api.render('recipes/mmcv', config=Config(variant_config_files=["
                "'conda_build_config.yaml'])" + (f" with host_platform, host_arch = '{target}'.split('-'), "
                f"variants={{'target_platform': '{target}'}}, " if target != "linux-64" else ", ")
                + "bypass_env_check=True, finalize=False)",
        "channel": "none: finalize=False solves nothing (run_exports and variant pins of bare names not applied)",
        "conda_build": conda_build.__version__,
        "conda": conda.__version__,
        "python": sys.version.split()[0],
        "inputs_sha256": {p.relative_to(ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                          for p in (RECIPE / "meta.yaml", CONFIG)},
        "variants": variants,
    }
    if target != "linux-64":
        doc = {"target_platform": target, **doc}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{out}: {len(variants)} variants")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
