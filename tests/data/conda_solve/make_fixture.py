"""Regenerate solve.json: what the REAL conda does with the mission's command on the e2e channel.

Run with a Python that has conda installed from its tagged sources (not the project's venv: conda
is not a dependency of mmstack; a scratch venv with conda 26.7.1 built from github conda/conda at
tag 26.7.1, menuinst 2.5.2 from its tag, pycosat from PyPI), after tests/test_build_e2e.py built
and cached its channel:

    CONDARC=/dev/null python tests/data/conda_solve/make_fixture.py CHANNEL STANDIN

CHANNEL is the e2e channel (~/.cache/mmstack-tests/mmcv-cpu-<key>), STANDIN the bootstrap channel
it was built against (~/.cache/mmstack-tests/bootstrap-<key>). It runs, offline, with the classic
solver and without conda's implicit pip-with-python (py-rattler adds none):

    conda create -p ENV --override-channels -c CHANNEL -c STANDIN mmcv mmdet mmstack "python=3.11"

then, in ENV, `python -c "import mmcv.ops"` and `mmstack verify --levels L1,L3 --json`, and
records the solution (name, version, build with its hash masked, which channel) and what the two
commands said. tests/test_build_e2e.py solves the same specs with py-rattler over the same
channels and compares.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT = Path(__file__).with_name("solve.json")
SPECS = ["mmcv", "mmdet", "mmstack", "python=3.11"]
_HASH = re.compile(r"h[0-9a-f]{7}")


def label(url: str, channel: Path, standin: Path) -> str:
    return "channel" if str(channel) in url else "standin" if str(standin) in url else url


def main() -> int:
    import conda

    channel, standin = (Path(a).resolve() for a in sys.argv[1:3])
    env = {**os.environ, "CONDA_ADD_PIP_AS_PYTHON_DEPENDENCY": "0", "CONDA_SOLVER": "classic",
           "CONDA_PKGS_DIRS": tempfile.mkdtemp(prefix="conda-pkgs-")}
    prefix = Path(tempfile.mkdtemp(prefix="conda-env-")) / "env"
    cmd = [sys.executable, "-m", "conda", "create", "--yes", "--json", "--offline", "-p", str(prefix),
           "--override-channels", "-c", channel.as_uri(), "-c", standin.as_uri(), *SPECS]
    started = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = round(time.monotonic() - started, 1)
    doc = json.loads(run.stdout)
    if run.returncode != 0 or not doc.get("success"):
        print(run.stdout[-3000:], run.stderr[-3000:], file=sys.stderr)
        return 1
    links = doc["actions"]["LINK"]
    packages = sorted(({"name": p["name"], "version": p["version"],
                        "build": _HASH.sub("h*", p.get("build") or p.get("build_string") or p["dist_name"].rsplit("-", 1)[1]),
                        "channel": label(str(p.get("base_url") or p.get("channel") or ""), channel, standin)}
                       for p in links), key=lambda p: p["name"])
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CONDA"))}
    ops = subprocess.run([str(prefix / "bin" / "python"), "-c", "import mmcv, mmcv.ops; print(mmcv.__version__)"],
                         capture_output=True, text=True, env=clean)
    ladder = subprocess.run([str(prefix / "bin" / "mmstack"), "verify", "--levels", "L1,L3", "--json"],
                            capture_output=True, text=True, env=clean)
    levels = {lv["level"]: lv["status"] for lv in json.loads(ladder.stdout)["levels"]} if ladder.stdout.strip() else {}
    OUT.write_text(json.dumps({
        "what": "the real conda's solve and install of the mission's command on the e2e channel (issue 26 item 5)",
        "conda": conda.__version__, "solver": "classic", "python": sys.version.split()[0],
        "command": ["conda", "create", "-p", "ENV", "--override-channels", "-c", "CHANNEL", "-c", "STANDIN", *SPECS],
        "env": {"CONDA_ADD_PIP_AS_PYTHON_DEPENDENCY": "0", "CONDARC": "/dev/null", "offline": True},
        "stand_in": "CHANNEL and STANDIN are tests/test_build_e2e.py's channel and the lab/src/mmstack_lab/standin/bootstrap.py "
                    "STAND-IN channel it was built against, not conda-forge",
        "seconds": seconds,
        "packages": packages,
        "import_mmcv_ops": {"rc": ops.returncode, "stdout": ops.stdout.strip()},
        "verify_L1_L3": {"rc": ladder.returncode, "levels": levels},
    }, indent=1) + "\n")
    print(f"{OUT}: {len(packages)} packages, conda {conda.__version__}, {seconds}s; import rc {ops.returncode}; "
          f"verify {levels}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
