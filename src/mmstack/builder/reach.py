"""Can a channel be reached: the one place that answers it, before anything is solved or built.

A channel is named three ways (`conda-forge`, a local directory, a URL); `channel_url` says which URL
each name means. A remote channel is reachable when it answers with its noarch/repodata.json
(`unreachable`, `require_reachable`: `mmstack build --source-channel`, `mmstack lock --channel`); a
local one when it is an indexed channel (`require_indexed`: the solve's local channels). Standard
library only: urllib, so HTTP(S)_PROXY and NO_PROXY apply as they do for the solver.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from mmstack.errors import BadInput, CheckFailed

REACH_TIMEOUT_S = 15.0


def channel_url(channel: str, root: Path) -> str:
    """`conda-forge` -> its anaconda.org URL; `./channel` -> file:// URL; URLs stay; trailing /."""
    c = str(channel).strip()
    if "://" in c:
        url = c
    elif c.startswith((".", "/", "~")):
        p = Path(c).expanduser()
        url = (p if p.is_absolute() else (root / p)).resolve().as_uri()
    else:
        url = f"https://conda.anaconda.org/{c}"
    return url.rstrip("/") + "/"


def unreachable(channels: Sequence[str], *, timeout: float = REACH_TIMEOUT_S) -> list[tuple[str, str, str]]:
    """(channel as given, URL probed, why) for each remote channel that does not answer with its
    noarch/repodata.json. Local channels are left to their own checks. The probe goes through
    urllib, so HTTP(S)_PROXY / NO_PROXY apply as they do for the solver."""
    import urllib.error  # here: only a command that reads a remote channel pays for urllib.request
    import urllib.request

    out = []
    for given in channels:
        url = channel_url(str(given), Path.cwd())
        if not url.startswith(("http://", "https://")):
            continue
        probe = url + "noarch/repodata.json"
        try:
            req = urllib.request.Request(probe, method="HEAD", headers={"User-Agent": "mmstack"})
            with urllib.request.urlopen(req, timeout=timeout):
                pass
        except urllib.error.HTTPError as exc:
            why = "not a conda channel (no noarch/repodata.json)" if exc.code == 404 else f"HTTP {exc.code} {exc.reason}"
            out.append((str(given), probe, why))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            out.append((str(given), probe, f"cannot connect: {reason}"))
    return out


def require_reachable(channels: Sequence[str], *, option: str, timeout: float = REACH_TIMEOUT_S) -> None:
    """CheckFailed naming the first source channel that cannot be reached, and the fix."""
    bad = unreachable(channels, timeout=timeout)
    if bad:
        given, probe, why = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise CheckFailed(f"source channel {given} cannot be reached: {why} at {probe}{more}",
                          fix=f"check the network and the proxy (HTTPS_PROXY, NO_PROXY), or use a mirror or a local copy "
                              f"of it: {option} URL|DIR (repeatable)")


def require_indexed(channels: Sequence[str]) -> None:
    """A local channel must be an indexed channel before the solver sees it.

    (Also keeps rattler from failing on it while a remote fetch is still in flight, which can
    abort the interpreter at exit.)
    """
    for c in channels:
        if not c.startswith("file://"):
            continue
        root = Path(unquote(urlparse(c).path))
        if not (root / "noarch" / "repodata.json").is_file():
            raise BadInput(f"channel {c} is not an indexed conda channel (no noarch/repodata.json)",
                           fix="build and index it (`mmstack build --all --channel channel`, `mmstack channel index channel`)"
                               " or pass --channel")
