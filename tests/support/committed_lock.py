"""A copy of this repository's pixi.toml and matrix, locked by the real `mmstack lock` in the form
it would be committed: pixi.lock, envs/<env>.yml, .conda-lock.yml and .virtual-packages.yml for
every environment pixi has.

`./channel` is lab/src/mmstack_lab/standin/fake_channel.py's local channel shaped like conda-forge plus
./channel (real, empty .conda packages; labelled stand-ins in their metadata). It stands in for
both of pixi.toml's channels, since conda-forge cannot be reached here: the solve reads it
through `--channel`; everything written is what `mmstack lock` writes without one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mmstack_lab.standin import fake_channel

REPO = Path(__file__).resolve().parents[2]


def make(root: Path) -> Path:
    from mmstack.commands.lock_cmds import run_lock
    from mmstack.facts.gpus import load as load_facts
    from mmstack.variants import matrix as variants

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for name in ("pixi.toml", variants.CONFIG_FILE):
        shutil.copy(REPO / name, root / name)
    matrix = variants.load_matrix(load_facts(), root / variants.CONFIG_FILE)
    channel = fake_channel.build_channel(root / "channel", fake_channel.standard_packages(matrix))
    if run_lock(root=root, channels=[fake_channel.url(channel)]) != 0:
        raise AssertionError("mmstack lock failed on the repository's pixi.toml")
    return root
