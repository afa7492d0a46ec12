"""STAND-IN BUILDER (development and CI only): the repository's recipes, made buildable without reaching their source URLs.

`offline_recipe(...)` copies a recipe directory (recipe.yaml, build.sh, patches) and points its
`source.url` at a local copy of the same file. The sha256 line is left alone, so rattler-build
still verifies that the local file is byte-for-byte the one the recipe names.
"""

from __future__ import annotations

import os
import shutil
import urllib.request
from pathlib import Path

from mmstack_lab.paths import ROOT
from mmstack_lab.standin.bootstrap import CACHE_ROOT

MMCV_SDIST_URL = ("https://files.pythonhosted.org/packages/e9/a2/57a733e7e84985a8a0e3101dfb8170fc9db92435c16afad253069ae3f9df/"
                  "mmcv-2.2.0.tar.gz")
MMCV_SDIST_SHA256 = "ac479247e808d8802f89eadf04d4118de86bdfe81361ec5aed0cc1bf731c67c9"
MMDET_SDIST_URL = ("https://files.pythonhosted.org/packages/5a/9e/c897d2fe3c3aa40fd83ea04c6103412cf0bd4db4bb20db4248f5c09673e7/"
                   "mmdet-3.3.0.tar.gz")
MMDET_SDIST_SHA256 = "fe8cc2685d60a2a4f2530a4e92aa6269fe45af93265303a31bf4ea463eb3164f"
MMENGINE_SDIST_URL = ("https://files.pythonhosted.org/packages/17/14/959360bbd8374e23fc1b720906999add16a3ac071a501636db12c5861ff5/"
                      "mmengine-0.10.7.tar.gz")
MMENGINE_SDIST_SHA256 = "d20ffcc31127567e53dceff132612a87f0081de06cbb7ab2bdb7439125a69225"
# name -> (url, sha256, version): the sources the recipes name, byte for byte.
SDISTS = {
    "mmcv": (MMCV_SDIST_URL, MMCV_SDIST_SHA256, "2.2.0"),
    "mmdet": (MMDET_SDIST_URL, MMDET_SDIST_SHA256, "3.3.0"),
    "mmengine": (MMENGINE_SDIST_URL, MMENGINE_SDIST_SHA256, "0.10.7"),
}
# Copies that may already be on the machine (the dev image has one); else PyPI, once.
LOCAL_COPIES = (Path("/tmp/cache"),)
# upstream's v2.2.0 GitHub tag archive (it carries tests/, the PyPI sdist does not): the mmcv
# recipe's second source (`target_directory: upstream`), byte for byte the file conda-forge's
# feedstock names. Its URL and sha256 are read from recipes/mmcv/recipe.yaml. Where it comes from,
# in order: the test cache; MMSTACK_SHARED_SOURCES or ../shared/sources (a folder holding the file,
# for machines that cannot reach GitHub: CI and the development machines here); the recipe's URL.
MMCV_RECIPE = ROOT / "recipes" / "mmcv" / "recipe.yaml"
MMCV_GITHUB_FILE = "mmcv-2.2.0.github.tar.gz"
# Upstream sources committed for tests (tests/data/sources/README.md says where each comes from):
# mmengine's v0.10.7 tag archive byte for byte (its recipe's second source, 1.4 MB), and for mmdet
# a STAND-IN: tests/ of the commit its recipe's git source names, as a subset archive (the whole
# tag archive could not be had byte for byte, and would be 12 MB and more).
SOURCES_DIR = ROOT / "tests" / "data" / "sources"
MMENGINE_GITHUB_FILE = "mmengine-0.10.7.github.tar.gz"
MMDET_TESTS_STAND_IN = SOURCES_DIR / "mmdetection-3.3.0-tests.STAND-IN.tar.gz"
MMDET_TESTS_STAND_IN_SHA256 = "2504e394e673716cff5c56c57966ba44d6093b8802387b3f65d432709776c495"


class SourceUnavailable(RuntimeError):
    """A recipe's source could be found nowhere; the message is one line naming the fix."""


def recipe_source(recipe: Path, target_directory: str | None) -> tuple[str, str]:
    """(url, sha256) of the source in a recipe.yaml with that target_directory, the version filled in."""
    import yaml

    data = yaml.safe_load(recipe.read_text())
    version = str(data["context"]["version"])
    hits = [s for s in data["source"] if s.get("target_directory") == target_directory]
    if len(hits) != 1:
        raise AssertionError(f"{recipe}: expected one source with target_directory {target_directory!r}")
    return hits[0]["url"].replace("${{ version }}", version), hits[0]["sha256"]


MMCV_GITHUB_URL, MMCV_GITHUB_SHA256 = recipe_source(MMCV_RECIPE, "upstream")


def shared_sources() -> tuple[Path, ...]:
    """Folders that may hold source archives: MMSTACK_SHARED_SOURCES, then shared/sources beside
    the clone (../shared/sources) or inside it, then the ones committed under tests/data/sources."""
    env = os.environ.get("MMSTACK_SHARED_SOURCES", "")
    return (*((Path(env),) if env else ()), ROOT.parent / "shared" / "sources", ROOT / "shared" / "sources",
            SOURCES_DIR)


def fetch_checked(url: str, sha256: str, dest: Path, *, timeout: float = 120) -> Path:
    """Download url to dest, checking its sha256; nothing is left at dest unless it matches.
    Raises SourceUnavailable (one line) when the URL cannot be read or gives other bytes."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(partial, "wb") as fh:
            shutil.copyfileobj(resp, fh)
        got = _sha256(partial)
        if got != sha256:
            raise SourceUnavailable(f"{url} gave a file with sha256 {got}, not the recipe's {sha256}")
        partial.replace(dest)
    except OSError as exc:  # URLError, HTTPError, timeouts, refused connections
        raise SourceUnavailable(f"cannot download {url}: {getattr(exc, 'reason', exc)}") from None
    finally:
        partial.unlink(missing_ok=True)
    return dest


def cached_sdist(name: str = "mmcv", *, cache_root: Path = CACHE_ROOT) -> Path:
    """A recipe's sdist, checked against its sha256, from a local copy or downloaded once; where
    neither works the test fails with one line naming the file to fetch."""
    url, sha256, _ = SDISTS[name]
    cached = cache_root / "sdist" / Path(url).name
    for path in (cached, *(d / Path(url).name for d in LOCAL_COPIES)):
        if path.is_file() and _sha256(path) == sha256:
            return path
    try:
        return fetch_checked(url, sha256, cached)
    except SourceUnavailable as exc:
        reason = str(exc)
    import pytest  # outside the except: pytest would print the chained exception too

    pytest.fail(f"{reason}; download it (sha256 {sha256}) on a machine that can and save it as {cached}", pytrace=False)


def obtain_github_archive(*, cache_root: Path = CACHE_ROOT, shared: tuple[Path, ...] | None = None,
                          url: str = MMCV_GITHUB_URL, sha256: str = MMCV_GITHUB_SHA256,
                          file: str = MMCV_GITHUB_FILE, name: str = "mmcv") -> Path:
    """upstream's tag archive (`file`, mmcv's unless told) in the test cache: already there, copied
    from a shared folder, or downloaded from the recipe's URL, sha256 checked each time. Raises
    SourceUnavailable naming where to put which file when none of these works."""
    cached = cache_root / "sdist" / file
    if cached.is_file() and _sha256(cached) == sha256:
        return cached
    folders = shared_sources() if shared is None else shared
    for folder in folders:
        path = folder / file
        if path.is_file() and _sha256(path) == sha256:
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_name(f"{cached.name}.partial-{os.getpid()}")
            shutil.copyfile(path, partial)
            partial.replace(cached)
            return cached
    try:
        return fetch_checked(url, sha256, cached)
    except SourceUnavailable as exc:
        where = " or ".join(str(d / file) for d in folders) or str(cached)
        raise SourceUnavailable(
            f"{name}'s tag archive is missing: {exc}; download {url} (sha256 {sha256}) on a machine that "
            f"can and save it as {where} (MMSTACK_SHARED_SOURCES names another folder)") from None


def cached_github_archive(*, cache_root: Path = CACHE_ROOT, name: str = "mmcv") -> Path:
    """obtain_github_archive (mmcv's, or mmengine's) for a test: where it cannot be had, the test
    fails with that one line (no traceback), so the fix is what the run prints."""
    try:
        if name == "mmcv":
            return obtain_github_archive(cache_root=cache_root)
        url, sha256 = recipe_source(MMCV_RECIPE.parents[1] / name / "recipe.yaml", "upstream")
        return obtain_github_archive(cache_root=cache_root, url=url, sha256=sha256, file=MMENGINE_GITHUB_FILE,
                                     name=name)
    except SourceUnavailable as exc:
        reason = str(exc)
    import pytest  # outside the except: pytest would print the chained exception too

    pytest.fail(reason, pytrace=False)


def unpacked_sdist(name: str, dest: Path) -> Path:
    """The recipe's sdist unpacked under dest, unpatched; returns its source root."""
    import tarfile

    with tarfile.open(cached_sdist(name)) as tf:
        tf.extractall(dest, filter="data")
    (src,) = [p for p in dest.iterdir() if p.is_dir()]
    return src


def patched_sdist(name: str, dest: Path, extra: tuple[Path, ...] = (), without: tuple[str, ...] = ()) -> Path:
    """The recipe's sdist unpacked under dest with recipes/<name>/patches applied in order (`patch
    -p1 --fuzz=0`, as the recipes do), but for those whose names start with one of `without`, then
    `extra` patches (candidates); returns its source root."""
    import subprocess

    src = unpacked_sdist(name, dest)
    patches = ROOT / "recipes" / name / "patches"
    for p in [*(p for p in sorted(patches.glob("0*.patch")) if not p.name.startswith(without)), *extra]:
        subprocess.run(["patch", "-p1", "-s", "--fuzz=0", "-i", str(p)], cwd=src, check=True)
    return src


def offline_recipe_for(name: str, recipe_dir: Path, dest: Path) -> Path:
    """`offline_recipe` for one of SDISTS, fetching the sdist first if need be; the second source
    (upstream's tests) from a local copy: mmcv's and mmengine's tag archives byte for byte (sha256
    unchanged), mmdet's git commit replaced by the committed STAND-IN subset archive of its tests/."""
    url, _, version = SDISTS[name]
    out = offline_recipe(recipe_dir, dest, url=url, local_file=cached_sdist(name), version=version)
    if name == "mmcv":
        _point_url(out / "recipe.yaml", MMCV_GITHUB_URL, cached_github_archive(), version)
    elif name == "mmengine":
        github_url, _ = recipe_source(out / "recipe.yaml", "upstream")
        _point_url(out / "recipe.yaml", github_url, cached_github_archive(name="mmengine"), version)
    elif name == "mmdet":
        stand_in_git_source(out / "recipe.yaml", MMDET_TESTS_STAND_IN, MMDET_TESTS_STAND_IN_SHA256)
    return out


def stand_in_git_source(recipe: Path, archive: Path, sha256: str) -> None:
    """Replace the recipe's one `git:` source (URL and `rev:` line) with `archive` (file:// URL, its
    sha256), marked STAND-IN in the copy: offline, a subset of that commit stands in for the clone."""
    lines = recipe.read_text().splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if line.lstrip().startswith("- git: ")]
    if len(at) != 1 or not lines[at[0] + 1].lstrip().startswith("rev: "):
        raise AssertionError(f"{recipe}: expected one `- git:` source followed by its `rev:`")
    i = at[0]
    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
    rev = lines[i + 1].split("rev:", 1)[1].strip()
    lines[i:i + 2] = [
        f"{indent}# STAND-IN (mmstack_lab.standin.offline): not a clone of {lines[i].split('git:', 1)[1].strip()} at\n",
        f"{indent}# {rev} but a subset archive of that commit's tests/ (tests/data/sources/README.md)\n",
        f"{indent}- url: {archive.resolve().as_uri()}\n",
        f"{indent}  sha256: {sha256}\n",
    ]
    recipe.write_text("".join(lines))


def offline_recipe(recipe_dir: Path, dest: Path, *, url: str, local_file: Path, version: str = "2.2.0") -> Path:
    """Copy `recipe_dir` to `dest` with `url` in recipe.yaml replaced by `local_file`'s file:// URL."""
    shutil.copytree(recipe_dir, dest, ignore=shutil.ignore_patterns("output", "__pycache__"))
    _point_url(dest / "recipe.yaml", url, local_file, version)
    return dest


def _point_url(recipe: Path, url: str, local_file: Path, version: str) -> None:
    text = recipe.read_text()
    templated = url.replace(version, "${{ version }}")
    hits = [u for u in (url, templated) if f"url: {u}\n" in text]
    if len(hits) != 1:
        raise AssertionError(f"{recipe}: expected `url: {templated}` once")
    recipe.write_text(text.replace(f"url: {hits[0]}\n", f"url: {local_file.resolve().as_uri()}\n"))


def _sha256(path: Path) -> str:
    from mmstack.builder.recipe_gate import sha256_file

    return sha256_file(path)
