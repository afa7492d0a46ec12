"""pixi.toml -> the environments `mmstack lock` solves: specs, channels, platform, virtual packages.

Reads the subset of pixi's manifest mmstack uses (pixi >= 0.71): `[workspace]` channels and
platforms (bare subdirs or inline tables with `cuda = { driver, arch }`, `glibc`, `linux`,
`archspec`, raw `__name` keys), the default feature (top-level `[dependencies]`,
`[pypi-dependencies]`), `[feature.<name>]` with `dependencies`, `pypi-dependencies`,
`platforms`, and `[environments]` (a feature list or `{ features, no-default-feature }`).
Anything malformed is a BadInput naming pixi.toml and the field, and so is anything pixi would
solve or check differently that `mmstack lock` does not model (UNMODELLED): a lock that ignored
it would be one pixi calls outdated.

Like pixi (pixi_manifest/src/toml/manifest.rs), the environments are those of `[environments]`
plus the implicit `default` (the default feature alone, on every workspace platform) whenever
`[environments]` does not define `default`: pixi locks it too, and calls a lock without it
outdated (pixi_core/src/lock_file/outdated.rs).

Docs: https://pixi.sh/latest/workspace/multi_platform_configuration/#declaring-virtual-packages-per-platform
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from mmstack.builder.reach import channel_url  # one place: what a channel's name means, whether it answers
from mmstack.envs import toml11
from mmstack.errors import BadInput

MANIFEST = "pixi.toml"
CONDA_FORGE = "https://conda.anaconda.org/conda-forge/"
# pixi's defaults for a bare linux-64 entry (docs: "Default declared virtual packages").
LINUX_DEFAULTS = {"__linux": "4.18", "__glibc": "2.28"}
_FRIENDLY = {"glibc": "__glibc", "linux": "__linux", "archspec": "__archspec", "macos": "__osx",
             "osx": "__osx", "windows": "__win"}


@dataclass(frozen=True)
class Platform:
    name: str  # what features and the lock call it ("linux-64", "linux-64-rtx4090")
    subdir: str  # the conda subdir ("linux-64")
    declared: tuple[tuple[str, str], ...]  # as written: (("__cuda", "12.9"), ("__cuda_arch", "8.9"), ...)

    @property
    def virtual_packages(self) -> dict[str, str]:
        """What the solver assumes: pixi's defaults for the subdir, overridden by the declared ones."""
        base = dict(LINUX_DEFAULTS) if self.subdir.startswith("linux") else {}
        base.update(self.declared)
        return base

    def vp(self, name: str) -> str | None:
        return self.virtual_packages.get(name)

    def declared_strings(self) -> list[str]:
        """The declared virtual packages as `__cuda=12.9` (what the lock digests hash)."""
        return [f"{n}={v}" for n, v in self.declared]

    def lock_strings(self) -> list[str]:
        """What pixi writes into pixi.lock for this platform: the declared virtual packages, then
        the subdir's defaults not declared (`__unix=0=0`, `__linux=4.18`, `__glibc=2.28`,
        `__archspec=0=x86_64` on linux-64), each `name=version[=build]`."""
        out = [f"{n}={v}" for n, v in self.declared]
        declared = {n for n, _ in self.declared}
        for n, v, b in subdir_defaults(self.subdir):
            if n not in declared:
                out.append(f"{n}={v}={b}" if b else f"{n}={v}")
        return out

    @property
    def is_subdir_platform(self) -> bool:
        """A bare subdir entry (`"linux-64"`): pixi.lock keeps its name; others get aliases."""
        return self.name == self.subdir

    def identity(self) -> tuple:
        """What pixi matches a locked platform by: the subdir plus the customised virtual packages."""
        return platform_identity(self.subdir, self.lock_strings())


# pixi's per-subdir default virtual packages (pixi_manifest/src/platform.rs,
# `subdir_default_virtual_packages`): name, version, build string.
_ARCHSPEC = {"linux-64": "x86_64", "linux-aarch64": "aarch64", "linux-ppc64le": "ppc64le", "osx-64": "x86_64",
             "osx-arm64": "m1", "win-64": "x86_64"}


def subdir_defaults(subdir: str) -> list[tuple[str, str, str]]:
    out = []
    if subdir.startswith(("linux", "osx")):
        out.append(("__unix", "0", "0"))
    if subdir.startswith("linux"):
        out += [("__linux", LINUX_DEFAULTS["__linux"], ""), ("__glibc", LINUX_DEFAULTS["__glibc"], "")]
    if subdir in _ARCHSPEC:
        out.append(("__archspec", "0", _ARCHSPEC[subdir]))
    return out


def _norm_version(v: str) -> str:
    parts = v.split(".")
    while len(parts) > 1 and parts[-1] == "0":
        parts.pop()
    return ".".join(parts)


def platform_identity(subdir: str, lock_strings) -> tuple:
    """(subdir, sorted customised virtual packages): `name=version[=build]` strings less the
    subdir's defaults, build `0` read as none (pixi's `customised_virtual_packages`)."""
    defaults = {(n, _norm_version(v), b) for n, v, b in subdir_defaults(subdir)}
    custom = set()
    for raw in lock_strings:
        parts = str(raw).split("=", 2)
        if len(parts) < 2:
            continue
        name, version, build = parts[0], _norm_version(parts[1]), parts[2] if len(parts) == 3 else ""
        if (name, version, build) in defaults:
            continue
        custom.add((name, version, "" if build == "0" else build))
    return (subdir, tuple(sorted(custom)))


@dataclass(frozen=True)
class Spec:
    """One requested conda dependency, as written in pixi.toml."""

    name: str
    version: str = "*"
    build: str | None = None
    channel: str | None = None
    feature: str = "default"

    @property
    def match_spec(self) -> str:
        """A rattler MatchSpec string: `mmcv 2.2.0.* cuda129_sm89_*`."""
        prefix = f"{self.channel}::" if self.channel else ""
        if self.build:
            return f"{prefix}{self.name} {self.version or '*'} {self.build}"
        if self.version in ("", "*"):
            return f"{prefix}{self.name}"
        return f"{prefix}{self.name} {self.version}"

    def as_dict(self) -> dict:
        return {"name": self.name, "version": self.version, "build": self.build, "channel": self.channel}


@dataclass(frozen=True)
class EnvSpec:
    name: str
    features: tuple[str, ...]  # in order, "default" first unless no-default-feature
    specs: tuple[Spec, ...]
    pypi: tuple[str, ...]  # names of pypi-dependencies (mmstack does not solve PyPI)
    platforms: tuple[Platform, ...]
    channels: tuple[str, ...]  # as written in pixi.toml

    def specs_named(self, name: str) -> list[Spec]:
        return [s for s in self.specs if s.name == name]

    def digest(self) -> str:
        """What the lock of this environment was solved from (pixi.toml's share of it)."""
        data = {
            "specs": [s.as_dict() for s in self.specs],
            "pypi": list(self.pypi),
            "platforms": [[p.name, p.subdir, list(p.declared_strings())] for p in self.platforms],
            "channels": list(self.channels),
        }
        return _digest(data)


@dataclass(frozen=True)
class Manifest:
    path: Path
    channels: tuple[str, ...]
    platforms: tuple[Platform, ...]
    envs: dict[str, EnvSpec] = field(default_factory=dict)
    requires_pixi: str | None = None  # workspace.requires-pixi as written (">=0.71")

    @property
    def root(self) -> Path:
        return self.path.parent

    def env(self, name: str) -> EnvSpec:
        if name not in self.envs:
            raise BadInput(f"no environment {name!r} in [environments]", source=str(self.path),
                           fix=f"use one of: {', '.join(self.envs)}")
        return self.envs[name]

    def channel_urls(self) -> list[str]:
        return [channel_url(c, self.root) for c in self.channels]

    def pixi_lock_channels(self) -> list[str]:
        """The channels as pixi resolves them for pixi.lock, which it compares with the lock's
        (rattler_conda_types `NamedChannelOrUrl::into_base_url`): a name under the channel alias,
        a path joined to the workspace root and normalised lexically, a symlink kept as named
        (`channel_urls`, for the solve, resolves it)."""
        out = []
        for c in self.channels:
            text = str(c).strip()
            if "://" not in text and text.startswith((".", "/", "~")):
                path = Path(os.path.normpath(self.root.resolve() / Path(text).expanduser()))
                out.append(path.as_uri().rstrip("/") + "/")
            else:
                out.append(channel_url(text, self.root))
        return out

    def lock_aliases(self) -> dict[str, str]:
        """Platform name -> the short name pixi writes into pixi.lock: `p1`, `p2`, ... for every
        entry that is not a bare subdir, in declaration order (pixi_core lock_file/platform_rename.rs,
        `shorten_platform_names`)."""
        rich = [p for p in self.platforms if not p.is_subdir_platform]
        return {p.name: f"p{i}" for i, p in enumerate(rich, 1)}


def _digest(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def load(path: Path) -> Manifest:
    path = Path(path)
    where = str(path)
    if not path.is_file():
        raise BadInput(f"{path.name} not found", source=where, fix="run from the repository root or pass --root")
    try:
        raw = toml11.loads(path.read_text())  # pixi >= 0.73 reads TOML 1.1
    except (OSError, toml11.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read the manifest: {exc}", source=where, fix="fix the TOML syntax") from None
    return parse(raw, path)


DEFAULT_ENV = "default"

# Keys pixi reads that change what it solves or what its satisfiability check demands, and that
# `mmstack lock` does not model: refused rather than ignored. (table, key) -> why.
UNMODELLED = {
    "channel-priority": "pixi checks the lock's channel priority against it; mmstack solves with strict priority",
    "solve-strategy": "pixi checks the lock's solve strategy against it; mmstack solves for the highest versions",
    "exclude-newer": "pixi checks every locked record's timestamp against it; mmstack's solve does not apply it",
    "constraints": "pixi checks every locked record against [constraints]; mmstack's solve does not read them",
    "system-requirements": "pixi composes platforms from it; mmstack reads the platform entries only",
    "pypi-options": "mmstack locks no PyPI packages",
}
_ENV_KEYS = {"features", "no-default-feature"}


def _refuse_unmodelled(table: dict, where: str, field: str) -> None:
    for key, why in UNMODELLED.items():
        if key in table:
            raise BadInput(f"{field}{key}: not supported by `mmstack lock` ({why})", source=where,
                           fix=f"remove {key}, or lock this workspace with pixi")
    target = table.get("target")
    if isinstance(target, dict):
        for tname, tbody in target.items():
            if isinstance(tbody, dict) and set(tbody) & {"dependencies", "pypi-dependencies", "constraints"}:
                raise BadInput(f"{field}target.{tname}: per-target dependencies are not supported by `mmstack lock`",
                               source=where, fix="declare them in a feature bound to that platform")


def parse(raw: dict, path: Path) -> Manifest:
    where = str(path)
    ws = raw.get("workspace", raw.get("project"))
    if not isinstance(ws, dict):
        raise BadInput("no [workspace] table", source=where, fix="add [workspace] with channels and platforms")
    _refuse_unmodelled(ws, where, "workspace.")
    _refuse_unmodelled(raw, where, "")
    channels = ws.get("channels")
    if not isinstance(channels, list) or not channels or not all(isinstance(c, str) for c in channels):
        raise BadInput("workspace.channels must be a non-empty list of strings", source=where,
                       fix='channels = ["./channel", "conda-forge"]')
    plats = _platforms(ws.get("platforms"), where)
    by_name = {p.name: p for p in plats}

    features: dict[str, dict] = {"default": {k: raw[k] for k in ("dependencies", "pypi-dependencies") if k in raw}}
    for fname, fbody in (raw.get("feature") or {}).items():
        if not isinstance(fbody, dict):
            raise BadInput(f"feature.{fname} must be a table", source=where)
        _refuse_unmodelled(fbody, where, f"feature.{fname}.")
        features[fname] = fbody

    envs_raw = raw.get("environments") or {}
    if not isinstance(envs_raw, dict):
        raise BadInput("[environments] must be a table", source=where)
    envs: dict[str, EnvSpec] = {}
    if DEFAULT_ENV not in envs_raw:  # pixi's implicit environment: the default feature, every platform
        envs[DEFAULT_ENV] = _env(DEFAULT_ENV, ["default"], features, plats, by_name, tuple(channels), where)
    for ename, edef in envs_raw.items():
        if isinstance(edef, list):
            fnames, no_default = edef, False
        elif isinstance(edef, dict):
            unknown_keys = sorted(set(edef) - _ENV_KEYS)
            if unknown_keys:
                raise BadInput(f"environments.{ename}.{unknown_keys[0]}: not supported by `mmstack lock`"
                               " (it reads `features` and `no-default-feature`)", source=where,
                               fix="move inline dependencies into a [feature] and drop solve-group")
            fnames, no_default = edef.get("features", []), bool(edef.get("no-default-feature", False))
        else:
            raise BadInput(f"environments.{ename} must be a list of features or a table", source=where)
        if not all(isinstance(f, str) for f in fnames):
            raise BadInput(f"environments.{ename}: features must be strings", source=where)
        order = ([] if no_default else ["default"]) + list(fnames)
        unknown = [f for f in order if f not in features]
        if unknown:
            raise BadInput(f"environments.{ename}: unknown feature {unknown[0]!r}", source=where,
                           fix=f"define [feature.{unknown[0]}] or remove it")
        envs[ename] = _env(ename, order, features, plats, by_name, tuple(channels), where)
    requires = ws.get("requires-pixi")
    if requires is not None and not isinstance(requires, str):
        raise BadInput("workspace.requires-pixi must be a version spec string", source=where, fix='requires-pixi = ">=0.71"')
    return Manifest(path=path, channels=tuple(channels), platforms=plats, envs=envs, requires_pixi=requires)


_FLOOR = re.compile(r"^\s*>=\s*(\d+)\.(\d+)(?:\.(\d+))?\s*(?:,.*)?$")

# pixi bugs that break this layout, with the first release that fixes each: `requires-pixi` (and
# so the pixi CI installs, `pixi_floor`) must admit none of the releases before it.
PIXI_FIXES = (
    ("prefix-dev/pixi#6493", (0, 72, 1),
     "a feature pinned to the bare `linux-64` also got every rich `linux-64-*` platform (fixed by #6517 in v0.72.1),"
     " so pixi solved cpu, build, test and lint for each GPU platform too, unlike mmstack's lock"),
)


def pixi_floor_version(manifest: Manifest) -> tuple[int, int, int]:
    """`requires-pixi`'s lower bound as numbers: `>=0.72.1` -> (0, 72, 1)."""
    major, minor, patch = pixi_floor(manifest)[1:].split(".")
    return int(major), int(minor), int(patch)


def pixi_floor_problems(manifest: Manifest) -> list[tuple[str, str]]:
    """(bug, what it breaks) for each of PIXI_FIXES that `requires-pixi` still admits."""
    floor = pixi_floor_version(manifest)
    return [(bug, f"{what}; requires-pixi {manifest.requires_pixi!r} admits releases before v{'.'.join(map(str, fixed))}")
            for bug, fixed, what in PIXI_FIXES if floor < fixed]


def pixi_floor(manifest: Manifest) -> str:
    """The pixi release CI installs: the lowest one `requires-pixi` admits (`>=0.71` -> `v0.71.0`),
    so CI proves the floor the manifest states."""
    where = f"{manifest.path} (workspace.requires-pixi)"
    if manifest.requires_pixi is None:
        raise BadInput("no requires-pixi: the workflows take the pixi version from it", source=str(manifest.path),
                       fix='add requires-pixi = ">=X.Y" to [workspace]')
    m = _FLOOR.match(manifest.requires_pixi)
    if not m:
        raise BadInput(f"{manifest.requires_pixi!r} has no lower bound `>=X.Y[.Z]` first", source=where,
                       fix='write it as ">=0.71" or ">=0.71,<1"')
    return f"v{m[1]}.{m[2]}.{m[3] or 0}"


def _platforms(value, where: str) -> tuple[Platform, ...]:
    if not isinstance(value, list) or not value:
        raise BadInput("workspace.platforms must be a non-empty list", source=where, fix='platforms = ["linux-64"]')
    out: list[Platform] = []
    for i, entry in enumerate(value):
        field_ = f"workspace.platforms[{i}]"
        if isinstance(entry, str):
            out.append(Platform(entry, entry, ()))
            continue
        if not isinstance(entry, dict) or "platform" not in entry:
            raise BadInput(f"{field_}: needs `platform` (a conda subdir)", source=where,
                           fix='{ name = "linux-64-rtx4090", platform = "linux-64", cuda = { driver = "12.9", arch = "8.9" } }')
        subdir = str(entry["platform"])
        vps: dict[str, str] = {}
        for key, val in entry.items():
            if key in ("platform", "name"):
                continue
            if key == "cuda":
                if isinstance(val, dict):
                    if "driver" not in val:
                        raise BadInput(f"{field_}.cuda: `arch` needs `driver`", source=where,
                                       fix='cuda = { driver = "12.9", arch = "8.9" }')
                    vps["__cuda"] = str(val["driver"])
                    if "arch" in val:
                        vps["__cuda_arch"] = str(val["arch"])
                else:
                    vps["__cuda"] = str(val)
            elif key in _FRIENDLY:
                vps[_FRIENDLY[key]] = str(val)
            elif key.startswith("__"):
                vps[key] = str(val)
            else:
                raise BadInput(f"{field_}: unknown key {key!r}", source=where,
                               fix="use platform, name, cuda, glibc, linux, archspec or a raw __name")
        name = entry.get("name") or _synth_name(subdir, vps)
        out.append(Platform(str(name), subdir, tuple(sorted(vps.items()))))
    names = [p.name for p in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise BadInput(f"workspace.platforms: name {sorted(dup)[0]!r} declared twice", source=where)
    return tuple(out)


def _synth_name(subdir: str, vps: dict[str, str]) -> str:
    """pixi's synthesized name, e.g. `linux-64-cuda-12-0` for { platform = "linux-64", cuda = "12.0" }."""
    parts = [subdir]
    for n, v in sorted(vps.items()):
        parts.append(f"{n.lstrip('_').replace('_', '-')}-{v.replace('.', '-')}")
    return "-".join(parts)


def _env(name, order, features, plats, by_name, channels, where) -> EnvSpec:
    specs: list[Spec] = []
    pypi: list[str] = []
    allowed: set[str] | None = None
    for fname in order:
        body = features[fname]
        fdeps = body.get("dependencies") or {}
        if not isinstance(fdeps, dict):
            raise BadInput(f"feature.{fname}.dependencies must be a table", source=where)
        for dep, val in fdeps.items():
            specs.append(_spec(dep, val, fname, where))
        pypi.extend(str(k) for k in (body.get("pypi-dependencies") or {}))
        if "channels" in body and fname != "default":
            raise BadInput(f"feature.{fname}.channels: per-feature channels are not supported by `mmstack lock`",
                           source=where, fix="declare channels once in [workspace]")
        if "platforms" in body:
            fp = body["platforms"]
            if not isinstance(fp, list) or not all(isinstance(p, str) for p in fp):
                raise BadInput(f"feature.{fname}.platforms must be a list of platform names", source=where)
            for p in fp:
                if p not in by_name:
                    raise BadInput(f"feature.{fname}.platforms: {p!r} is not a workspace platform", source=where,
                                   fix=f"use one of: {', '.join(by_name)}")
            allowed = set(fp) if allowed is None else allowed & set(fp)
    chosen = tuple(p for p in plats if allowed is None or p.name in allowed)
    if not chosen:
        raise BadInput(f"environments.{name}: its features share no platform", source=where,
                       fix="give the features a common entry in their `platforms`")
    return EnvSpec(name=name, features=tuple(order), specs=tuple(specs), pypi=tuple(pypi),
                   platforms=chosen, channels=channels)


def _spec(name: str, val, feature: str, where: str) -> Spec:
    if isinstance(val, str):
        return Spec(name, val.strip() or "*", feature=feature)
    if isinstance(val, dict):
        unknown = set(val) - {"version", "build", "channel"}
        if unknown:
            raise BadInput(f"feature.{feature}.dependencies.{name}: unsupported key {sorted(unknown)[0]!r}",
                           source=where, fix="use version, build and channel")
        return Spec(name, str(val.get("version", "*")), val.get("build"), val.get("channel"), feature)
    raise BadInput(f"feature.{feature}.dependencies.{name}: expected a version string or a table", source=where)
