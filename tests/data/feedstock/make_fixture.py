"""Regenerate render.json: the real conda-build's render of conda-forge's mmcv feedstock recipe
(this folder's copy, see README.md) for each of its linux-64 `.ci_support` configs.

Run with a Python that has conda and conda-build installed (not the project's venv), from the
repository root:

    CONDARC=/dev/null python tests/data/feedstock/make_fixture.py

conda_build.api.render(..., bypass_env_check=True, finalize=False), as for
tests/data/conda_build_render/render.json (our meta.yaml): no channel is asked for anything.
tests/test_feedstock_diff.py compares the two renders.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
OUT = HERE / "render.json"
KEYS = ("python", "cuda_compiler_version", "c_stdlib_version", "c_compiler_version", "cxx_compiler_version", "pytorch")


def main() -> int:
    import conda
    import conda_build
    from conda_build import api
    from conda_build.config import Config

    variants = []
    configs = sorted((HERE / "ci_support").glob("linux_64_*.yaml"))
    for cfg in configs:
        config = Config(variant_config_files=[str(cfg)], exclusive_config_files=[], platform="linux", arch="64",
                        verbose=False)
        for m, _, _ in api.render(str(HERE / "recipe"), config=config, bypass_env_check=True, finalize=False):
            if m.name() != "mmcv":
                continue  # the feedstock's top-level `mmcv-recipe` holds only the output
            reqs = m.get_section("requirements")
            test = m.get_section("test")
            variants.append({
                "ci_support": cfg.name,
                "variant": {k: str(m.config.variant[k]) for k in KEYS if k in m.config.variant},
                "name": m.name(),
                "version": m.version(),
                "build_string": m.build_id(),
                "build_number": int(m.build_number()),
                "requirements": {s: [" ".join(str(x).split()) for x in reqs.get(s) or []]
                                 for s in ("build", "host", "run", "run_constrained")},
                "script_env": list(m.get_value("build/script_env") or []),
                "test_requires": list(test.get("requires") or []),
                "test_imports": list(test.get("imports") or []),
                "test_commands": list(test.get("commands") or []),
                "license": m.get_value("about/license"),
                "summary": m.get_value("about/summary"),
            })
    inputs = [*sorted((HERE / "recipe").iterdir()), *configs]
    doc = {
        "generated_by": "CONDARC=/dev/null python tests/data/feedstock/make_fixture.py",
        "call": "conda_build.api.render('tests/data/feedstock/recipe', config=Config(variant_config_files=["
                "<one ci_support file>], platform='linux', arch='64'), bypass_env_check=True, finalize=False)",
        "feedstock": "conda-forge/mmcv-recipe-feedstock@29cb4f43f0508be2dcd14f24224506abb9df43d7",
        "conda_build": conda_build.__version__,
        "conda": conda.__version__,
        "python": sys.version.split()[0],
        "inputs_sha256": {p.relative_to(ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in inputs},
        "variants": variants,
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{OUT.relative_to(ROOT)}: {len(variants)} variants")
    return 0


if __name__ == "__main__":
    sys.exit(main())
