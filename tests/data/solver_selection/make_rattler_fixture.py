"""Regenerate rattler.json: py-rattler's answer for every machine of cases.json, and write the two
channels the answers come from (for make_conda_fixture.py). From the repository root:

    .venv/bin/python tests/data/solver_selection/make_rattler_fixture.py CHANNELS_DIR

CHANNELS_DIR/guarded: lab/src/mmstack_lab/standin/fake_channel.py's channel for the repository's
conda_build_config.yaml (mmcv per variant as recipes/mmcv renders it; STAND-IN cuda-arch, pytorch,
cuda-version); CHANNELS_DIR/unguarded: the same without the per-generation builds' `__cuda_arch`
run requirement (CEP 46's recipe pattern alone). tests/test_variants_selection.py solves the same
cases again and compares with this file and with conda.json.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

from mmstack.facts.gpus import load
from mmstack.variants import matrix, selection
from mmstack_lab.standin import fake_channel

HERE = Path(__file__).parent
ROOT = HERE.parents[2]


def channels(dest: Path) -> dict[str, Path]:
    rows = matrix.load_matrix(load(), ROOT / matrix.CONFIG_FILE)
    out = {}
    for name, guard in (("guarded", True), ("unguarded", False)):
        out[name] = fake_channel.build_channel(dest / name, fake_channel.standard_packages(rows, cuda_arch_guard=guard))
    return out


def answers(chans: dict[str, Path]) -> list[dict]:
    doc = json.loads((HERE / "cases.json").read_text())
    out = []
    for case in doc["cases"]:
        specs = case.get("specs") or [*doc["specs"], *case.get("extra_specs", [])]
        machine = selection.Machine(case["cuda"], case["cuda_arch"])
        answer = selection.solve([fake_channel.url(chans[case.get("channel", "guarded")])], specs, machine,
                                  package=case.get("package", "mmcv"))
        out.append({"id": case["id"], "specs": specs, "virtual_packages": machine.virtual_packages(),
                    **mask(answer.as_dict())})
    return out


def mask(answer: dict) -> dict:
    if answer.get("build"):
        answer = {**answer, "build": selection.mask_hash(str(answer["build"]))}
    return answer


def main() -> int:
    dest = Path(sys.argv[1]).resolve()
    chans = channels(dest)
    doc = {
        "what": "py-rattler's solve of cases.json over the fake channel (mmcv per variant of conda_build_config.yaml, "
                "STAND-IN cuda-arch/pytorch/cuda-version), virtual packages given as GenericVirtualPackage",
        "generated_by": ".venv/bin/python tests/data/solver_selection/make_rattler_fixture.py CHANNELS_DIR",
        "py_rattler": metadata.version("py-rattler"),
        "stand_in": "the channel is lab/src/mmstack_lab/standin/fake_channel.py's STAND-IN, not conda-forge",
        "answers": answers(chans),
    }
    (HERE / "rattler.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{HERE / 'rattler.json'}: {len(doc['answers'])} answers, py-rattler {doc['py_rattler']}; channels in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
