"""How long each ladder level took last time, so `mmstack verify`'s progress can say what to expect.

One small JSON file in the user's cache (`$MMSTACK_CACHE_DIR`, else `$XDG_CACHE_HOME/mmstack`, else
`~/.cache/mmstack`): `verify-timings.json`, {key: {level: seconds}}, where the key is the
interpreter verified and what runs (levels, L4 mode, detectors, ranks). A run records the levels
that passed or skipped; a failed or timed-out level keeps the time of its last good run. The file
is a cache: unreadable or missing, there is no expectation; it cannot be written, the run goes on.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

CACHE_ENV = "MMSTACK_CACHE_DIR"
FILE = "verify-timings.json"
_KEPT = ("PASS", "SKIP")


def cache_dir() -> Path:
    """Where mmstack keeps what it may lose (stdlib XDG rules: platformdirs is no dependency)."""
    for var, sub in ((CACHE_ENV, ""), ("XDG_CACHE_HOME", "mmstack")):
        value = os.environ.get(var, "").strip()
        if value:
            return Path(value).expanduser() / sub if sub else Path(value).expanduser()
    return Path.home() / ".cache" / "mmstack"


def key(*, python: str, levels: tuple[str, ...], l4: str = "quick", models: tuple[str, ...] = (),
        nproc: int | None = None) -> str:
    """The interpreter and what runs: `/env/bin/python L1,L2,L3,L4 l4=quick`."""
    parts = [python, ",".join(levels), f"l4={l4}"]
    if models:
        parts.append("models=" + ",".join(models))
    if nproc:
        parts.append(f"nproc={nproc}")
    return " ".join(parts)


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def expected(run_key: str, *, directory: Path | None = None) -> dict[str, float]:
    """{level: seconds} from the last run under this key; {} when none is known."""
    entry = _read((directory or cache_dir()) / FILE).get(run_key)
    if not isinstance(entry, dict):
        return {}
    return {lv: float(s) for lv, s in entry.items() if isinstance(s, int | float) and not isinstance(s, bool)}


def record(run_key: str, levels: list[tuple[str, str, float]], *, directory: Path | None = None) -> bool:
    """Keep (level, status, seconds) of the levels that passed or skipped; False when it cannot be written."""
    path = (directory or cache_dir()) / FILE
    data = _read(path)
    kept = data.get(run_key)
    entry: dict = kept if isinstance(kept, dict) else {}
    entry.update({lv: round(s, 3) for lv, status, s in levels if status in _KEPT})
    data[run_key] = entry
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{FILE}.")
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        return False
    return True
