"""A local conda channel: add packages, index it, install from it (py-rattler).

Indexing is atomic and serialized. Packages are hard-linked into a shadow copy of the channel
(`.index-<pid>/`), py-rattler indexes the shadow, and only then are the new repodata files renamed
over the live ones; a lock file (`.mmstack.lock`, fcntl) keeps two builds that share a channel from
interleaving. A reader therefore sees the old index or the new one, never half of either.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from mmstack.builder.receipt import path_for as receipt_path
from mmstack.errors import BadInput, BuildFailed, rattler_errors

SUBDIRS = ("linux-64", "noarch")  # what mmstack builds; other subdirs are indexed if present
LOCK_FILE = ".mmstack.lock"
SHADOW_PREFIX = ".index-"  # + pid: the shadow copy an index is built in
_SHADOW = re.compile(re.escape(SHADOW_PREFIX) + r"(\d+)")
_PARTIAL = re.compile(r"\..+\.partial-(\d+)")  # a package add_packages moves in under a temporary name
_PACKAGE_SUFFIXES = (".conda", ".tar.bz2")
Progress = Callable[[str, int, int], None]  # (what runs, packages done, packages in all)
_SUBDIR = re.compile(r"noarch|(linux|osx|win|emscripten|wasi|zos)-[a-z0-9_]+")


def ensure_channel(path: str | os.PathLike[str], *, create: bool = False) -> Path:
    """Return `path` if it is a conda channel (a `noarch/` subdir at least); else BadInput.

    With `create`, a missing or empty directory becomes an empty channel.
    """
    path = Path(path).expanduser().resolve()
    if create and (not path.exists() or (path.is_dir() and not any(path.iterdir()))):
        for sub in SUBDIRS:
            (path / sub).mkdir(parents=True, exist_ok=True)
        index_channel(path)
        return path
    if not path.is_dir():
        raise BadInput(f"{path} is not a directory", source=str(path),
                       fix="pass an existing channel directory, or a new path to create one")
    if not (path / "noarch").is_dir():
        raise BadInput(
            f"{path} is not a conda channel: no noarch/ subdirectory",
            source=str(path),
            fix=f"point at a channel (a directory with noarch/ and linux-64/), or run `mmstack channel index {path}` "
                "on a directory of subdirs holding packages",
        )
    return path


def index_channel(path: str | os.PathLike[str], *, on_progress: Progress | None = None) -> Path:
    """(Re)write repodata.json for every subdir of the channel at `path`, atomically.

    `on_progress(label, done, total)`: after each package read ("reading <subdir>", packages read,
    packages in all), then once before rattler writes the repodata ("writing repodata")."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise BadInput(f"{path} is not a directory", source=str(path), fix="create it or pass a channel")
    (path / "noarch").mkdir(exist_ok=True)  # a channel always has noarch/, even if empty
    with _locked(path):
        _index_locked(path, on_progress=on_progress)
    return path


def add_packages(channel: str | os.PathLike[str], packages: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Move built packages into `channel/<subdir>/` and re-index, under the channel's lock.

    The packages land under temporary names and are renamed into place only once all of them are
    there, immediately before the index that lists them is swapped in.
    """
    root = ensure_channel(channel, create=True)
    pkgs = [Path(p) for p in packages]
    with _locked(root):
        staged: list[tuple[Path, Path]] = []
        try:
            for pkg in pkgs:
                subdir = _subdir_of(pkg)
                dest = root / subdir / pkg.name
                dest.parent.mkdir(exist_ok=True)
                tmp = dest.with_name(f".{pkg.name}.partial-{os.getpid()}")
                shutil.move(os.fspath(pkg), tmp)  # a copy when crossing filesystems
                tmp.chmod(0o666 & ~_umask())  # rattler-build writes 0600; honour the umask like any file a user writes
                staged.append((tmp, dest))
        except BaseException:
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)
            raise
        for tmp, dest in staged:
            os.replace(tmp, dest)
            receipt_path(dest).unlink(missing_ok=True)  # it was the replaced file's evidence, not this one's
        _index_locked(root, replaced=[dest.name for _, dest in staged])
    return [dest for _, dest in staged]


def install(
    specs: Sequence[str],
    channels: Sequence[str | os.PathLike[str]],
    prefix: str | os.PathLike[str],
    *,
    platform: str | None = None,
    virtual_packages: Sequence[str] | None = None,
) -> list[str]:
    """Solve `specs` over `channels` and install the result into `prefix`; return `name=version=build`.

    `channels` are paths (local channels) or URLs/names. `virtual_packages` replaces the detected
    ones (e.g. `["__glibc=2.28", "__cuda=12.9"]`) to solve for another machine; the detected ones
    honour CONDA_OVERRIDE_CUDA / CONDA_OVERRIDE_CUDA_ARCH (and the other CONDA_OVERRIDE_*) as conda
    and pixi do.
    """
    import rattler

    chans = [_channel(c) for c in channels]
    if virtual_packages is None:
        virtual = detected_virtual_packages()
    else:
        virtual = [_virtual(v) for v in virtual_packages]

    async def _run() -> list:
        platforms = [rattler.Subdir(platform) if platform else rattler.Subdir.current(), rattler.Subdir("noarch")]
        records = await rattler.solve(sources=chans, specs=list(specs), platforms=platforms,
                                      virtual_packages=virtual)
        await rattler.install(records, target_prefix=os.fspath(prefix), show_progress=False)
        return records

    try:
        records = asyncio.run(_run())
    except rattler_errors() as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BuildFailed(f"cannot install {' '.join(specs)} from {', '.join(map(str, channels))}: {first}",
                          fix="check the channel holds the package and its dependencies") from None
    return [f"{r.name.normalized}={r.version}={r.build}" for r in records]


def explain_unsolvable(specs: Sequence[str], channels: Sequence[str | os.PathLike[str]], *,
                       platform: str | None = None) -> str | None:
    """Why `specs` cannot be solved over `channels`, as the solver says it (e.g. "No candidates
    were found for python 3.11.*"); None when they solve, or the question cannot be asked.

    rattler-build reports only "Failed to resolve dependencies" (its log ends on an info line about
    an empty subdir), so a failed build asks the same question again here.
    """
    import rattler

    async def _run() -> None:
        platforms = [rattler.Subdir(platform) if platform else rattler.Subdir.current(), rattler.Subdir("noarch")]
        await rattler.solve(sources=[_channel(c) for c in channels], specs=list(specs), platforms=platforms,
                            virtual_packages=detected_virtual_packages())

    try:
        asyncio.run(_run())
    except rattler_errors() as exc:
        text = " ".join(str(exc).split())
        return text.removeprefix("SolverError: ").strip() or type(exc).__name__
    except Exception:  # noqa: BLE001 - an unreachable channel, a bad spec: no explanation, not a new error
        return None
    return None


def missing_specs(specs: Sequence[str], channels: Sequence[str | os.PathLike[str]], platform: str) -> list[str] | None:
    """The specs no record of `channels` matches in `platform` or noarch (each looked up alone, as
    the solver would look it up); None when the channels cannot be read."""
    import rattler

    async def _run() -> list[str]:
        wanted = [rattler.MatchSpec(s) for s in specs]
        found = await rattler.Gateway().query([_channel(c) for c in channels],
                                              [rattler.Subdir(platform), rattler.Subdir("noarch")], wanted,
                                              recursive=False)
        records = [r for group in found for r in group]
        return [s for s, m in zip(specs, wanted, strict=True) if not any(m.matches(r) for r in records)]

    try:
        return asyncio.run(_run())
    except Exception:  # noqa: BLE001 - an unreachable channel, a bad spec: no answer, not a new error
        return None


# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(channel: Path) -> Iterator[None]:
    with open(channel / LOCK_FILE, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _index_locked(channel: Path, *, replaced: Iterable[str] | None = None, on_progress: Progress | None = None) -> None:
    """Index a shadow of the channel, then rename its repodata over the live files.

    With `replaced` (the file names add_packages just wrote), indexing is incremental: the live
    repodata seeds the shadow minus those names, so only new packages are read. Without it every
    package is read again (`mmstack channel index`).
    """
    from rattler.index import index_fs

    shadow = channel / f"{SHADOW_PREFIX}{os.getpid()}"
    clear_stale(channel)
    try:
        subdirs = [d for d in sorted(channel.iterdir())
                   if d.is_dir() and not d.name.startswith(".") and (d.name in SUBDIRS or _has_packages(d))]
        _require_regular(channel, subdirs)
        to_read = []
        for sub in subdirs:
            (shadow / sub.name).mkdir(parents=True)
            for pkg in sorted(sub.iterdir()):
                if pkg.name.endswith(_PACKAGE_SUFFIXES) and not pkg.name.startswith("."):
                    _link(pkg, shadow / sub.name / pkg.name)
                    if replaced is None or pkg.name in replaced:
                        to_read.append(pkg)
            if replaced is not None:
                _seed(sub / "repodata.json", shadow / sub.name / "repodata.json", drop=set(replaced))
        _require_readable(channel, to_read, on_progress)
        if on_progress is not None:
            on_progress("writing repodata", len(to_read), len(to_read))
        try:
            asyncio.run(index_fs(shadow, write_zst=False, write_shards=False, force=replaced is None))
        except rattler_errors() as exc:  # a package the check above could read but the indexer cannot
            raise BadInput(f"cannot index: {_first_line(exc)}", source=str(channel),
                           fix="remove or rebuild the package it names; the index was left as it was") from None
        for sub in subdirs:
            for produced in (shadow / sub.name).iterdir():
                if produced.is_file() and not produced.name.endswith(_PACKAGE_SUFFIXES):
                    os.replace(produced, sub / produced.name)
    finally:
        try:
            shutil.rmtree(shadow, ignore_errors=True)
        finally:  # again, should a signal have cut the first one short (the CLI raises only the first)
            shutil.rmtree(shadow, ignore_errors=True)


def clear_stale(channel: Path) -> list[str]:
    """Remove what an index or an add killed mid-way left (SIGKILL, a power cut): `.index-<pid>/`
    shadows and `.<package>.partial-<pid>` files whose process is gone. Called under the channel's
    lock, so no live indexer of this channel owns them; a live pid's are left alone all the same."""
    removed = []
    for entry in channel.iterdir():
        m = _SHADOW.fullmatch(entry.name)
        if m and entry.is_dir() and not entry.is_symlink() and not _pid_alive(int(m.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
        elif entry.is_dir() and not entry.name.startswith("."):
            for part in entry.glob(".*.partial-*"):
                pm = _PARTIAL.fullmatch(part.name)
                if pm and not _pid_alive(int(pm.group(1))):
                    part.unlink(missing_ok=True)
                    removed.append(f"{entry.name}/{part.name}")
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # ours from an earlier index in this process: done with
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _require_regular(channel: Path, subdirs: list[Path]) -> None:
    """Every package file is a regular file (or a link to one): a FIFO would hang the reader, a
    device would be read without end. BadInput naming them, before anything is read."""
    odd = []
    for sub in subdirs:
        for pkg in sub.iterdir():
            if not pkg.name.endswith(_PACKAGE_SUFFIXES) or pkg.name.startswith("."):
                continue
            try:
                mode = pkg.stat().st_mode
            except OSError as exc:
                odd.append(f"{pkg.relative_to(channel)} ({exc.strerror or exc})")
                continue
            if not stat.S_ISREG(mode):
                odd.append(f"{pkg.relative_to(channel)} ({_special_kind(mode)}, not a regular file)")
    if odd:
        raise BadInput(f"{len(odd)} package name(s) are not package files: {'; '.join(sorted(odd)[:5])}"
                       + (" ..." if len(odd) > 5 else ""), source=str(channel),
                       fix="remove them (a package is a regular .conda or .tar.bz2 file); the index was left as it was")


def _special_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def _require_readable(channel: Path, packages: list[Path], on_progress: Progress | None = None) -> None:
    """Every package's index.json reads (rattler's indexer panics on a corrupt archive, naming no
    file); BadInput naming each one that does not, before anything is written."""
    from rattler.package import IndexJson

    bad = []
    for i, pkg in enumerate(packages, 1):
        try:
            IndexJson.from_package_archive(pkg)
        except rattler_errors() as exc:
            bad.append(f"{pkg.relative_to(channel)} ({_first_line(exc)})")
        if on_progress is not None:
            on_progress(f"reading {pkg.parent.name}", i, len(packages))
    if bad:
        raise BadInput(f"{len(bad)} package(s) cannot be read: {'; '.join(bad[:5])}" + (" ..." if len(bad) > 5 else ""),
                       source=str(channel), fix="remove or rebuild them, then index again; the index was left as it was")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _seed(live: Path, dest: Path, *, drop: set[str]) -> None:
    if not live.is_file():
        return
    try:
        data = json.loads(live.read_text())
    except ValueError:  # unreadable: a full index of this subdir follows
        return
    for key in ("packages", "packages.conda"):
        for name in drop & set(data.get(key, {})):
            del data[key][name]
    dest.write_text(json.dumps(data))


def _link(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except OSError:  # another filesystem, or no hard links: a copy is slower but equivalent
        shutil.copy2(src, dest)


def _has_packages(d: Path) -> bool:
    return any(p.name.endswith(_PACKAGE_SUFFIXES) for p in d.iterdir())


def _subdir_of(pkg: Path) -> str:
    """The subdir a package belongs in: the build's output subdirectory, else its index.json."""
    if _SUBDIR.fullmatch(pkg.parent.name):
        return pkg.parent.name
    from rattler_build import Package

    subdir = Package.from_file(pkg).subdir
    if not subdir:
        raise BuildFailed(f"{pkg} has no subdir in its index.json", fix="rebuild the package")
    return subdir


def _channel(c: str | os.PathLike[str]):
    import rattler

    text = os.fspath(c)
    if "://" not in text and (os.sep in text or Path(text).exists()):
        text = Path(text).expanduser().resolve().as_uri()
    return rattler.Channel(text)


def detected_virtual_packages() -> list:
    """This machine's virtual packages as conda and pixi see them: detected (`__cuda` from the
    driver, `__cuda_arch` from the GPUs), each replaced by its CONDA_OVERRIDE_* where one is set (an
    empty one removes it; `__cuda_arch` goes with `__cuda`, CEP 46)."""
    import rattler

    return rattler.VirtualPackage.detect(rattler.VirtualPackageOverrides.from_env())


def _virtual(spec: str):
    import rattler

    name, _, rest = spec.partition("=")
    version, _, build = rest.partition("=")
    return rattler.GenericVirtualPackage(rattler.PackageName(name), rattler.Version(version or "0"),
                                         rattler.BuildString(build or "0"))


def _umask() -> int:
    """The process umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
