"""channel.py: a local channel is indexed atomically, guarded by its lock, and installable (offline)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

rattler_build = pytest.importorskip("rattler_build", reason="py-rattler-build is the optional 'build' extra")
pytest.importorskip("rattler", reason="py-rattler is the optional 'build' extra")

from mmstack.builder import channel  # noqa: E402
from mmstack.errors import BadInput, BuildFailed  # noqa: E402


def _package(tmp_path: Path, name: str, *, subdir: str = "noarch", depends=()) -> Path:
    files = tmp_path / f"files-{name}"
    (files / "share" / name).mkdir(parents=True)
    (files / "share" / name / "hello.txt").write_text(f"{name}\n")
    out = tmp_path / "built" / subdir
    out.mkdir(parents=True, exist_ok=True)
    return rattler_build.assemble_package(
        name=name, version="1.0", target_platform=subdir, build_string="h0_0", output_dir=out,
        files_dir=files, depends=list(depends), noarch="generic" if subdir == "noarch" else None,
    ).path


def _names(ch: Path, subdir: str = "noarch") -> set[str]:
    data = json.loads((ch / subdir / "repodata.json").read_text())
    return {r["name"] for r in {**data.get("packages", {}), **data.get("packages.conda", {})}.values()}


def test_a_plain_directory_is_not_a_channel(tmp_path):
    with pytest.raises(BadInput, match="not a conda channel: no noarch/") as err:
        channel.ensure_channel(tmp_path / ".." / tmp_path.name)  # exists, but no noarch/
    assert err.value.exit_code == 2 and err.value.fix
    with pytest.raises(BadInput, match="not a directory"):
        channel.ensure_channel(tmp_path / "missing")


def test_create_makes_an_empty_indexed_channel(tmp_path):
    ch = channel.ensure_channel(tmp_path / "new", create=True)
    assert (ch / "noarch" / "repodata.json").is_file()
    assert (ch / "linux-64" / "repodata.json").is_file()
    assert channel.ensure_channel(ch) == ch


def test_add_packages_moves_and_indexes_without_leftovers(tmp_path):
    ch = tmp_path / "channel"
    noarch = _package(tmp_path, "alpha")
    linux = _package(tmp_path, "beta", subdir="linux-64")
    landed = channel.add_packages(ch, [noarch, linux])
    assert [p.parent.name for p in landed] == ["noarch", "linux-64"]
    assert not noarch.exists() and not linux.exists()
    assert _names(ch) == {"alpha"} and _names(ch, "linux-64") == {"beta"}
    assert all(p.stat().st_mode & 0o444 == 0o444 for p in landed), "readable by everyone who reads the channel"
    leftovers = [p.name for p in ch.rglob("*") if p.name.startswith(".") and p.name != channel.LOCK_FILE]
    assert leftovers == []


def test_index_channel_picks_up_copied_packages(tmp_path):
    ch = channel.ensure_channel(tmp_path / "channel", create=True)
    pkg = _package(tmp_path, "gamma")
    pkg.rename(ch / "noarch" / pkg.name)
    assert _names(ch) == set()
    channel.index_channel(ch)
    assert _names(ch) == {"gamma"}


def test_concurrent_builds_into_one_channel_both_land(tmp_path):
    ch = channel.ensure_channel(tmp_path / "channel", create=True)
    pkgs = [_package(tmp_path, f"pkg{i}") for i in range(6)]
    errors: list[BaseException] = []

    def add(p):
        try:
            channel.add_packages(ch, [p])
        except BaseException as exc:  # noqa: BLE001 - a worker thread's failure, whatever it is, must reach the assert below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(p,)) for p in pkgs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _names(ch) == {f"pkg{i}" for i in range(6)}


def test_install_solves_and_links_from_a_local_channel(tmp_path):
    ch = tmp_path / "channel"
    channel.add_packages(ch, [_package(tmp_path, "leaf"), _package(tmp_path, "app", depends=["leaf"])])
    prefix = tmp_path / "env"
    installed = channel.install(["app"], [ch], prefix, virtual_packages=[])
    assert sorted(installed) == ["app=1.0=h0_0", "leaf=1.0=h0_0"]
    assert (prefix / "share" / "leaf" / "hello.txt").read_text() == "leaf\n"


def test_install_of_a_missing_package_is_one_line(tmp_path):
    ch = channel.ensure_channel(tmp_path / "channel", create=True)
    with pytest.raises(BuildFailed, match="cannot install nothing-here") as err:
        channel.install(["nothing-here"], [ch], tmp_path / "env", virtual_packages=[])
    assert "\n" not in err.value.one_line()


def test_install_honours_the_conda_overrides_for_a_gpu_build(tmp_path, monkeypatch):
    """A per-generation build installs on a machine without a GPU when CONDA_OVERRIDE_CUDA and
    CONDA_OVERRIDE_CUDA_ARCH declare the target (as conda and pixi honour them); a wrong arch, or
    `__cuda` emptied (which takes `__cuda_arch` with it, CEP 46), is refused by the solver."""
    ch = tmp_path / "channel"
    channel.add_packages(ch, [_package(tmp_path, "kern", subdir="linux-64",
                                       depends=["__cuda >=13", "__cuda_arch >=9.0,<10"])])
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA", "13.0")
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA_ARCH", "9.0")
    assert channel.install(["kern"], [ch], tmp_path / "env", platform="linux-64") == ["kern=1.0=h0_0"]
    assert channel.explain_unsolvable(["kern"], [ch], platform="linux-64") is None
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA_ARCH", "8.9")
    assert "__cuda_arch" in (channel.explain_unsolvable(["kern"], [ch], platform="linux-64") or "")
    with pytest.raises(BuildFailed, match="cannot install kern"):
        channel.install(["kern"], [ch], tmp_path / "env2", platform="linux-64")
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA", "")
    monkeypatch.setenv("CONDA_OVERRIDE_CUDA_ARCH", "9.0")
    assert not any("cuda" in str(v).lower() for v in channel.detected_virtual_packages())


def test_a_rebuilt_package_with_the_same_name_gets_a_fresh_record(tmp_path):
    import hashlib

    ch = tmp_path / "channel"
    first = _package(tmp_path / "one", "delta")
    channel.add_packages(ch, [first])
    second = _package(tmp_path / "two", "delta", depends=["leaf"])  # same file name, other content
    (landed,) = channel.add_packages(ch, [second])
    record = json.loads((ch / "noarch" / "repodata.json").read_text())["packages.conda"][landed.name]
    assert record["sha256"] == hashlib.sha256(landed.read_bytes()).hexdigest()
    assert record["depends"] == ["leaf"]


def _corrupt_copies(tmp_path: Path, ch: Path) -> tuple[Path, Path]:
    """Two broken .conda files in the channel: random bytes (no zip at all), and a real package
    whose info archive is cut short (its zip reads, its index.json does not)."""
    import zipfile

    garbage = ch / "noarch" / "garbage-1.0-h0_0.conda"
    garbage.write_bytes(bytes(range(256)) * 20)
    good = _package(tmp_path, "delta")
    cut = ch / "noarch" / "cut-1.0-h0_0.conda"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(cut, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data[:100] if info.filename.startswith("info-") else data)
    return garbage, cut


def test_a_corrupt_package_is_named_and_nothing_is_written(tmp_path):
    ch = channel.ensure_channel(tmp_path / "channel", create=True)
    ok = _package(tmp_path, "gamma")
    ok.rename(ch / "noarch" / ok.name)
    before = (ch / "noarch" / "repodata.json").read_bytes()
    garbage, cut = _corrupt_copies(tmp_path, ch)
    with pytest.raises(BadInput) as err:
        channel.index_channel(ch)
    assert err.value.exit_code == 2
    assert f"noarch/{garbage.name}" in str(err.value) and f"noarch/{cut.name}" in str(err.value)
    assert "gamma" not in str(err.value)
    assert (ch / "noarch" / "repodata.json").read_bytes() == before, "the index is left as it was"
    assert [p.name for p in ch.iterdir() if p.name.startswith(".index-")] == []


def test_cli_channel_index_of_a_corrupt_package_is_one_line_and_exit_2(tmp_path):
    from support.cli import mmstack

    ch = channel.ensure_channel(tmp_path / "channel", create=True)
    garbage, _ = _corrupt_copies(tmp_path, ch)
    code, out, err = mmstack("channel", "index", str(ch))
    assert code == 2, err
    assert err.startswith("error: ") and garbage.name in err
    assert "Traceback" not in err and "panicked" not in err and out == ""


@pytest.mark.parametrize("args, name", [
    (("channel", "index", ""), "PATH"),
    (("verify", "--python", ""), "--python"),
    (("verify", "--levels", " "), "--levels"),
    (("check", "--root", ""), "--root"),
    (("build", "--env", "rtx4090", "--channel", ""), "--channel"),
])
def test_empty_strings_are_bad_input(tmp_path, args, name):
    from support.cli import mmstack

    code, out, err = mmstack(*args, cwd=tmp_path)
    assert code == 2, (out, err)
    assert err.startswith(f"error: command line: {name} is empty")
    assert list(tmp_path.iterdir()) == [], "nothing written (channel index '' indexed the current directory)"
