"""Long logs in lab/results are committed xz-compressed; their readers go through here.

    read_log(Path(".../rattler-build-sm90.log"))   # the .log, or else its .log.xz

A device call carries the tracked tree beside its 64 MiB of wheels and packages, and the
rattler-build logs of the H200 runs were most of that tree (about 0.7 MB each), so
`compress_logs` (run by scrub_paths.py after scrubbing) replaces every log over LIMIT bytes
with `NAME.log.xz`. Readers name the `.log` as before.
"""

from __future__ import annotations

import lzma
from pathlib import Path

LIMIT = 64 * 1024


def read_log(path: Path) -> str:
    """The text of `path`, or of `path` + ".xz" when only the compressed one is there."""
    path = Path(path)
    if path.is_file():
        return path.read_text(encoding="utf-8", errors="replace")
    packed = path.with_name(path.name + ".xz")
    if packed.is_file():
        return lzma.decompress(packed.read_bytes()).decode("utf-8", errors="replace")
    raise FileNotFoundError(f"{path} (nor {packed.name})")


def log_exists(path: Path) -> bool:
    path = Path(path)
    return path.is_file() or path.with_name(path.name + ".xz").is_file()


def compress_logs(folder: Path, limit: int = LIMIT) -> list[Path]:
    """Every *.log over `limit` bytes under folder becomes *.log.xz (the .log removed)."""
    done = []
    for f in sorted(Path(folder).rglob("*.log")):
        if f.is_file() and f.stat().st_size > limit:
            packed = f.with_name(f.name + ".xz")
            packed.write_bytes(lzma.compress(f.read_bytes(), preset=9 | lzma.PRESET_EXTREME))
            f.unlink()
            done.append(packed)
    return done
