"""Shared fixtures (tests/support/session.py, shared with lab/tests) and the collection order."""

from __future__ import annotations

from support.session import _user_cache, real_mmcv_python  # noqa: F401 - fixtures, registered by import


def pytest_collection_modifyitems(session, config, items):
    """tests/test_build_e2e.py runs first, whatever the file names: its channel and installed prefix
    feed real_mmcv_python, a session fixture, so a test that asked for it earlier would skip and the
    skip would stick for every later test (a file named test_ba... sorted before it once)."""
    items.sort(key=lambda item: item.path.name != "test_build_e2e.py")  # stable: the rest keep their order
