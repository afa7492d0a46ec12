"""The folder a build runs in: one path per work folder, so two builds of the same sources match.

rattler-build installs a recipe's host environment under
`<output>/bld/rattler-build_<name>[_<build id>]/host_env_placehold_...`, and compiled objects keep
that path wherever a header's `__FILE__` lands in them: torch's c10 asserts put it into mmcv's
`_ext` 1,594 times (lab/results/cpu-dev/build-reproducibility). The package records it as the
prefix placeholder that conda and rattler rewrite at install. A random output folder per build, and
rattler-build's build id, made two builds of the same sources differ in those bytes; here every
build in one work folder runs in `<work>/mmstack-build-tree`, without a build id.

One build at a time holds the folder (an exclusive lock on the folder itself). A second build that
starts while another holds it builds in a folder of its own and says so: its binaries then embed
that folder instead.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

FIXED = "mmstack-build-tree"


def _clear(folder: Path) -> None:
    for entry in folder.iterdir():  # what a kept (--keep-build) or killed build left
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _lock(folder: Path) -> int | None:
    """An exclusive lock on `folder` (created if missing); None if another process holds it."""
    for _ in range(3):  # the folder may be removed and made again between open and lock
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            if os.stat(folder).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # locked a folder another build removed: lock the new one
    return None


@contextmanager
def build_folder(work_dir: str | os.PathLike[str] | None, *, keep: bool = False,
                 say: Callable[[str], None] = lambda _m: None) -> Iterator[tuple[Path, bool]]:
    """(folder, fixed): `<work>/mmstack-build-tree`, emptied, when no other build holds it (fixed:
    build without a build id), else a new random folder beside it. Removed afterwards unless `keep`
    (a kept fixed folder is emptied by the next build in the same work folder)."""
    root = Path(work_dir) if work_dir else Path(tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    fixed = root / FIXED
    fd = _lock(fixed)
    if fd is None:
        out = Path(tempfile.mkdtemp(prefix="mmstack-build-", dir=root))
        say(f"another build is using {fixed}: this one builds in {out.name}, so its binaries embed that "
            f"folder and differ from a build in {FIXED}")
        try:
            yield out, False
        finally:
            if not keep:
                shutil.rmtree(out, ignore_errors=True)
        return
    try:
        _clear(fixed)
        yield fixed, True
    finally:
        if not keep:
            shutil.rmtree(fixed, ignore_errors=True)
        os.close(fd)  # closing the descriptor releases the lock
