"""Lock files without this machine's paths: a local channel inside the workspace is written relative
to it, and read back as the absolute location the rest of mmstack compares.

pixi.lock (rattler's writer) spells a local channel `file:///<root>/channel/` and each of its
packages `conda: /<root>/channel/<subdir>/<file>` plus `channel: file:///<root>/channel`. Written
here instead:

- `environments.<env>.channels[].url: ./channel/`. pixi reads each locked channel with
  `NamedChannelOrUrl::from_str(url).into_base_url(&channel_config)` and compares it with pixi.toml's
  channel resolved the same way (pixi crates/pixi_core/src/lock_file/satisfiability/environment.rs,
  `verify_environment_satisfiability`, at prefix-dev/pixi 2b25fc76): a relative path is joined to the
  workspace root (the channel config's root_dir), so `./channel/` in the lock is the manifest's
  `./channel`, in any clone.
- `conda: ./channel/<subdir>/<file>`: rattler_lock's package location is a URL or a path (v6+),
  a relative path taken from the lock file's directory, i.e. the workspace root. The package's
  `channel:` line (a URL field, which a relative path is not) is left out; it is optional, and
  pixi reads it for nothing that decides satisfiability of a binary package here.

envs/<env>.conda-lock.yml: each package `url` of a workspace channel is written `./channel/...`,
relative to the workspace root as the environment's `./channel` is (envs/<env>.yml says to run
conda from there); conda turns a package path into a URL from the working directory.

Locations outside the workspace stay absolute (a relative path would point elsewhere in another
clone). py-rattler 0.28 loads a relative `conda:` location but refuses to make a record of it
("The path is not an absolute path"), so readers turn the text back into absolute locations first.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_URL_LINE = re.compile(r"^(\s*-?\s*(?:url|channel): )(\S+)\s*$")
_CONDA_LINE = re.compile(r"^(\s*-?\s*conda: )(\S+)\s*$")
_PACKAGE_CHANNEL = re.compile(r"^(\s*channel: )(\S+)\s*$")


def _root(root: Path) -> str:
    return str(Path(os.path.abspath(root)).resolve()).rstrip("/") + "/"


def relative(location: str, root: Path) -> str:
    """A file:// URL or absolute path inside root as `./...`; anything else unchanged."""
    base = _root(root)
    path = location[len("file://"):] if location.startswith("file:///") else location
    if path.startswith(base):
        return "./" + path[len(base):]
    if path.rstrip("/") + "/" == base:
        return "./"
    return location


def absolute(location: str, root: Path, *, url: bool) -> str:
    """`./...` or `../...` joined to root and normalised lexically (as pixi does): a file:// URL
    when `url`, else a path; anything else unchanged."""
    if not location.startswith(("./", "../")) and location not in (".", ".."):
        return location
    slash = "/" if location.endswith("/") else ""
    path = os.path.normpath(os.path.join(_root(root), location))
    return (Path(path).as_uri() if url else path) + slash


def portable_pixi_lock(text: str, root: Path) -> str:
    """rattler's pixi.lock text with root's local channels and packages written relative to root."""
    out = []
    for line in text.splitlines(keepends=True):
        if (m := _PACKAGE_CHANNEL.match(line)) and relative(m.group(2), root) != m.group(2):
            continue  # a package's `channel:` is a URL field: optional, and left out for a local channel
        if m := _URL_LINE.match(line) or _CONDA_LINE.match(line):
            line = f"{m.group(1)}{relative(m.group(2), root)}\n"
        out.append(line)
    return "".join(out)


def absolute_pixi_lock(text: str, root: Path) -> str:
    """The inverse for reading: relative channel URLs and package paths made absolute under root."""
    out = []
    for line in text.splitlines(keepends=True):
        if m := _URL_LINE.match(line):
            line = f"{m.group(1)}{absolute(m.group(2), root, url=True)}\n"
        elif m := _CONDA_LINE.match(line):
            line = f"{m.group(1)}{absolute(m.group(2), root, url=False)}\n"
        out.append(line)
    return "".join(out)
