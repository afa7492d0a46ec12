"""Regenerate conda.json: what the REAL conda does with a channel whose packages have test receipts beside them.

Run with the project's venv (it builds the channels with lab/src/mmstack_lab/standin/fake_channel.py and mmstack), naming a
Python that has conda installed from its tagged sources (a scratch venv with conda 26.7.1 built from github
conda/conda at tag 26.7.1 and the nvidia-virtual-packages plugin v0.2.0, as for tests/data/solver_selection):

    .venv/bin/python tests/data/receipts/make_conda_fixture.py /tmp/condavenv/bin/python

Two copies of fake_channel's STAND-IN channel, indexed by `mmstack channel index`: `plain`, and `receipts`
with a receipt beside every package plus a stray JSON. On each, offline, classic solver:

    CONDA_OVERRIDE_CUDA=12.9 CONDA_OVERRIDE_CUDA_ARCH=8.9 CONDA_OVERRIDE_GLIBC=2.28 \
      conda create --json --offline -y -p ENV --override-channels -c CHANNEL mmcv     (a real install)

and records what it linked (name, version, build with the hash masked) and the files conda-meta lists.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
_HASH = re.compile(r"(?<![^_])h[0-9a-f]{7}_")
SPECS = ["mmcv"]
VIRTUAL = {"CONDA_OVERRIDE_CUDA": "12.9", "CONDA_OVERRIDE_CUDA_ARCH": "8.9", "CONDA_OVERRIDE_GLIBC": "2.28"}


def channels(work: Path) -> dict[str, Path]:
    from mmstack.builder import receipt
    from mmstack.builder.channel import index_channel
    from mmstack.facts.gpus import load
    from mmstack.variants.matrix import CONFIG_FILE, load_matrix
    from mmstack_lab.standin import fake_channel

    rows = load_matrix(load(), Path(CONFIG_FILE))
    plain = fake_channel.build_channel(work / "plain", fake_channel.standard_packages(rows))
    with_receipts = work / "receipts"
    shutil.copytree(plain, with_receipts)
    machine = receipt.machine([], source="none", cuda_runtime=None)
    machine["stand_in"] = "STAND-IN: no test ran; a receipt's shape, to see what conda does with the file"
    for pkg in sorted(with_receipts.glob("*/*.conda")):
        name, version, build = pkg.name.removesuffix(".conda").rsplit("-", 2)
        receipt.write(pkg, receipt.make(pkg, name=name, version=version, build_string=build, subdir=pkg.parent.name,
                                        test_results=[], machine_part=machine, tests_passed=None, seconds=0.0,
                                        via="tests/data/receipts/make_conda_fixture.py"))
    (with_receipts / "linux-64" / "stray.json").write_text("{}\n")
    index_channel(with_receipts)
    return {"plain": plain, "receipts": with_receipts}


def install(conda_python: str, channel: Path) -> dict:
    env = {**os.environ, "CONDARC": "/dev/null", "CONDA_SOLVER": "classic", "CONDA_ADD_PIP_AS_PYTHON_DEPENDENCY": "0",
           "CONDA_PKGS_DIRS": tempfile.mkdtemp(prefix="conda-pkgs-"), **VIRTUAL}
    prefix = Path(tempfile.mkdtemp(prefix="conda-env-")) / "env"
    run = subprocess.run([conda_python, "-m", "conda", "create", "--json", "--offline", "-y", "-p", str(prefix),
                          "--override-channels", "-c", channel.as_uri(), *SPECS], capture_output=True, text=True, env=env)
    doc = json.loads(run.stdout)
    if not doc.get("success"):
        return {"success": False, "message": str(doc.get("message") or doc.get("error"))[:600]}
    linked = sorted((p["name"], p["version"], _HASH.sub("h*_", p["build_string"])) for p in doc["actions"]["LINK"])
    files = sorted(f for m in (prefix / "conda-meta").glob("*.json") for f in json.loads(m.read_text()).get("files", []))
    return {"success": True, "linked": [list(x) for x in linked], "files": files,
            "receipts_in_pkgs_dir": sorted(p.name for p in Path(env["CONDA_PKGS_DIRS"]).rglob("*.receipt.json"))}


def main() -> int:
    conda_python = sys.argv[1]
    version = subprocess.run([conda_python, "-m", "conda", "--version"], capture_output=True, text=True,
                             env={**os.environ, "CONDARC": "/dev/null"}).stdout.split()[-1]
    work = Path(tempfile.mkdtemp(prefix="receipts-conda-"))
    answers = {name: install(conda_python, ch) for name, ch in channels(work).items()}
    doc = {
        "what": "the real conda's install of mmcv from a channel without and with test receipts beside its packages",
        "generated_by": ".venv/bin/python tests/data/receipts/make_conda_fixture.py CONDA_PYTHON",
        "conda": version, "solver": "classic", "env": {"CONDARC": "/dev/null", **VIRTUAL, "offline": True},
        "stand_in": "the channels are lab/src/mmstack_lab/standin/fake_channel.py's STAND-IN packages, not conda-forge",
        "specs": SPECS,
        "answers": answers,
    }
    (HERE / "conda.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{HERE / 'conda.json'}: conda {version}: " + ", ".join(f"{k}: {len(v.get('linked', []))} linked"
                                                                   for k, v in answers.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
