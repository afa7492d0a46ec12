"""The lab's tests share the session fixtures of tests/ (tests/support/session.py; `support` is on
pytest's pythonpath, the root pyproject.toml)."""

from __future__ import annotations

from support.session import _user_cache, real_mmcv_python  # noqa: F401 - fixtures, registered by import
