"""Regenerate conda.json: what the REAL conda installs for every machine of cases.json.

Run with a Python that has conda installed from its tagged sources (not the project's venv: a
scratch venv with conda 26.7.1 built from github conda/conda at tag 26.7.1, as for
tests/data/conda_solve) plus the nvidia-virtual-packages plugin (github
conda-incubator/nvidia-virtual-packages at tag v0.2.0, installed from a wheel built from it), on
the channels make_rattler_fixture.py wrote:

    CONDARC=/dev/null python tests/data/solver_selection/make_conda_fixture.py CHANNELS_DIR

Per case, offline, classic solver, a dry run:

    CONDA_OVERRIDE_CUDA=<cuda or ''> CONDA_OVERRIDE_CUDA_ARCH=<cuda_arch or ''> \
      conda create --dry-run --json --offline -p ENV --override-channels -c CHANNEL SPECS...

An empty CONDA_OVERRIDE_CUDA removes `__cuda` (and, by CEP 46, `__cuda_arch`); an empty
CONDA_OVERRIDE_CUDA_ARCH removes `__cuda_arch` only, which is what a conda without the plugin sees.
Stdlib only besides conda.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).parent
_HASH = re.compile(r"_h[0-9a-f]{7}_")


def solve(channel: Path, specs: list[str], cuda: str | None, cuda_arch: str | None, package: str) -> dict:
    env = {**os.environ, "CONDA_SOLVER": "classic", "CONDA_ADD_PIP_AS_PYTHON_DEPENDENCY": "0",
           "CONDA_PKGS_DIRS": tempfile.mkdtemp(prefix="conda-pkgs-"),
           "CONDA_OVERRIDE_CUDA": cuda or "", "CONDA_OVERRIDE_CUDA_ARCH": cuda_arch or "",
           "CONDA_OVERRIDE_GLIBC": "2.28"}
    prefix = Path(tempfile.mkdtemp(prefix="conda-env-")) / "env"
    run = subprocess.run([sys.executable, "-m", "conda", "create", "--dry-run", "--json", "--offline", "-p", str(prefix),
                          "--override-channels", "-c", channel.as_uri(), *specs],
                         capture_output=True, text=True, env=env)
    doc = json.loads(run.stdout)
    vps = {}
    info = subprocess.run([sys.executable, "-m", "conda", "info", "--json"], capture_output=True, text=True, env=env)
    for name, version, _build in json.loads(info.stdout).get("virtual_pkgs", []):
        if name.startswith("__cuda"):
            vps[name] = version
    if not doc.get("success"):
        message = " ".join(ln.strip() for ln in str(doc.get("message") or doc.get("error")).splitlines() if ln.strip())
        return {"virtual_packages": vps, "unsatisfiable": message[:1200], "exception_name": doc.get("exception_name")}
    link = next(p for p in doc["actions"]["LINK"] if p["name"] == package)
    return {"virtual_packages": vps, "version": link["version"], "build": _HASH.sub("_h*_", link["build_string"]),
            "build_number": int(link["build_number"])}


def main() -> int:
    import conda

    chans = Path(sys.argv[1]).resolve()
    cases = json.loads((HERE / "cases.json").read_text())
    answers = []
    for case in cases["cases"]:
        specs = case.get("specs") or [*cases["specs"], *case.get("extra_specs", [])]
        answers.append({"id": case["id"], "specs": specs,
                        **solve(chans / case.get("channel", "guarded"), specs, case["cuda"], case["cuda_arch"],
                              case.get("package", "mmcv"))})
        print(answers[-1]["id"], answers[-1].get("build") or answers[-1].get("exception_name"), flush=True)
    doc = {
        "what": "the real conda's answer (dry run) for every machine of cases.json on make_rattler_fixture.py's channels",
        "generated_by": "CONDARC=/dev/null python tests/data/solver_selection/make_conda_fixture.py CHANNELS_DIR",
        "conda": conda.__version__, "solver": "classic",
        "nvidia_virtual_packages": metadata.version("nvidia-virtual-packages"),
        "python": sys.version.split()[0],
        "env": {"CONDARC": "/dev/null", "CONDA_OVERRIDE_GLIBC": "2.28", "offline": True},
        "stand_in": "the channels are lab/src/mmstack_lab/standin/fake_channel.py's STAND-IN, not conda-forge",
        "answers": answers,
    }
    (HERE / "conda.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{HERE / 'conda.json'}: {len(answers)} answers, conda {conda.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
