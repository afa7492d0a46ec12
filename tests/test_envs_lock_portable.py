"""A lock made from a local channel inside the workspace names no path of the machine that made it:
`mmstack lock --channel ./channel` in one directory, the tree copied to another, and the copy's
locks still load and pass `mmstack lock check` there (pixi reads a relative channel URL against
the workspace root: src/mmstack/envs/portable.py says where)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.cli import mmstack

from mmstack.envs import lockfile, portable
from mmstack.facts.gpus import load as load_facts
from mmstack.variants import matrix as variants
from mmstack_lab.standin import fake_channel

pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
pytest.importorskip("rattler_build", reason="py-rattler-build (the [build] extra) is not installed")

REPO = Path(__file__).resolve().parents[1]
ENVS = ("cpu", "rtx4090")


@pytest.fixture(scope="module")
def made_here(tmp_path_factory) -> Path:
    """The repository's pixi.toml and matrix with the fake channel at ./channel, locked by the CLI there."""
    root = tmp_path_factory.mktemp("first-clone")
    for name in ("pixi.toml", variants.CONFIG_FILE):
        shutil.copy(REPO / name, root / name)
    matrix = variants.load_matrix(load_facts(), REPO / variants.CONFIG_FILE)
    fake_channel.build_channel(root / "channel", fake_channel.standard_packages(matrix))
    code, out, err = mmstack("lock", "--channel", "./channel", *(a for e in ENVS for a in ("--env", e)), cwd=root)
    assert code == 0, out + err
    return root


def _written(root: Path) -> list[Path]:
    return [root / "pixi.lock", *(lockfile.conda_lock_path(root, e) for e in ENVS)]


def test_no_file_names_the_directory_it_was_made_in(made_here):
    for path in _written(made_here):
        text = path.read_text()
        assert str(made_here) not in text and made_here.as_uri() not in text, path
        assert str(made_here.resolve()) not in text, path


def test_the_local_channel_is_written_as_pixi_reads_it(made_here):
    text = (made_here / "pixi.lock").read_text()
    assert "    - url: ./channel/\n" in text  # joined to the workspace root by pixi
    assert "      - conda: ./channel/linux-64/mmcv-2.2.0-cpu_py311_" in text
    assert "\n  channel: " not in text  # the optional URL field, which a relative path is not
    conda_lock = lockfile.conda_lock_path(made_here, "cpu").read_text()
    assert 'url: "./channel/linux-64/mmcv-2.2.0-cpu_py311_' in conda_lock


def test_a_copy_elsewhere_loads_and_passes_the_check(made_here, tmp_path):
    copy = tmp_path / "another" / "clone"
    shutil.copytree(made_here, copy)
    shutil.rmtree(made_here / "channel")  # nothing may still point at the first directory
    try:
        code, out, err = mmstack("lock", "check", "--channel", "./channel", *(a for e in ENVS for a in ("--env", e)),
                                 cwd=copy)
        assert code == 0, out + err
        locked = lockfile.read_pixi_lock(copy / "pixi.lock")
        base = (copy / "channel").resolve().as_uri() + "/"
        for name in ENVS:
            assert locked[name].channels[0] == base
            mmcv = next(p for p in locked[name].packages if p.name == "mmcv")
            assert mmcv.url.startswith(base) and Path(mmcv.url.removeprefix("file://")).is_file()
            cl = lockfile.read_conda_lock(lockfile.conda_lock_path(copy, name))
            assert {p.url for p in cl.packages} == {p.url for p in locked[name].packages}
    finally:
        shutil.copytree(copy / "channel", made_here / "channel")


def test_a_location_outside_the_workspace_stays_absolute(tmp_path):
    root = tmp_path / "ws"
    assert portable.relative((tmp_path / "elsewhere" / "x.conda").as_uri(), root) == (tmp_path / "elsewhere" / "x.conda").as_uri()
    assert portable.relative((root / "channel").as_uri() + "/", root) == "./channel/"
    assert portable.relative(str(root / "channel" / "noarch" / "a.conda"), root) == "./channel/noarch/a.conda"
    assert portable.relative("https://conda.anaconda.org/conda-forge/", root) == "https://conda.anaconda.org/conda-forge/"
    assert portable.absolute("./channel/", root, url=True) == (root.resolve() / "channel").as_uri() + "/"
    assert portable.absolute("../ch/a.conda", root, url=False) == str(tmp_path.resolve() / "ch" / "a.conda")
    assert portable.absolute("conda-forge", root, url=True) == "conda-forge"
