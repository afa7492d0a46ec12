"""Read and write the two lock formats: pixi.lock (rattler's LockFile) and conda-lock v1 files.

Both come from one solve. pixi.lock holds every environment, each on its own platform entry
(pixi.lock v7 keeps a platform's declared virtual packages, e.g. `__cuda=12.9`,
`__cuda_arch=8.9`). `envs/<env>.conda-lock.yml` is conda-lock's v1 format
(https://github.com/conda/conda-lock, `conda_lock/lockfile/v1/models.py`) for conda/mamba
users; its `metadata.custom_metadata` carries the digests of the inputs the environment was
solved from, which is how `mmstack lock check` tells a stale lock.

Writes are atomic as a set: every file goes to a temporary file beside its target first and is
renamed into place only when all of them were written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mmstack.envs import portable
from mmstack.envs.pixi_manifest import Platform
from mmstack.errors import BadInput

PIXI_LOCK = "pixi.lock"
ENVS_DIR = "envs"
DIGEST_KEYS = ("mmstack_manifest", "mmstack_matrix", "mmstack_facts")


@dataclass(frozen=True)
class Locked:
    """One locked conda package, independent of the file it was read from."""

    name: str
    version: str
    build: str
    subdir: str
    url: str
    file_name: str
    sha256: str | None
    md5: str | None
    depends: tuple[str, ...] = ()
    constrains: tuple[str, ...] = ()
    record: object = field(default=None, compare=False, repr=False)  # rattler RepoDataRecord, when read from pixi.lock

    @property
    def label(self) -> str:
        return f"{self.name} {self.version} {self.build}"

    @classmethod
    def from_record(cls, r) -> Locked:
        return cls(
            name=r.name.normalized, version=str(r.version), build=str(r.build), subdir=str(r.subdir),
            url=str(r.url), file_name=str(r.file_name),
            sha256=r.sha256.hex() if r.sha256 else None, md5=r.md5.hex() if r.md5 else None,
            depends=tuple(r.depends), constrains=tuple(r.constrains), record=r,
        )


@dataclass(frozen=True)
class LockedEnv:
    name: str
    platform: str  # platform name in the lock
    subdir: str
    virtual_packages: tuple[str, ...]  # ("__cuda=12.9", ...)
    channels: tuple[str, ...]
    packages: tuple[Locked, ...]
    pypi: tuple[tuple[str, str], ...] = ()  # (name, version)
    # The environment's other locked platforms (name, subdir, virtual packages): a lock written by
    # pixi may hold several; mmstack locks one and reads the first the manifest declares.
    other_platforms: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    # The environment's solve options as locked (`options:`; absent = rattler_lock's defaults).
    options: tuple[tuple[str, str], ...] = ()

    def by_name(self, name: str) -> list[Locked]:
        return [p for p in self.packages if p.name == name]

    def vp(self, name: str) -> str | None:
        for s in self.virtual_packages:
            n, _, v = s.partition("=")
            if n == name:
                return v.split("=")[0]
        return None


# -- pixi.lock ---------------------------------------------------------------------------------


def read_pixi_lock(path: Path, platforms: tuple[Platform, ...] | None = None) -> dict[str, LockedEnv]:
    """Every environment in a pixi.lock, each read for one platform (`read_pixi_lock_platforms`'s first)."""
    return {name: envs[0] for name, envs in read_pixi_lock_platforms(path, platforms).items()}


def read_pixi_lock_platforms(path: Path, platforms: tuple[Platform, ...] | None = None) -> dict[str, tuple[LockedEnv, ...]]:
    """Every environment in a pixi.lock; a file rattler cannot read is a BadInput naming it.

    With the manifest's `platforms`, locked platform names are aligned to the manifest's by
    identity (see `platform_renames`), so a lock in pixi's form (`p1`, `p2`, ...) and one with the
    full names read the same. An environment locked for several platforms (pixi's own locks) is
    read for each of them, the first the manifest declares first; each LockedEnv names the others in
    `other_platforms` (for the policy: a platform the environment lacks is pixi's
    AdditionalPlatformsInLockFile; mmstack locks several only for an environment whose platforms
    all declare `__cuda`, pixi.toml's `gpu`)."""
    path = Path(path)
    try:
        lf = load_pixi_lock(path)
        options = _locked_options(path)
        lock_platforms = {p.name: (str(p.subdir), tuple(p.virtual_packages)) for p in lf.platforms()}
        renames = platform_renames(lock_platforms, platforms) if platforms is not None else {}
        order = {p.name: i for i, p in enumerate(platforms or ())}
        envs: dict[str, tuple[LockedEnv, ...]] = {}
        for name, env in lf.environments():
            plats = env.platforms()
            if not plats:  # `packages: {}`: an environment with nothing to install, valid for pixi
                envs[name] = (LockedEnv(name=name, platform="", subdir="", virtual_packages=(),
                                        channels=tuple(str(getattr(c, "url", c)) for c in env.channels()),
                                        packages=(), options=options.get(name, ())),)
                continue
            # the manifest's order, else by name: rattler lists an environment's platforms in no fixed order
            ranked = sorted(range(len(plats)), key=lambda i: (order.get(renames.get(plats[i].name, plats[i].name), len(order)),
                                                              renames.get(plats[i].name, plats[i].name)))
            envs[name] = tuple(_locked_env(name, env, plats[i], [q for j, q in enumerate(plats) if j != i],
                                           options.get(name, ()), renames) for i in ranked)
        return envs
    except BadInput:
        raise
    except BaseException as exc:  # rattler raises its own types; a malformed file can even panic in pyo3
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"cannot read the lock file: {msg}", source=str(path), fix="run `mmstack lock` to rewrite it") from None


def load_pixi_lock(path: Path):
    """rattler's LockFile of a pixi.lock, its workspace-relative channels and package paths (as
    `mmstack lock` writes them, envs/portable.py) made absolute under the lock's directory first."""
    import tempfile

    from rattler import LockFile

    text = Path(path).read_text()
    absolute = portable.absolute_pixi_lock(text, Path(path).parent)
    if absolute == text:
        return LockFile.from_path(path)
    with tempfile.TemporaryDirectory(prefix="mmstack-lock-") as tmp:
        copy = Path(tmp) / PIXI_LOCK
        copy.write_text(absolute)
        return LockFile.from_path(copy)


def pixi_lock_writer(lf, root: Path) -> Callable[[Path], None]:
    """Writes `lf` as pixi.lock with root's local channels relative to root (envs/portable.py)."""
    def write(p: Path) -> None:
        lf.to_path(p)
        p.write_text(portable.portable_pixi_lock(p.read_text(), root))

    return write


def platform_renames(locked: dict[str, tuple[str, tuple[str, ...]]], platforms: tuple[Platform, ...]) -> dict[str, str]:
    """Locked platform name -> the manifest platform of the same identity (subdir plus customised
    virtual packages), as pixi renames on load (pixi_core lock_file/platform_rename.rs,
    `compute_renames`): only when exactly one manifest platform matches, the locked name is not
    already a manifest name, and the target name is not taken by another locked platform.
    Anything else stays as locked, for the policy to flag."""
    from mmstack.envs.pixi_manifest import platform_identity

    manifest_names = {p.name for p in platforms}
    renames: dict[str, str] = {}
    for name, (subdir, vps) in locked.items():
        if name in manifest_names:
            continue
        ident = platform_identity(subdir, vps)
        hits = [p for p in platforms if p.identity() == ident]
        if len(hits) == 1 and hits[0].name not in locked:
            renames[name] = hits[0].name
    return renames


def _locked_env(name: str, env, p, others, options, renames: dict[str, str]) -> LockedEnv:
    records = env.conda_repodata_records_for_platform(p) or []
    pypi = env.pypi_packages_for_platform(p) or []
    return LockedEnv(
        name=name, platform=renames.get(p.name, p.name), subdir=str(p.subdir), virtual_packages=tuple(p.virtual_packages),
        channels=tuple(str(c.url if hasattr(c, "url") else c) for c in env.channels()),
        # sorted by name, duplicates kept: pixi calls a lock with two records of one name unsatisfiable
        packages=tuple(sorted((Locked.from_record(r) for r in records), key=lambda x: x.name)),
        pypi=tuple((str(getattr(q, "name", q)), str(getattr(q, "version", ""))) for q in pypi),
        other_platforms=tuple((renames.get(o.name, o.name), str(o.subdir), tuple(o.virtual_packages)) for o in others),
        options=options,
    )


def _locked_options(path: Path) -> dict[str, tuple[tuple[str, str], ...]]:
    """`environments.<name>.options` as locked (py-rattler does not expose them)."""
    doc = load_yaml(Path(path).read_text())
    envs = doc.get("environments") if isinstance(doc, dict) else None
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    for name, body in (envs or {}).items():
        opts = body.get("options") if isinstance(body, dict) else None
        if isinstance(opts, dict):
            out[str(name)] = tuple(sorted((str(k), str(v)) for k, v in opts.items()))
    return out


def build_pixi_lock(envs: Mapping[str, tuple[Platform, list[str], list] | list[tuple[Platform, list[str], list]]],
                    aliases: dict[str, str] | None = None):
    """A rattler LockFile: env name -> (platform, channel URLs as pixi resolves pixi.toml's, rattler
    records), or a list of those for an environment solved on several platforms (one channel list).

    As pixi writes it: a platform that is not a bare subdir is named by its alias (`p1`, `p2`, ...
    from `Manifest.lock_aliases`), its virtual packages are the declared ones plus the subdir's
    defaults; readers match it back to pixi.toml by identity."""
    from rattler import LockChannel, LockFile, LockPlatform, Subdir

    aliases = aliases or {}
    solves = {name: (v if isinstance(v, list) else [v]) for name, v in sorted(envs.items())}
    plats: dict[str, LockPlatform] = {}
    for plat in (plat for per_env in solves.values() for plat, _, _ in per_env):
        if plat.name in plats:
            continue
        name = aliases.get(plat.name, plat.name)
        subdir = None if name == plat.subdir else Subdir(plat.subdir)
        plats[plat.name] = LockPlatform(name, subdir=subdir, virtual_packages=plat.lock_strings())
    lf = LockFile(list(plats.values()))
    for name, per_env in solves.items():
        # pixi writes each channel as its base URL with the trailing slash
        # (pixi_core lock_file/update.rs: `channel.into_base_url(..).to_string()`)
        lf.set_channels(name, [LockChannel(c.rstrip("/") + "/") for c in per_env[0][1]])
        for plat, _, records in per_env:
            lp = plats[plat.name]
            for r in sorted(records, key=lambda r: r.name.normalized):
                lf.add_conda_package(name, lp, r)
    return lf


# -- conda-lock v1 -------------------------------------------------------------------------------


def conda_lock_path(root: Path, env: str, platform: str | None = None) -> Path:
    """envs/<env>.conda-lock.yml; with `platform` (an environment locked on several platforms of one
    subdir, which one conda-lock file cannot hold apart) envs/<env>.<platform>.conda-lock.yml."""
    return Path(root) / ENVS_DIR / f"{env}{'.' + platform if platform else ''}.conda-lock.yml"


def vp_spec_path(root: Path, env: str, platform: str | None = None) -> Path:
    return Path(root) / ENVS_DIR / f"{env}{'.' + platform if platform else ''}.virtual-packages.yml"


def env_yml_path(root: Path, env: str, platform: str | None = None) -> Path:
    return Path(root) / ENVS_DIR / f"{env}{'.' + platform if platform else ''}.yml"


def conda_lock_document(*, env: LockedEnv, channels: list[str], sources: list[str], digests: dict[str, str],
                        content_hash: str, root: Path | None = None) -> dict:
    """The conda-lock v1 document for one environment (one platform).

    `channels` and `sources` are what conda-lock itself would write for `conda-lock lock -f
    <env>.yml`: the channels as the environment.yml spells them (`./channel`, `conda-forge`:
    conda-lock compares them literally on every re-lock) and the source files relative to the
    lock (conda-lock parses each when run without `-f`). With `root`, a package of a local
    channel inside it is written relative to it (envs/portable.py): no path of this machine."""
    return {
        "version": 1,
        "metadata": {
            "content_hash": {env.subdir: content_hash},
            "channels": [{"url": c.rstrip("/"), "used_env_vars": []} for c in channels],
            "platforms": [env.subdir],
            "sources": sources,
            # conda's conda-lockfiles plugin detects a conda-lock v1 file by validating it against its
            # model, where custom_metadata, when present, must hold `created_by: str`
            # (conda-incubator/conda-lockfiles conda_lockfiles/conda_lock/v1.py, CondaLockV1CustomMetadata,
            # lines 101-104 at 84344439): without it `conda env create --file` does not take the file
            # as a lock and creates an empty environment.
            "custom_metadata": {"created_by": _created_by(), "mmstack_env": env.name, "mmstack_platform": env.platform,
                                "mmstack_virtual_packages": " ".join(env.virtual_packages), **digests},
        },
        "package": [
            {
                "name": p.name,
                "version": p.version,
                "manager": "conda",
                "platform": env.subdir,
                "dependencies": _dependencies(p.depends),
                "url": portable.relative(p.url, root) if root is not None else p.url,
                "hash": {k: v for k, v in (("md5", p.md5), ("sha256", p.sha256)) if v},
                "category": "main",
                "optional": False,
            }
            for p in sorted(env.packages, key=lambda p: p.name)
        ],
    }


def _created_by() -> str:
    """`mmstack <version>` as installed (conda-lockfiles' own files say `conda-lockfiles <version>`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"mmstack {version('mmstack')}"
    except PackageNotFoundError:  # a source tree that was never installed
        return "mmstack"


def _dependencies(depends) -> dict[str, str]:
    """conda-lock's `dependencies`: name -> version constraint ("" for any); repeated names join with ','."""
    from rattler import MatchSpec
    from rattler.exceptions import InvalidMatchSpecError

    out: dict[str, str] = {}
    for dep in depends:
        try:
            ms = MatchSpec(dep)
            name = ms.name.normalized
            version = "" if ms.version is None else str(ms.version)
        except InvalidMatchSpecError:  # keep what cannot be parsed verbatim rather than dropping it
            name, _, version = dep.partition(" ")
        version = "" if version == "*" else version
        if out.get(name) and version:
            out[name] = f"{out[name]},{version}"
        else:
            out[name] = out.get(name) or version
    return out


# -- conda-lock's content_hash ---------------------------------------------------------------------
#
# conda-lock (conda_lock/content_hash.py, `compute_content_hashes`) hashes, per platform, the
# lock specification it parses from its source files plus the virtual-package repodata it solves
# with: sha256 of `json.dumps({"channels": [...], "specs": [...], "virtual_package_hash": {...}},
# sort_keys=True)`. mmstack computes the same for `conda-lock lock -f envs/<env>.yml -p <subdir>
# --virtual-package-spec envs/<env>.virtual-packages.yml`, the source and the virtual packages
# the environment was solved with, so `conda-lock --check-input-hash` with those arguments finds the
# lock current. tests/data/conda_lock_content_hash.json records conda-lock's own values (the
# command and version in its header) and tests/test_envs_lock.py holds this code to them.

CONDA_LOCK_VP_TIMESTAMP = 1577854800000  # conda_lock.virtual_package.DEFAULT_TIME
_SPEC = re.compile(r"^(?:(?P<chan>[^:\s]+)::)?(?P<name>[A-Za-z0-9_.-]+)(?P<rest>.*)$")


def conda_lock_dependency(spec: str) -> dict:
    """One environment.yml dependency as conda-lock serialises it (`VersionedDependency.model_dump()`
    less the null `markers`), for the spellings `render_env_yml` writes: `name`, `name=ver`,
    `name=ver=build`, `name<op>ver[,...]`, `name ver`, with an optional `channel::` prefix."""
    m = _SPEC.match(spec.strip())
    if not m:
        raise ValueError(f"cannot read the conda spec {spec!r}")
    rest = m["rest"].strip()
    version, build = "", None
    if rest.startswith("==") and "=" not in rest[2:]:
        version = rest[2:]
    elif rest.startswith("=") and not rest.startswith("=="):
        parts = rest[1:].split("=")
        if len(parts) == 1:  # `=1.2` is conda's fuzzy `1.2.*`
            version = parts[0] if parts[0].endswith("*") else parts[0] + ".*"
        elif len(parts) == 2:  # `=1.2=build`: exact version and a build
            version, build = parts
        else:
            raise ValueError(f"cannot read the conda spec {spec!r}")
    elif rest:
        version = re.sub(r"\s+", "", rest)
    return {"build": build, "category": "main", "conda_channel": m["chan"], "extras": [], "hash": None,
            "manager": "conda", "name": m["name"], "version": version}


def conda_lock_virtual_package_spec(subdir: str, virtual_packages: dict[str, str]) -> dict:
    """conda-lock's `--virtual-package-spec` document (`__archspec` is `1 <microarch>`)."""
    pkgs = {n: (f"1 {v}" if n == "__archspec" else str(v)) for n, v in virtual_packages.items()}
    return {"subdirs": {subdir: {"packages": pkgs}}}


def _vp_repodata(subdir: str, vp_spec: dict) -> dict:
    packages = {}
    for name, value in vp_spec["subdirs"][subdir]["packages"].items():
        version, _, build_string = str(value).partition(" ")
        build = f"{build_string}_0" if build_string else "0"  # conda-lock's reinserted build number
        packages[f"{name}-{version}-{build}.tar.bz2"] = {
            "build": build, "build_number": 0, "build_string": build_string, "depends": [], "name": name,
            "noarch": "", "package_type": "virtual_system", "subdir": subdir,
            "timestamp": CONDA_LOCK_VP_TIMESTAMP, "version": version}
    return {"noarch": {"info": {"subdir": "noarch"}, "packages": {}},
            subdir: {"info": {"subdir": subdir}, "packages": packages}}


def conda_lock_content_hash(*, specs: list[str], channels: list[str], subdir: str, virtual_packages: dict[str, str]) -> str:
    """conda-lock's content_hash of an environment.yml with these dependencies and channels (as
    written there) on `subdir`, solved with these virtual packages."""
    deps = sorted((conda_lock_dependency(s) for s in specs), key=lambda d: (d["manager"], d["name"]))
    data = {
        "channels": [json.dumps({"url": c, "used_env_vars": []}, separators=(",", ":")) for c in channels],
        "specs": deps,
        "virtual_package_hash": _vp_repodata(subdir, conda_lock_virtual_package_spec(subdir, virtual_packages)),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CondaLock:
    path: Path
    env: str
    subdir: str
    channels: tuple[str, ...]
    digests: dict[str, str]
    packages: tuple[Locked, ...]


def read_conda_lock(path: Path) -> CondaLock:
    """Parse and validate a conda-lock v1 file; anything malformed is a BadInput naming it."""
    path = Path(path)
    where = str(path)
    try:
        doc = load_yaml(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read the conda-lock file: {str(exc).splitlines()[0]}", source=where,
                       fix="run `mmstack lock` to rewrite it") from None

    def bad(msg: str) -> BadInput:
        return BadInput(msg, source=where, fix="run `mmstack lock` to rewrite it")

    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise bad("not a conda-lock v1 file (`version: 1` missing)")
    meta = doc.get("metadata")
    pkgs = doc.get("package")
    if not isinstance(meta, dict) or not isinstance(pkgs, list):
        raise bad("needs `metadata` and a `package` list")
    for key in ("content_hash", "channels", "platforms", "sources"):
        if key not in meta:
            raise bad(f"metadata.{key} missing")
    platforms = meta["platforms"]
    if not isinstance(platforms, list) or len(platforms) != 1:
        raise bad("metadata.platforms must name one platform")
    custom = meta.get("custom_metadata") or {}
    out: list[Locked] = []
    for i, p in enumerate(pkgs):
        if not isinstance(p, dict):
            raise bad(f"package[{i}] is not a mapping")
        for key in ("name", "version", "manager", "platform", "url", "hash"):
            if key not in p:
                raise bad(f"package[{i}].{key} missing")
        if p["manager"] != "conda":
            continue
        h = p["hash"] if isinstance(p["hash"], dict) else {}
        url = portable.absolute(str(p["url"]), path.parent.parent, url=True)  # relative: to the workspace root
        file_name = url.rsplit("/", 1)[-1]
        out.append(Locked(
            name=str(p["name"]), version=str(p["version"]), build=_build_from_file(file_name, p),
            subdir=str(p["platform"]), url=url, file_name=file_name,
            sha256=h.get("sha256"), md5=h.get("md5"),
        ))
    channels = tuple(str(c.get("url") if isinstance(c, dict) else c) for c in meta["channels"])
    return CondaLock(path=path, env=str(custom.get("mmstack_env", "")), subdir=str(platforms[0]),
                     channels=channels, digests={k: str(custom[k]) for k in DIGEST_KEYS if k in custom},
                     packages=tuple(out))


def _build_from_file(file_name: str, p: dict) -> str:
    """conda-lock v1 has no `build` for conda packages; the file name `name-version-build.conda` has it."""
    stem = file_name[:-6] if file_name.endswith(".conda") else file_name.removesuffix(".tar.bz2")
    head = f"{p['name']}-{p['version']}-"
    return stem[len(head):] if stem.startswith(head) else stem.rsplit("-", 1)[-1]


def load_yaml(text: str):
    """Safe-load YAML: libyaml through PyYAML when present (a conda-lock file of a CUDA environment
    has thousands of lines; pure-Python parsing takes ~0.3 s each), else ruamel.yaml. Parse errors
    are ValueErrors."""
    try:
        import yaml

        loader = yaml.CSafeLoader
    except (ImportError, AttributeError):
        loader = None
    if loader is not None:
        try:
            return yaml.load(text, Loader=loader)
        except yaml.YAMLError as exc:
            raise ValueError(str(exc)) from None
    from ruamel.yaml import YAML, YAMLError

    try:
        return YAML(typ="safe", pure=True).load(text)
    except YAMLError as exc:
        raise ValueError(str(exc)) from None


def dump_yaml(doc) -> str:
    """Block-style YAML in the dict's key order (conda-lock's layout).

    A small emitter, not a YAML library: it writes plain-dict/list/str/int/bool trees only, keys
    that are plain words, and every string double-quoted with JSON escapes (valid YAML, never
    re-typed by a reader as a number, date or bool). A library dumper takes ~0.15 s per CUDA
    environment; this takes milliseconds.
    """
    out: list[str] = []
    _emit(doc, 0, out)
    return "\n".join(out) + "\n"


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if v is None:
        return "null"
    return json.dumps(str(v), ensure_ascii=False)


def _key(k) -> str:
    k = str(k)
    return k if _PLAIN_KEY.match(k) and k.lower() not in ("true", "false", "null", "yes", "no", "on", "off") else json.dumps(k)


def _emit(node, indent: int, out: list[str]) -> None:
    pad = " " * indent
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{_key(k)}:")
                _emit(v, indent + 2 if isinstance(v, dict) else indent, out)
            else:
                out.append(f"{pad}{_key(k)}: {('{}' if isinstance(v, dict) else '[]') if isinstance(v, (dict, list)) else _scalar(v)}")
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, dict) and item:
                sub: list[str] = []
                _emit(item, indent + 2, sub)
                sub[0] = f"{pad}- " + sub[0][indent + 2:]
                out.extend(sub)
            elif isinstance(item, list) and item:
                raise TypeError("nested lists are not emitted")
            else:
                out.append(f"{pad}- {_scalar(item) if not isinstance(item, (dict, list)) else '{}'}")
    else:
        out.append(f"{pad}{_scalar(node)}")


# -- atomic writes -------------------------------------------------------------------------------


def write_atomically(files: dict[Path, Callable[[Path], None]]) -> None:
    """Write every file through `writer(tmp_path)`, then rename all into place; on any error none move."""
    staged: list[tuple[Path, Path]] = []
    try:
        for target, writer in files.items():
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = _new_temp(target)
            staged.append((tmp, target))
            writer(tmp)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, target in staged:
        os.replace(tmp, target)


def _new_temp(target: Path) -> Path:
    """An empty new file beside `target`, mode 0666 less the umask (as any file a user writes; not
    mkstemp's 0600, which the rename would carry over to the lockfile)."""
    for _ in range(100):
        tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def text_writer(text: str) -> Callable[[Path], None]:
    def write(p: Path) -> None:
        p.write_text(text)

    return write
