"""Committed fixtures made by real tools that CI cannot run (conda-build): loaded only while the
repository files they were made from are unchanged (their `inputs_sha256`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_current(path: Path, *, how: str = "") -> dict:
    """The fixture at `path`; an AssertionError naming the changed input and its `generated_by`."""
    doc = json.loads(path.read_text())
    for rel, digest in doc["inputs_sha256"].items():
        now = hashlib.sha256((ROOT / rel).read_bytes()).hexdigest()
        assert now == digest, (f"{rel} changed since {path.relative_to(ROOT)} was made: regenerate it with "
                               f"`{doc['generated_by']}`{how}")
    return doc
