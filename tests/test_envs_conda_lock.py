"""The real conda-lock (4.0.3, the `test` extra) on every conda-lock file `mmstack lock` writes.

For each environment: `conda-lock lock --check-input-hash` with the arguments envs/<env>.yml
prints (and without `-f`, taking the source from the lock's metadata.sources) finds the lock
current and skips the solve; `conda-lock render` renders it for each of its platforms, to the
same URLs and md5s as pixi.lock.

Offline: conda-lock needs a conda executable before it looks at the hash (without one it
bootstraps micromamba from the network through ensureconda), though it runs it only to solve.
`--conda` points it at STAND_IN below: a labelled stand-in that answers `--version` and fails on
anything else, so a test passes only if conda-lock really skipped the solve. The channels are
local (`./channel`, tests/support/committed_lock.py); no step reaches the network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import committed_lock

from mmstack.envs import lockfile, pixi_manifest, portable

pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
pytest.importorskip("rattler_build", reason="py-rattler-build (the [build] extra) is not installed")
pytest.importorskip("conda_lock", reason="conda-lock (the [test] extra) is not installed")

SKIPPED = "Spec hash already locked for ['linux-64']. Skipping solve."
STAND_IN = """#!/bin/sh
# mmstack test stand-in for conda: conda-lock asks its version before it checks the input hash;
# any other call means conda-lock tried to solve. Every call is logged.
echo "$@" >> "$(dirname "$0")/calls.log"
if [ "$1" = "--version" ]; then echo "conda 0.0.0 (mmstack test stand-in)"; exit 0; fi
echo "mmstack test stand-in for conda: refusing '$*' (conda-lock was not to solve)" >&2
exit 3
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return committed_lock.make(tmp_path_factory.mktemp("committed"))


@pytest.fixture(scope="module")
def envs(root):
    return list(pixi_manifest.load(root / "pixi.toml").envs)


@pytest.fixture(scope="module")
def locks(root):
    """(env, platform) per conda-lock file: platform None for an environment of one platform, each
    platform's name for one locked on several (pixi.toml's `gpu`: envs/gpu.<platform>.conda-lock.yml)."""
    from mmstack.envs import policy

    out = []
    for name, env in pixi_manifest.load(root / "pixi.toml").envs.items():
        out += [(name, p.name) for p in env.platforms] if policy.is_multi_gpu_env(env) else [(name, None)]
    return out


@pytest.fixture
def conda(tmp_path):
    exe = tmp_path / "bin" / "conda"
    exe.parent.mkdir()
    exe.write_text(STAND_IN)
    exe.chmod(0o755)
    return exe


def calls(conda: Path) -> list[str]:
    log = conda.parent / "calls.log"
    return log.read_text().splitlines() if log.is_file() else []


def conda_lock(args: list[str], cwd: Path) -> tuple[int, str]:
    """The conda-lock CLI in this interpreter (its click command, as the console script runs it):
    exit code and stderr. In-process, as importing conda-lock takes a second per subprocess."""
    import os

    from click.testing import CliRunner
    from conda_lock.conda_lock import main

    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, args, catch_exceptions=True)
    finally:
        os.chdir(old)
    err = result.stderr + (f"\n{type(result.exception).__name__}: {result.exception}" if result.exception and result.exit_code else "")
    return result.exit_code, err


def check_args(env: str, conda: Path, platform: str | None = None) -> list[str]:
    """The command envs/<env>.yml prints (envs/gpu.<platform>.yml for each platform of `gpu`), with
    `--conda` for the offline stand-in: the same for every stem, as CI's loop runs it."""
    stem = f"{env}.{platform}" if platform else env
    return ["lock", "--check-input-hash", "--conda", str(conda), "-f", f"envs/{stem}.yml", "-p", "linux-64",
            "--virtual-package-spec", f"envs/{stem}.virtual-packages.yml", "--lockfile", f"envs/{stem}.conda-lock.yml"]


def test_every_environment_has_its_conda_lock_files(root, envs, locks):
    assert len(envs) == 12 and "default" in envs and "gpu" in envs
    assert len(locks) == 17 and sum(1 for e, _ in locks if e == "gpu") == 6
    for env, plat in locks:
        for path in (lockfile.env_yml_path(root, env, plat), lockfile.conda_lock_path(root, env, plat),
                     lockfile.vp_spec_path(root, env, plat)):
            assert path.is_file(), path
        yml = lockfile.env_yml_path(root, env, plat).read_text()
        assert " ".join(check_args(env, Path("X"), plat)).replace("--conda X ", "") in yml, env  # the yml says how to check it


def test_check_input_hash_skips_the_solve_for_every_environment(root, locks, conda):
    before = {lk: lockfile.conda_lock_path(root, *lk).read_bytes() for lk in locks}
    for env, plat in locks:
        code, err = conda_lock(check_args(env, conda, plat), root)
        assert code == 0 and SKIPPED in err and "Locking dependencies" not in err, (env, plat, err)
    assert set(calls(conda)) == {"--version"}  # conda was never asked to solve
    assert {lk: lockfile.conda_lock_path(root, *lk).read_bytes() for lk in locks} == before  # nothing rewritten


def test_check_input_hash_reads_the_source_from_the_lock(root, locks, conda):
    """Without `-f`, conda-lock parses metadata.sources (relative to the lock): the yml, which it
    can read (pixi.toml it cannot)."""
    for env, plat in locks:
        doc = lockfile.load_yaml(lockfile.conda_lock_path(root, env, plat).read_text())
        source = lockfile.env_yml_path(Path(), env, plat).name
        assert doc["metadata"]["sources"] == [source]
        code, err = conda_lock(["lock", "--check-input-hash", "--conda", str(conda), "-p", "linux-64",
                                "--virtual-package-spec", lockfile.vp_spec_path(Path(), env, plat).name,
                                "--lockfile", lockfile.conda_lock_path(Path(), env, plat).name],
                               root / "envs")
        assert code == 0 and SKIPPED in err and f"Using source files ['{source}']" in err, (env, plat, err)
    assert set(calls(conda)) == {"--version"}


def test_channels_are_the_ymls_as_conda_lock_compares_them(root, locks):
    """conda-lock compares metadata.channels with the yml's literally before any re-lock."""
    from conda_lock.lockfile import parse_conda_lock_file
    from conda_lock.src_parser import make_lock_spec

    for env, plat in locks:
        lock = parse_conda_lock_file(lockfile.conda_lock_path(root, env, plat))
        spec = make_lock_spec(src_files=[lockfile.env_yml_path(root, env, plat)], platform_overrides=["linux-64"],
                              mapping_url="unused: no PyPI dependencies")
        assert lock.metadata.channels == spec.channels and [c.url for c in spec.channels] == ["./channel", "conda-forge"], env


def test_a_changed_yml_is_not_current_and_conda_lock_tries_to_solve(root, tmp_path, conda):
    """The control: edit one pin and conda-lock does not skip; it goes to solve (the stand-in
    refuses, so it fails) and leaves the lock as it was."""
    tree = tmp_path / "r"
    shutil.copytree(root, tree)
    yml = lockfile.env_yml_path(tree, "h100")
    text = yml.read_text()
    assert "  - mmengine=0.10.7=safeload_*\n" in text
    yml.write_text(text.replace("  - mmengine=0.10.7=safeload_*\n", "  - mmengine=0.10.6=safeload_*\n"))
    before = lockfile.conda_lock_path(tree, "h100").read_bytes()
    code, err = conda_lock(check_args("h100", conda), tree)
    assert code != 0 and SKIPPED not in err and "Locking dependencies for ['linux-64']" in err, err
    assert any(c != "--version" for c in calls(conda)), calls(conda)
    assert lockfile.conda_lock_path(tree, "h100").read_bytes() == before


def test_render_gives_pixi_locks_packages_for_each_platform(root, locks, tmp_path):
    every = lockfile.read_pixi_lock_platforms(root / "pixi.lock", pixi_manifest.load(root / "pixi.toml").platforms)
    for env, named in locks:
        # the pixi.lock platform this conda-lock file was written from
        locked = {env: next(lk for lk in every[env] if named in (None, lk.platform))}
        path = lockfile.conda_lock_path(root, env, named)
        platforms = lockfile.load_yaml(path.read_text())["metadata"]["platforms"]
        assert platforms == ["linux-64"]
        for plat in platforms:
            out = tmp_path / env / (named or plat)
            out.mkdir(parents=True)
            code, err = conda_lock(["render", "--kind", "explicit", "--kind", "env", "-p", plat, str(path)], out)
            assert code == 0, (env, err)
            explicit = (out / f"conda-{plat}.lock").read_text().splitlines()
            assert "@EXPLICIT" in explicit
            urls = {ln for ln in explicit if ln and not ln.startswith(("#", "@"))}
            # ./channel's packages relative to the workspace root, as the environment's ./channel
            # is (envs/portable.py): conda-lock renders them so, and conda reads them from there
            assert urls == {f"{portable.relative(p.url, root)}#{p.md5}" for p in locked[env].packages}, env
            assert any(u.startswith("./channel/") for u in urls) and not any(str(root) in u for u in urls)
            env_doc = lockfile.load_yaml((out / f"conda-{plat}.lock.yml").read_text())
            assert env_doc["channels"] == ["./channel", "conda-forge"]
            assert sorted(env_doc["dependencies"]) == sorted(f"{p.name}={p.version}={p.build}" for p in locked[env].packages)


def test_the_console_script_agrees(root, conda):
    """One run through the installed `conda-lock` entry point, as a user types it."""
    exe = Path(sys.executable).with_name("conda-lock")
    if not exe.is_file():
        pytest.skip(f"no conda-lock console script beside {sys.executable}")
    proc = subprocess.run([str(exe), *check_args("rtx4090", conda)], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and SKIPPED in proc.stderr, proc.stderr
    assert calls(conda) == ["--version"]


def test_conda_lockfiles_plugin_detects_the_format(root, locks):
    """conda's conda-lockfiles plugin (what `conda env create --file envs/<env>.conda-lock.yml` asks)
    takes a file as conda-lock v1 only if it validates against its model, whose custom_metadata,
    when present, must carry `created_by` as a string (conda-incubator/conda-lockfiles,
    conda_lockfiles/conda_lock/v1.py lines 101-104 and 115 at 84344439). Without it conda falls back
    to reading the file as an environment.yml and creates an empty environment, exit 0."""
    from importlib.metadata import version

    for env, plat in locks:
        meta = lockfile.load_yaml(lockfile.conda_lock_path(root, env, plat).read_text())["metadata"]
        assert meta["custom_metadata"]["created_by"] == f"mmstack {version('mmstack')}", env
        assert all(isinstance(v, str) for v in meta["custom_metadata"].values()), env  # conda-lock: dict[str, str]
        assert meta["platforms"] and all(set(c) == {"url", "used_env_vars"} for c in meta["channels"])
