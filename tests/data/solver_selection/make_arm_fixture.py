"""Regenerate arm_conda.json: what the REAL conda installs for `mmcv` on every Arm-hosted GPU's platform of
envs/arm/pixi.toml, over a linux-aarch64 channel of the `# [aarch64]` rows. Two steps, from the
repository root:

    .venv/bin/python tests/data/solver_selection/make_arm_fixture.py channels CHANNELS_DIR
    CONDARC=/dev/null CONDA_PY=/path/to/conda-venv/bin/python \\
      $CONDA_PY tests/data/solver_selection/make_arm_fixture.py conda CHANNELS_DIR

The first (the project's venv) writes CHANNELS_DIR/recipe, lab/src/mmstack_lab/standin/fake_channel.py's
channel for the aarch64 rows with the run requirements recipes/mmcv renders (`__cuda_arch >=<min>,<next
major>`), and CHANNELS_DIR/unbounded, the same with `__cuda_arch >=<min>` (the recipe before its upper
bound); STAND-IN cuda-arch, pytorch and cuda-version. The second (a Python with conda 26.7.1 and the
nvidia-virtual-packages plugin, as make_conda_fixture.py says; stdlib only besides conda) solves each
platform with make_conda_fixture.py's `solve` (classic solver, offline dry run, CONDA_OVERRIDE_CUDA /
CONDA_OVERRIDE_CUDA_ARCH the platform's `cuda = { driver, arch }`) with CONDA_SUBDIR=linux-aarch64.
tests/test_arm_selection.py solves the same with py-rattler and compares.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import tomllib

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
ARM_MANIFEST = ROOT / "envs" / "arm" / "pixi.toml"
SUBDIR = "linux-aarch64"
SPECS = ["mmcv", "python 3.11.*"]
CHANNELS = {"recipe": True, "unbounded": False}  # name -> cuda_arch_bound


def platforms() -> list[dict]:
    """envs/arm/pixi.toml's rich platforms (read with tomllib: this step runs where mmstack is not installed)."""
    raw = tomllib.loads(ARM_MANIFEST.read_text())["workspace"]["platforms"]
    return [p for p in raw if isinstance(p, dict)]


def write_channels(dest: Path) -> None:
    from mmstack.facts.gpus import load
    from mmstack.variants import matrix
    from mmstack_lab.standin import fake_channel

    rows = matrix.load_matrix(load(), ROOT / matrix.CONFIG_FILE, SUBDIR)
    for name, bound in CHANNELS.items():
        pkgs = fake_channel.standard_packages(rows, pythons=("3.11",), subdir=SUBDIR, cuda_arch_bound=bound)
        fake_channel.build_channel(dest / name, pkgs)
        print(dest / name)


def conda_answers(chans: Path) -> int:
    from importlib import metadata

    import conda
    from make_conda_fixture import solve  # this script's own directory, as Python puts it on sys.path

    os.environ["CONDA_SUBDIR"] = SUBDIR
    answers = []
    for plat in platforms():
        for name in CHANNELS:
            got = solve(chans / name, SPECS, plat["cuda"]["driver"], plat["cuda"]["arch"], "mmcv")
            answers.append({"platform": plat["name"], "channel": name, "specs": SPECS, **got})
            print(plat["name"], name, got.get("build") or got.get("exception_name"), flush=True)
    doc = {
        "what": "the real conda's answer (dry run, CONDA_SUBDIR=linux-aarch64) for mmcv on each Arm platform of "
                "envs/arm/pixi.toml, over the aarch64 rows with the recipe's `__cuda_arch` range (recipe) and "
                "without its upper bound (unbounded)",
        "generated_by": "CONDARC=/dev/null python tests/data/solver_selection/make_arm_fixture.py conda CHANNELS_DIR",
        "conda": conda.__version__, "solver": "classic",
        "nvidia_virtual_packages": metadata.version("nvidia-virtual-packages"),
        "python": sys.version.split()[0],
        "env": {"CONDARC": "/dev/null", "CONDA_OVERRIDE_GLIBC": "2.28", "CONDA_SUBDIR": SUBDIR, "offline": True},
        "stand_in": "STAND-IN: the channels are lab/src/mmstack_lab/standin/fake_channel.py's, not conda-forge",
        "answers": answers,
    }
    (HERE / "arm_conda.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{HERE / 'arm_conda.json'}: {len(answers)} answers, conda {conda.__version__}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("channels", "conda"):
        print("usage: make_arm_fixture.py channels|conda CHANNELS_DIR", file=sys.stderr)
        return 2
    dest = Path(argv[2]).resolve()
    if argv[1] == "channels":
        write_channels(dest)
        return 0
    return conda_answers(dest)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
