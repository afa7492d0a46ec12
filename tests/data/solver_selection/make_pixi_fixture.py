"""Regenerate pixi.json: pixi's rules for a rich platform (`cuda = { driver, arch }`) as pixi's source
implements them, applied to every platform of the repository's pixi.toml, and the mmcv build the
solve then takes. pixi itself is not run (its source is Rust; nothing of it is committed): the
rules below are read from github prefix-dev/pixi at the commit named (file and lines per rule), and
pixi solves with rattler's solver, which py-rattler is. From the repository root:

    .venv/bin/python tests/data/solver_selection/make_pixi_fixture.py

The channel is make_rattler_fixture.py's `guarded` one, built again here (STAND-IN).
"""

from __future__ import annotations

import json
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from mmstack.envs import pixi_manifest
from mmstack.facts.gpus import load
from mmstack.variants import matrix, selection
from mmstack_lab.standin import fake_channel

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
PIXI = {"repository": "prefix-dev/pixi", "version": "0.77.0", "commit": "2b25fc76dd3b5cc50a235387d948474975c40d73"}
RULES = [
    {"rule": "`cuda = { driver, arch }` declares `__cuda` = driver and `__cuda_arch` = arch (driver first), each a "
             "GenericVirtualPackage; a bare `cuda = \"12.9\"` declares `__cuda` alone",
     "file": "crates/pixi_manifest/src/toml/platform.rs", "lines": "440-500 (take_cuda_entry)"},
    {"rule": "`arch` without `driver` is refused: \"`cuda.arch` requires `cuda.driver`: `__cuda_arch` is only valid "
             "alongside `__cuda`\"; a raw `__cuda_arch` without `__cuda` is refused too (CudaArchRequiresCuda)",
     "file": "crates/pixi_manifest/src/toml/platform.rs; crates/pixi_manifest/src/platform.rs",
     "lines": "487-492; 265-274, 425-426"},
    {"rule": "CONDA_OVERRIDE_CUDA_ARCH replaces `__cuda_arch` (empty: removes it; build string 0) and `__cuda_arch` is "
             "dropped whenever no `__cuda` is left (CEP 46's coupling, as rattler's VirtualPackages::detect)",
     "file": "crates/pixi_core/src/workspace/mod.rs", "lines": "358-425 (apply_environment_variable_overrides)"},
    {"rule": "the declared `__cuda_arch` reaches the solver as rattler's CudaArch virtual package",
     "file": "crates/pixi_core/src/workspace/virtual_packages.rs", "lines": "69-71"},
    {"rule": "the solve takes the highest build number still satisfied by the platform's declared arch "
             "(pixi's own regression test, three cuda-arch builds sm90/sm100/sm120)",
     "file": "crates/pixi/tests/integration_rust/install_tests.rs", "lines": "2157-2220 (cuda_arch_selects_matching_build)"},
]


def main() -> int:
    rows = matrix.load_matrix(load(), ROOT / matrix.CONFIG_FILE)
    chan = fake_channel.build_channel(Path(tempfile.mkdtemp()) / "guarded", fake_channel.standard_packages(rows))
    manifest = pixi_manifest.load(ROOT / "pixi.toml")
    specs = json.loads((HERE / "cases.json").read_text())["specs"]
    answers = []
    for plat in manifest.platforms:
        vps = plat.virtual_packages
        answer = selection.solve([fake_channel.url(chan)], specs, selection.Machine(vps.get("__cuda"), vps.get("__cuda_arch")))
        out = answer.as_dict()
        if out.get("build"):
            out["build"] = selection.mask_hash(out["build"])
        answers.append({"platform": plat.name, "declared": dict(plat.declared), "virtual_packages": vps, "specs": specs, **out})
    doc = {
        "what": "pixi's rules for rich platforms (its source, cited per rule) applied to pixi.toml's platforms; the "
                "mmcv build rattler's solver (py-rattler) takes with those virtual packages",
        "generated_by": ".venv/bin/python tests/data/solver_selection/make_pixi_fixture.py",
        "pixi": PIXI, "py_rattler": metadata.version("py-rattler"), "rules": RULES,
        "stand_in": "the channel is lab/src/mmstack_lab/standin/fake_channel.py's STAND-IN, not conda-forge",
        "answers": answers,
    }
    (HERE / "pixi.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{HERE / 'pixi.json'}: {len(answers)} platforms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
