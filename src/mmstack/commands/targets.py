"""Every place a command writes, checked before its work starts (a build of mmcv takes an hour: a
read-only channel must not be found out at its end).

A place is writable when a file can be created in it: the check creates one and removes it, so a
read-only mount, a permission, a full quota or a path under /proc answer as they would to the
real write, for root too. A bad place is BadInput (exit 2): one line naming the option, the path
and the fix.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from pathlib import Path

from mmstack.errors import BadInput


def writable_dir(path: Path, *, option: str, what: str = "into it", given: Path | None = None) -> Path:
    """`path` is a directory this command writes `what` into, or a new one it may create. `given`:
    the option's value, where `path` is derived from it (--root DIR: DIR/envs)."""
    shown = given if given is not None else path
    place = _existing(path)
    if not place.is_dir():
        who = "" if place == path.absolute() else f"{place} is "
        raise BadInput(f"{option} {shown}: {who}{_kind(place)}, not a directory",
                       fix=f"pass a directory for {option}" if place == path.absolute() else
                           f"{place} is in the way: pick another path for {option}")
    _probe(place, option, shown, f"write {what}" if place == path.absolute() else f"create {path.name}/ in {place}")
    return path


def writable_file(path: Path, *, option: str) -> Path:
    """`path` is a file this command writes (or appends to): its directory must take it, a
    directory in its place is refused."""
    if path.is_dir():
        raise BadInput(f"{option} {path}: a directory, not a file",
                       fix=f"pass a file path for {option}, e.g. {shlex.quote(str(path / 'build.log'))}")
    if path.exists():
        try:  # without blocking: a FIFO with no reader answers ENXIO instead of waiting for one
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK))
        except OSError as exc:
            raise BadInput(f"{option} {path}: cannot write it ({exc.strerror or exc})",
                           fix=f"make it writable or pick another path for {option}") from None
        return path
    parent = path.parent if str(path.parent) else Path(".")
    place = _existing(parent)
    if not place.is_dir():
        raise BadInput(f"{option} {path}: {place} is {_kind(place)}, not a directory",
                       fix=f"pick another path for {option}")
    _probe(place, option, path, "create it")
    return path


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists."""
    place = path.absolute()
    while not place.exists() and not place.is_symlink() and place != place.parent:
        place = place.parent
    return place


def _probe(directory: Path, option: str, path: Path, action: str) -> None:
    try:
        fd, name = tempfile.mkstemp(prefix=".mmstack-write-check-", dir=directory)
    except OSError as exc:
        raise BadInput(f"{option} {path}: cannot {action} ({exc.strerror or exc})",
                       fix=f"make {directory} writable or pick a writable place for {option}") from None
    os.close(fd)
    os.unlink(name)


def _kind(path: Path) -> str:
    if path.is_symlink() and not path.exists():
        return "a broken symbolic link"
    if path.is_file():
        return "a file"
    return "a special file" if path.exists() else "missing"
