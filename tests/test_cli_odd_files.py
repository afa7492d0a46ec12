"""Odd files given to the commands that read binaries (`fatbin`, `arch check --package`), through the
real CLI in a subprocess: special files are refused before they are opened for reading, what is
read is bounded by the file, and a damaged file is named as damage. Every case: one line, exit 2,
no traceback, within a timeout (a FIFO must not hang the command)."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from support.cli import mmstack

COMMANDS = {
    "fatbin": lambda path: ("fatbin", str(path)),
    "arch check": lambda path: ("arch", "check", "--gpu", "RTX 4090", "--package", str(path)),
}


def _run(command: str, path: Path) -> tuple[int, str]:
    code, out, err = mmstack(*COMMANDS[command](path), timeout=60)
    assert "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    return code, lines[0]


@pytest.fixture(scope="module")
def cpu_so(tmp_path_factory) -> Path:
    """A real shared object (this machine's cc), for the packages below."""
    d = tmp_path_factory.mktemp("so")
    (d / "ops.c").write_text("int add(int a, int b) { return a + b; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", str(d / "ops.c"), "-o", str(d / "_ext.so")], check=True)
    return d / "_ext.so"


def _wheel(so: Path, dest: Path) -> Path:
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("mmcv/__init__.py", "")
        zf.write(so, "mmcv/_ext.so")
        zf.writestr("mmcv-2.2.0.dist-info/METADATA", "Name: mmcv\nVersion: 2.2.0\n")
    return dest


def _conda(so: Path, dest: Path, *, corrupt: bool) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        tar.add(so, "lib/python3.11/site-packages/mmcv/_ext.so")
    packed = subprocess.run(["zstd", "-q", "-c"], input=raw.getvalue(), capture_output=True, check=True).stdout
    if corrupt:  # the frame header stays, the compressed blocks are overwritten
        packed = packed[:16] + bytes(b ^ 0x5A for b in packed[16:])
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("metadata.json", '{"conda_pkg_format_version": 2}')
        zf.writestr("pkg-mmcv-2.2.0-cpu_0.tar.zst", packed)
    return dest


@pytest.mark.parametrize("command", COMMANDS)
def test_a_character_device_is_refused_without_reading_it(command):
    code, line = _run(command, Path("/dev/zero"))
    assert code == 2
    assert line.endswith("/dev/zero: a character device, not a regular file (fix: pass the path of an .so, .whl or .conda)")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_is_refused_and_does_not_hang(command, tmp_path):
    fifo = tmp_path / "mmcv.conda"
    os.mkfifo(fifo)
    code, line = _run(command, fifo)  # mmstack's own timeout (60 s) is the hang guard
    assert code == 2
    assert "a FIFO, not a regular file" in line


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name", ["zeros.so", "zeros.whl", "zeros.conda", "zeros.tar.bz2"])
def test_a_file_of_zeros_is_damage_not_an_empty_package(command, name, tmp_path):
    path = tmp_path / name
    path.write_bytes(bytes(64 << 10))
    code, line = _run(command, path)
    assert code == 2
    assert f"{path}: damaged: all of its first 4096 bytes are zero" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_an_empty_file_is_bad_input(command, tmp_path):
    path = tmp_path / "mmcv.whl"
    path.write_bytes(b"")
    code, line = _run(command, path)
    assert code == 2
    assert f"{path}: an empty file" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_conda_with_a_corrupt_zstd_member_is_named_damaged(command, cpu_so, tmp_path):
    path = _conda(cpu_so, tmp_path / "mmcv-2.2.0-cpu_0.conda", corrupt=True)
    code, line = _run(command, path)
    assert code == 2
    assert f"{path}!pkg-mmcv-2.2.0-cpu_0.tar.zst: damaged:" in line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_truncated_wheel_is_named_a_truncated_zip(command, cpu_so, tmp_path):
    whole = _wheel(cpu_so, tmp_path / "whole.whl").read_bytes()
    path = tmp_path / "mmcv-2.2.0-cp311-cp311-linux_x86_64.whl"
    path.write_bytes(whole[: len(whole) // 2])
    code, line = _run(command, path)
    assert code == 2
    assert f"{path}: damaged: a zip archive (.whl/.conda) without its end record: truncated or corrupt" in line


def test_the_intact_packages_still_read(cpu_so, tmp_path):
    """The same builders without the damage: read, exit 0 (a CPU build has no fatbin)."""
    for path in (_wheel(cpu_so, tmp_path / "ok.whl"), _conda(cpu_so, tmp_path / "ok.conda", corrupt=False)):
        code, out, err = mmstack("fatbin", str(path), timeout=60)
        assert code == 0, err
        assert "_ext.so" in out


def test_without_zstandard_the_zstd_command_names_the_damage_too(cpu_so, tmp_path, monkeypatch):
    """The fallback when the zstandard module is absent: zstd's own complaint, as damage (BadInput)."""
    import shutil
    import sys

    from mmstack.errors import BadInput
    from mmstack.facts.fatbin import list_fatbins

    if shutil.which("zstd") is None:
        pytest.skip("no zstd command")
    monkeypatch.setitem(sys.modules, "zstandard", None)  # makes `import zstandard` raise ImportError
    path = _conda(cpu_so, tmp_path / "bad.conda", corrupt=True)
    with pytest.raises(BadInput) as caught:
        list_fatbins(path)
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith(f"{path}!pkg-mmcv-2.2.0-cpu_0.tar.zst: damaged: ")
    assert len(list_fatbins(_conda(cpu_so, tmp_path / "ok.conda", corrupt=False))) == 1
