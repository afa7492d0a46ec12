"""Progress of `mmstack lock`, `verify`, `channel index` and `arch check --package` through the real CLI
(subprocesses: stderr is a pipe, so the plain line): on stderr only, stdout's --json byte for byte
the same with and without it, nothing of it under --quiet. The displays' throttling: test_progress.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path = ROOT, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mmstack.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", **(env or {})}, timeout=timeout)


# -- mmstack lock: one step per environment solved ------------------------------------------------------


@pytest.fixture(scope="module")
def fake_channel_url(tmp_path_factory):
    pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
    pytest.importorskip("rattler_build", reason="py-rattler-build (the [build] extra) is not installed")
    from mmstack.facts.gpus import load as load_facts
    from mmstack.variants import matrix as variants
    from mmstack_lab.standin import fake_channel

    matrix = variants.load_matrix(load_facts(), ROOT / variants.CONFIG_FILE)
    return fake_channel.url(fake_channel.build_channel(tmp_path_factory.mktemp("fake-channel"),
                                                       fake_channel.standard_packages(matrix)))


def _repo(dest: Path) -> Path:
    dest.mkdir()
    for name in ("pixi.toml", "conda_build_config.yaml"):
        shutil.copy(ROOT / name, dest / name)
    return dest


def test_lock_shows_the_environment_being_solved_and_json_stays_the_same(tmp_path, fake_channel_url):
    args = ["lock", "--env", "cpu", "--env", "h100", "--channel", fake_channel_url, "--json"]
    shown = run(*args, "--root", str(_repo(tmp_path / "a")))
    quiet = run(*args, "--quiet", "--root", str(_repo(tmp_path / "b")))
    assert shown.returncode == 0 and quiet.returncode == 0, shown.stderr + quiet.stderr
    assert shown.stdout == quiet.stdout and json.loads(shown.stdout)["environments"].keys() == {"cpu", "h100"}
    # the first step is shown at once; the second within 30 s of it is held back (a pipe: the plain line)
    assert re.search(r"^lock: solving cpu \(1/2\), \d+s$", shown.stderr, re.M), shown.stderr
    assert "lock: solving" not in quiet.stderr
    # the result lines are no progress: both runs print them
    for err in (shown.stderr, quiet.stderr):
        assert re.search(r"^\[2/2\] h100: \d+ specs on linux-64-h100, \d+ packages in ", err, re.M), err


# -- mmstack verify: one step per level, with the last run's time ------------------------------------


def _fake_mmcv(tmp_path: Path) -> Path:
    """An importable mmcv that passes L1 (import, version, location) and no more: the ladder's real child."""
    (tmp_path / "site" / "mmcv").mkdir(parents=True)
    (tmp_path / "site" / "mmcv" / "__init__.py").write_text('__version__ = "2.2.0"\n')
    return tmp_path / "site"


def _without_timings(doc: dict) -> dict:
    """The result minus the seconds (they differ run to run, progress or not)."""
    doc = json.loads(json.dumps(doc))
    doc.pop("seconds"), doc.pop("timings")
    for level in doc["levels"]:
        level.pop("seconds")
    return doc


def test_verify_shows_the_level_and_its_time_last_run(tmp_path):
    site = _fake_mmcv(tmp_path)
    env = {"MMSTACK_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    first = run("verify", "--levels", "L1", "--json", env=env)
    assert first.returncode == 0, first.stderr
    assert re.search(r"^verify: L1 import \(1/1\), \d+s$", first.stderr, re.M), first.stderr  # nothing known yet
    cache = json.loads((tmp_path / "cache" / "verify-timings.json").read_text())
    assert list(cache.values()) == [{"L1": json.loads(first.stdout)["levels"][0]["seconds"]}]

    second = run("verify", "--levels", "L1", "--json", env=env)
    assert re.search(r"^verify: L1 import \(1/1\), \d+s of ~\d+s last run$", second.stderr, re.M), second.stderr
    quiet = run("verify", "--levels", "L1", "--json", "--quiet", env=env)
    assert quiet.returncode == 0 and "verify:" not in quiet.stderr
    docs = [json.loads(p.stdout) for p in (first, second, quiet)]  # stdout is the JSON document alone
    assert _without_timings(docs[0]) == _without_timings(docs[1]) == _without_timings(docs[2])


def test_verify_table_mode_puts_progress_on_stderr_only(tmp_path):
    site = _fake_mmcv(tmp_path)
    env = {"MMSTACK_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    proc = run("verify", "--levels", "L1", env=env)
    assert proc.returncode == 0 and "verify: L1 import (1/1)" in proc.stderr
    assert "verify: L1" not in proc.stdout and "mmcv 2.2.0 from" in proc.stdout


# -- mmstack channel index: packages read, for a channel of over 200 -----------------------------------


def _channel(dest: Path, n: int) -> Path:
    pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
    pytest.importorskip("rattler_build", reason="py-rattler-build (the [build] extra) is not installed")
    from mmstack_lab.standin.fake_channel import Pkg, build_channel

    return build_channel(dest, [Pkg(f"p{i}", "1.0", "", subdir="noarch" if i % 2 else "linux-64") for i in range(n)])


def test_channel_index_of_a_large_channel_counts_the_packages_read(tmp_path):
    from mmstack.commands.build_cmds import LARGE_CHANNEL

    channel = _channel(tmp_path / "ch", LARGE_CHANNEL + 60)
    shown = run("channel", "index", str(channel), "--json")
    quiet = run("channel", "index", str(channel), "--json", "--quiet")
    assert shown.returncode == 0 and quiet.returncode == 0, shown.stderr + quiet.stderr
    assert shown.stdout == quiet.stdout and json.loads(shown.stdout)["subdirs"] == {"linux-64": 130, "noarch": 130}
    assert re.search(r"^channel index: reading linux-64 \(1/260 packages\), \d+s$", shown.stderr, re.M), shown.stderr
    assert quiet.stderr == ""


def test_channel_index_of_a_small_channel_shows_no_progress(tmp_path):
    channel = _channel(tmp_path / "ch", 10)
    proc = run("channel", "index", str(channel), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["subdirs"] == {"linux-64": 5, "noarch": 5}
    assert proc.stderr == ""


# -- mmstack arch check --package: megabytes read of a wheel over 100 MB ---------------------------------


@pytest.fixture(scope="module")
def large_wheel(tmp_path_factory) -> Path:
    """A wheel of 101 MB (stored, so compressed size = size) holding a real shared object (this
    interpreter's _ctypes, a CPU object: no CUDA code) beside a large data file."""
    import _ctypes
    import zipfile

    from mmstack.commands.facts_cmds import LARGE_PACKAGE

    path = tmp_path_factory.mktemp("wheel") / "big-1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.write(_ctypes.__file__, "big/_ctypes.so")
        with zf.open("big/weights.bin", "w", force_zip64=True) as out:
            block = b"\0" * (1 << 20)
            for _ in range(LARGE_PACKAGE // len(block) + 1):
                out.write(block)
        zf.writestr("big-1.0.dist-info/METADATA", "Name: big\nVersion: 1.0\n")
    return path


def test_arch_check_of_a_large_wheel_shows_the_megabytes_read(large_wheel):
    args = ["arch", "check", "--gpu", "RTX 4090", "--package", str(large_wheel), "--json"]
    shown, quiet = run(*args), run(*args, "--quiet")
    assert shown.returncode == quiet.returncode == 1  # a CPU object: never uses the GPU
    assert shown.stdout == quiet.stdout and json.loads(shown.stdout)["verdict"] == "no-cuda-code"
    assert "1 shared object(s), none with CUDA code" in json.loads(shown.stdout)["reason"]  # _ctypes.so was read
    assert re.search(r"^arch check: reading big-1\.0-py3-none-linux_x86_64\.whl \(0/10[01] MB\), \d+s$",
                     shown.stderr, re.M), shown.stderr
    assert "arch check:" not in quiet.stderr


def test_arch_check_of_a_small_package_shows_no_progress(tmp_path):
    import _ctypes

    proc = run("arch", "check", "--gpu", "RTX 4090", "--package", _ctypes.__file__, "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["verdict"] == "no-cuda-code"
    assert "arch check:" not in proc.stderr
