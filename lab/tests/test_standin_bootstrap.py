"""mmstack_lab.standin.bootstrap's second CPython (issue 42 item 1): what it packages for another
interpreter is named from that interpreter, never from the one running the tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mmstack_lab.standin import bootstrap


def test_another_interpreter_describes_itself():
    py = bootstrap.Interpreter(Path("/opt/py313"), (3, 13, 0), Path("/opt/py313/bin/python3.13"))
    assert (py.py, py.tag, py.full_version) == ("3.13", "313", "3.13.0")
    assert py.abi == "python_abi 3.13.* *_cp313"
    assert py.pin == "python >=3.13,<3.14.0a0"
    assert not py.is_this
    assert bootstrap.THIS.is_this and bootstrap.THIS.py == bootstrap.PY and bootstrap.THIS.abi == bootstrap.PY_ABI


def test_the_running_interpreter_is_not_a_second_one(monkeypatch):
    monkeypatch.setenv(bootstrap.SECOND_PYTHON_ENV, sys.executable)
    with pytest.raises(bootstrap.BootstrapUnavailable, match="not a second one"):
        bootstrap.second_python()


def test_a_named_second_python_is_read_from_itself(monkeypatch):
    found = sorted(Path(bootstrap.PYENV_VERSIONS).expanduser().glob(bootstrap.SECOND_PYTHON_GLOB))
    if not found:
        pytest.skip(f"no {bootstrap.SECOND_PYTHON_GLOB} under {bootstrap.PYENV_VERSIONS}")
    monkeypatch.setenv(bootstrap.SECOND_PYTHON_ENV, str(found[-1]))
    py = bootstrap.second_python()
    assert py.py == "3.13" and (py.prefix / "bin" / "python3.13").is_file()


def test_a_missing_second_python_says_how_to_name_one(monkeypatch, tmp_path):
    monkeypatch.setenv(bootstrap.SECOND_PYTHON_ENV, str(tmp_path / "python3.13"))
    with pytest.raises(bootstrap.BootstrapUnavailable, match=bootstrap.SECOND_PYTHON_ENV):
        bootstrap.second_python()


@pytest.mark.parametrize(("wheel", "name"), [
    ("nvidia_cublas-13.1.1.3-py3-none-manylinux_2_27_x86_64.whl", "nvidia-cublas"),
    ("cuda_bindings-13.0.3-cp313-cp313-manylinux_2_28_x86_64.whl", "cuda-bindings"),
    ("triton-3.7.1-cp313-cp313-manylinux_2_28_x86_64.whl", "triton"),
])
def test_runtime_wheels_are_named_as_pypi_spells_them(wheel, name):
    assert bootstrap._dist_name(Path(wheel)) == name
    assert name.startswith(bootstrap.TORCH_RUNTIME_PREFIXES)


def test_python_min_is_the_noarch_recipes_default():
    """The e2e builds the noarch packages on bootstrap.PYTHON_MIN: the default every noarch recipe names."""
    from mmstack_lab.paths import ROOT

    for name in ("mmstack", "mmengine", "mmdet"):
        for recipe in sorted((ROOT / "recipes" / name).glob("*.yaml")):
            assert f'python_min | default("{bootstrap.PYTHON_MIN}")' in recipe.read_text(), recipe


def test_python_min_of_another_version_is_refused(monkeypatch):
    monkeypatch.setenv(bootstrap.PYTHON_MIN_ENV, sys.executable)  # this interpreter: refused as the running one
    with pytest.raises(bootstrap.BootstrapUnavailable, match="not a second one"):
        bootstrap.python_min_python()
    found = sorted(Path(bootstrap.PYENV_VERSIONS).expanduser().glob(bootstrap.SECOND_PYTHON_GLOB))
    if not found:
        pytest.skip(f"no {bootstrap.SECOND_PYTHON_GLOB} under {bootstrap.PYENV_VERSIONS}")
    monkeypatch.setenv(bootstrap.PYTHON_MIN_ENV, str(found[-1]))  # a 3.13 named as python_min
    with pytest.raises(bootstrap.BootstrapUnavailable, match=f"not python_min {bootstrap.PYTHON_MIN}"):
        bootstrap.python_min_python()


def test_older_python_pins_are_older_releases_or_the_same_with_their_markers():
    """Each 3.10 entry replaces WHEELS' entry of its name by an older release, or by the same release
    with more requirements (its `python_version < "3.11"` markers); what it adds is required by one."""
    from packaging.version import Version

    py310 = bootstrap.Interpreter(Path("/opt/py310"), (3, 10, 13), Path("/opt/py310/bin/python3.10"))
    ours = {w.pypi: w for w in bootstrap.WHEELS}
    wheels = bootstrap.wheels_for(py310)
    assert [w.pypi for w in wheels][:len(ours)] == list(ours)  # WHEELS' order, each once
    changed = [w for w in wheels if w.pypi in ours and w != ours[w.pypi]]
    older = [w for w in changed if Version(w.version) < Version(ours[w.pypi].version)]
    assert len(older) == 13, [w.pypi for w in older]
    for w in changed:
        if w not in older:
            assert w.version == ours[w.pypi].version and set(ours[w.pypi].depends) < set(w.depends), w
    added = [w for w in wheels if w.pypi not in ours]
    required = {d.split()[0] for w in changed for d in w.depends}
    assert added and all(w.name in required for w in added), added
    assert bootstrap.wheels_for(bootstrap.THIS) == bootstrap.WHEELS  # 3.11: WHEELS as pinned
    assert "tomli" in ours  # recipes/mmstack requires it on every Python
