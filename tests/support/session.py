"""The session fixtures of both test trees (tests/ and lab/tests/): each conftest.py imports them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.fixture(scope="session", autouse=True)
def _user_cache(tmp_path_factory):
    """`mmstack verify` keeps its levels' times in the user's cache (verify/timings.py): the tests' runs,
    the CLI subprocesses included, keep theirs in a temporary one."""
    old = os.environ.get("MMSTACK_CACHE_DIR")
    os.environ["MMSTACK_CACHE_DIR"] = str(tmp_path_factory.mktemp("user-cache"))
    yield
    if old is None:
        os.environ.pop("MMSTACK_CACHE_DIR", None)
    else:
        os.environ["MMSTACK_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def real_mmcv_python() -> str:
    """An interpreter whose mmcv has compiled ops.

    MMSTACK_TEST_MMCV_PYTHON if set; else this interpreter when `mmcv._ext` imports here; else the
    prefix that tests/test_build_e2e.py installed from the recipe-built channel (it runs first:
    the collection order of tests/conftest.py); else the test is skipped with the reason.
    """
    exe = os.environ.get("MMSTACK_TEST_MMCV_PYTHON")
    if exe:
        if not os.access(exe, os.X_OK):
            pytest.fail(f"MMSTACK_TEST_MMCV_PYTHON={exe!r} is not an executable interpreter")
        return exe
    probe = subprocess.run([sys.executable, "-c", "import torch, mmcv._ext"], capture_output=True, text=True, timeout=300)
    if probe.returncode == 0:
        return sys.executable
    from mmstack_lab.standin.bootstrap import PREFIX_POINTER

    built = PREFIX_POINTER.read_text().strip() if PREFIX_POINTER.is_file() else ""
    if built and os.access(built, os.X_OK):
        return built
    last = (probe.stderr.strip().splitlines() or ["(no output)"])[-1]
    pytest.skip(f"no mmcv with compiled ops here ({last}) and no prefix from the e2e build "
                f"({PREFIX_POINTER}); run tests/test_build_e2e.py or set MMSTACK_TEST_MMCV_PYTHON")
