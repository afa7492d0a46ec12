"""Where the lab's inputs and outputs are in a checkout (the lab is installed editable from it)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository: lab/src/mmstack_lab/paths.py
RESULTS = ROOT / "lab" / "results"
LAB_SRC = Path(__file__).resolve().parents[1]  # lab/src: what another interpreter needs to run a lab module


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for `python -m mmstack_lab...` in another interpreter (an installed prefix,
    where the lab is not installed): lab/src first on its PYTHONPATH, the rest as given."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([str(LAB_SRC), *filter(None, [env.get("PYTHONPATH")])])
    return env
