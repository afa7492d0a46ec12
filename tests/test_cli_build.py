"""`mmstack build`, `mmstack channel index` and verify's L5 options, driven as a user drives them.

The real builds run in tests/test_build_e2e.py (slow); here: the argument contract, and indexing
a channel of real .conda packages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import mmstack

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args, words", [
    ((), "neither --env nor --all"),
    (("--env", "cpu", "--all"), "--env and --all both given"),
])
def test_build_needs_exactly_one_selection(tmp_path, args, words):
    code, out, err = mmstack("build", "--channel", str(tmp_path / "ch"), *args)
    assert code == 2 and words in err and out == ""
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ch").exists(), "bad input leaves no partial output"


@pytest.mark.parametrize("variant, words", [
    ("cuda_compiler_version", "is not KEY=VALUE"),
    ("=13.0", "is not KEY=VALUE"),
])
def test_build_variant_must_be_key_value(tmp_path, variant, words):
    code, out, err = mmstack("build", "--env", "h100", "--channel", str(tmp_path / "ch"), "--variant", variant)
    assert code == 2 and words in err and out == ""
    assert not (tmp_path / "ch").exists()


def test_build_variant_key_given_twice_is_bad_input(tmp_path):
    code, _, err = mmstack("build", "--env", "h100", "--channel", str(tmp_path / "ch"),
                           "--variant", "python=3.12", "--variant", "python=3.11")
    assert code == 2 and "--variant python given twice" in err


def test_variant_overrides_render_one_build_per_build_string():
    """--variant for every zipped key makes all matrix rows the same build: it is rendered once,
    with the overridden values in its build string (what scripts/gpu-proof.sh builds on the H200)."""
    pytest.importorskip("rattler_build")
    from mmstack.builder import recipes as build

    overrides = {"python": "3.12", "pytorch": "2.11", "cuda_compiler_version": "13.0",
                 "mmcv_arch_list": "8.0+PTX", "arch_tag": "sm80ptx", "c_stdlib_version": "2.28",
                 "cuda_arch_min": "8.0", "mmcv_priority": "2"}
    rendered = build.render(recipe_dir=ROOT / "recipes" / "mmcv", variant_config=ROOT / "conda_build_config.yaml",
                            overrides=overrides)
    strings = {v.recipe.build.string for v in rendered}
    assert len(strings) == 1, strings
    (string,) = strings
    assert string.startswith("cuda130_sm80ptx_py312_h")


def test_build_rejects_an_environment_no_variant_serves(tmp_path):
    pytest.importorskip("rattler_build")
    code, _, err = mmstack("build", "--env", "rtx9999", "--channel", str(tmp_path / "ch"), "--recipe", "mmcv")
    assert code == 2
    assert "no variant serves environment 'rtx9999'" in err and "conda_build_config.yaml" in err
    assert not (tmp_path / "ch").exists()


def test_channel_index_writes_repodata_for_every_subdir(tmp_path):
    pytest.importorskip("rattler")
    pytest.importorskip("rattler_build")
    from mmstack_lab.standin.fake_channel import Pkg, build_channel

    ch = build_channel(tmp_path / "ch", [Pkg("mmcv", "2.2.0", "cpu_py311"),
                                         Pkg("mmstack", "0.1.0", "pyh", subdir="noarch", noarch="python")])
    for repodata in ch.glob("*/repodata.json"):
        repodata.unlink()
    code, out, err = mmstack("channel", "index", str(ch), "--json")
    assert code == 0, err
    assert json.loads(out) == {"channel": str(ch.resolve()), "subdirs": {"linux-64": 1, "noarch": 1}}
    names = {r["name"] for r in json.loads((ch / "linux-64" / "repodata.json").read_text())["packages.conda"].values()}
    assert names == {"mmcv"}
    assert not list(ch.glob(".index-*")), "the shadow copy is gone after the atomic swap"


def test_channel_index_of_a_missing_directory_is_bad_input(tmp_path):
    code, _, err = mmstack("channel", "index", str(tmp_path / "nope"))
    assert code == 2 and "is not a directory" in err


@pytest.mark.parametrize("args, words", [
    (("--model", "yolo-x"), "unknown detector yolo-x"),
    (("--levels", "L1", "--model", "faster-rcnn"), "--model extends L5 and L6, which --levels leaves out"),
    (("--levels", "L1", "--nproc", "2"), "--nproc extends L5, which --levels leaves out"),
    (("--levels", "L6", "--nproc", "2"), "--nproc extends L5, which --levels leaves out"),
    (("--nproc", "0"), "--nproc 0: expected 1 or more"),
])
def test_verify_l5_options_reject_bad_input_before_running_anything(args, words):
    code, out, err = mmstack("verify", *args)
    assert code == 2, (out, err)
    assert words in err and out == ""


# -- offline: the unreachable source channel is named, with the fix ------------------------------

# Any download goes to a closed port and fails, as on a machine without network.
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
           "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "NO_PROXY": "", "no_proxy": ""}


def _offline(*args: str, cwd: Path = ROOT) -> tuple[int, str, str]:
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "mmstack.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **OFFLINE, "COLUMNS": "200"}, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def test_offline_build_names_the_unreachable_source_channel(tmp_path):
    pytest.importorskip("rattler_build")
    code, _, err = _offline("build", "--env", "cpu", "--channel", str(tmp_path / "ch"))
    assert code == 1, err
    assert "source channel conda-forge cannot be reached" in err
    assert "HTTPS_PROXY" in err and "--source-channel" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ch").exists(), "nothing built, nothing written"


def test_offline_lock_names_the_unreachable_channel(tmp_path):
    pytest.importorskip("rattler")
    import shutil

    for name in ("pixi.toml", "conda_build_config.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "envs", tmp_path / "envs")
    code, _, err = _offline("lock", "--root", str(tmp_path), "--env", "cpu")
    assert code == 1, err
    assert "source channel https://conda.anaconda.org/conda-forge/ cannot be reached" in err and "--channel" in err
    assert not (tmp_path / "pixi.lock").exists()


def test_reachable_and_non_channel_urls(tmp_path):
    """A real HTTP server: a channel answers with noarch/repodata.json; a plain site is not a channel."""
    import functools
    import http.server
    import threading

    from mmstack.builder.reach import unreachable

    (tmp_path / "ch" / "noarch").mkdir(parents=True)
    (tmp_path / "ch" / "noarch" / "repodata.json").write_text("{}")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        import os
        saved = {k: os.environ.pop(k) for k in list(os.environ) if k.lower() in ("http_proxy", "https_proxy")}
        try:
            assert unreachable([f"{base}/ch", str(tmp_path / "ch")]) == []
            ((given, probe, why),) = unreachable([f"{base}/site"])
            assert given == f"{base}/site" and probe.endswith("/site/noarch/repodata.json") and "not a conda channel" in why
        finally:
            os.environ.update(saved)
    finally:
        server.shutdown()


# -- recipes without variants ---------------------------------------------------------------------


def test_build_of_a_recipe_without_variants_needs_no_env(tmp_path):
    """recipes/mmstack renders one build: --env/--all are not asked for (offline, the run gets as far
    as the source-channel check, which proves the selection was accepted)."""
    pytest.importorskip("rattler_build")
    code, _, err = _offline("build", "--recipe", "mmstack", "--channel", str(tmp_path / "ch"))
    assert code == 1 and "source channel conda-forge cannot be reached" in err, err
    code, _, err = _offline("build", "--recipe", "mmcv", "--channel", str(tmp_path / "ch"))
    assert code == 2 and "mmcv has variants" in err


def test_install_hint_names_only_what_was_built(tmp_path):
    from mmstack.commands.build_cmds import install_hint

    assert install_hint(tmp_path, ["mmstack"]).endswith("conda-forge mmstack")
    assert "mmcv" not in install_hint(tmp_path, ["mmstack", "mmdet"])
    assert install_hint(tmp_path, ["mmstack", "mmcv", "mmcv", "mmdet"]).endswith("conda-forge mmcv mmdet mmstack")
    assert install_hint(tmp_path, []) == "nothing built"


def test_a_failed_solve_names_the_spec_nothing_provides_and_the_fix(tmp_path):
    """issue 20: a channel with Python 3.12 only (the H200's stand-in) and the noarch recipe's
    python_min 3.10: rattler-build says only "Failed to resolve dependencies" and logs an info
    line about an empty subdir; the error must name the unsatisfiable spec, the channels and the fix."""
    pytest.importorskip("rattler")
    pytest.importorskip("rattler_build")
    from mmstack_lab.standin.fake_channel import Pkg, build_channel

    src = build_channel(tmp_path / "src", [
        Pkg("python", "3.12.9", "h_cpython", depends=("__glibc >=2.17,<3.0.a0",)),
        Pkg("pip", "26.3", "pyh", subdir="noarch", noarch="python"),
        Pkg("setuptools", "84.2.1", "pyh", subdir="noarch", noarch="python")])
    code, _, err = mmstack("build", "--env", "cpu", "--recipe", str(ROOT / "recipes" / "mmstack"), "--no-test",
                           "--channel", str(tmp_path / "ch"), "--source-channel", str(src))
    assert code == 1, err
    assert "No candidates were found for python 3.10.*" in err, err
    assert "python 3.10.*, pip, setuptools >=68" in err and src.resolve().as_uri() in err
    assert "--variant python_min=3.12" in err
    assert "was not found, ignoring" not in err
    assert not list((tmp_path / "ch").glob("*/*.conda")), "nothing landed"


@pytest.mark.parametrize("quiet", [False, True])
def test_build_progress_is_on_unless_quiet_and_json_stays_json(tmp_path, monkeypatch, capsys, quiet):
    """--quiet turns the progress watch off; with --json stdout is the JSON document either way."""
    from mmstack.builder import progress
    from mmstack.commands import build_cmds

    seen = {}

    def fake_build(**kwargs):
        seen["watch"] = kwargs["watch"]
        if kwargs["watch"]:  # a build feeds it its log; outside a terminal a plain line comes out
            kwargs["watch"].start("mmcv-x")
            kwargs["watch"].log("[1/2] nvcc -c a.cu -o build/a.o")
        return []

    monkeypatch.setattr(build_cmds, "require_reachable", lambda *_a, **_k: None)
    monkeypatch.setattr(build_cmds, "run_stack_build", fake_build)
    code = build_cmds.run_build_cmd(root=ROOT, channel=tmp_path / "ch", env="cpu", build_all=False, recipes=None,
                                    extra_channels=None, test=True, as_json=True, quiet=quiet)
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["packages"] == []
    if quiet:
        assert seen["watch"] is None and "compile" not in err
    else:
        assert isinstance(seen["watch"]._display, progress.PlainDisplay)  # pytest's stderr is no terminal
        assert "mmcv-x: compile 1/2 units" in err


# -- --variant by the matrix's rules (issue 22, item 5) ---------------------------------------------


@pytest.mark.parametrize("variant, words", [
    ("cuda_compiler_version=12.99", "unknown CUDA version '12.99'; did you mean '12.9'?"),
    ("mmcv_arch_list=8.6+PTXX", "mmcv_arch_list: cannot read arch '8.6+PTXX'"),
    ("nosuchkey=1", "--variant nosuchkey: not a key of conda_build_config.yaml"),
    ("python_min=3.1x", "'3.1x' is not a version like 3.12"),
    ("mmcv_arch_list=8.0+PTX", "arch_tag should be 'sm80'"),  # the row's sm90 tag no longer fits
    ("cuda_compiler_version=12.4", "CUDA 12.4 cannot build 12.0"),  # rtx5090's sm_120 needs CUDA >= 12.8
])
def test_build_variant_is_checked_by_the_matrix_rules(tmp_path, variant, words):
    env = "rtx5090" if variant.endswith("12.4") else "h100"
    code, out, err = mmstack("build", "--env", env, "--channel", str(tmp_path / "ch"), "--variant", variant)
    assert code == 2, err
    assert words in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert out == "" and not (tmp_path / "ch").exists()


def test_matrix_rejects_the_same_values_in_the_config(tmp_path):
    """The same rule, the same words: `mmstack matrix` on a config with the bad value in the h100 row."""
    text = (ROOT / "conda_build_config.yaml").read_text()
    h100 = '  - "9.0+PTX"   # [linux64]\n'  # the linux-64 h100 row (the aarch64 sm90 row has its own selector)
    assert text.count(h100) == 1
    (tmp_path / "conda_build_config.yaml").write_text(text.replace(h100, '  - "8.6+PTXX"   # [linux64]\n'))
    code, _, err = mmstack("matrix", "--config", str(tmp_path / "conda_build_config.yaml"))
    assert code != 0 and "mmcv_arch_list: cannot read arch '8.6+PTXX'" in err


@pytest.mark.parametrize("overrides, env", [
    ({"python_min": "3.12"}, "h100"),  # the noarch recipes read it (scripts/gpu-proof.sh passes it)
    ({"python": "3.12", "pytorch": "2.11", "cuda_compiler_version": "13.0", "c_stdlib_version": "2.28"}, "h100"),
    ({"mmcv_arch_list": "8.0+PTX", "arch_tag": "sm80ptx"}, "h100"),  # gpu-proof's PTX build: its own tag name
    ({"mmcv_arch_list": "8.0+PTX", "arch_tag": "sm80ptx", "cuda_arch_min": "8.0"}, "h100"),  # with its CEP 46 arch
    ({"mmcv_arch_list": "7.5;8.0;9.0+PTX", "arch_tag": "all", "cuda_arch_min": "none", "mmcv_priority": "1"}, "h100"),
    ({"cuda_compiler_version": "13.0"}, "rtx5090"),
])
def test_build_variant_values_the_matrix_accepts_pass(overrides, env):
    from mmstack.facts.gpus import load
    from mmstack.variants.matrix import check_overrides

    check_overrides(load(), ROOT / "conda_build_config.yaml", overrides, env=env)  # raises on a refusal
