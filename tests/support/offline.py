"""TEST SUPPORT ONLY: the repository's recipes, made buildable without reaching their source URLs.

`offline_recipe(...)` copies a recipe directory (recipe.yaml, build.sh, patches) and points its
`source.url` at a local copy of the same file. The sha256 line is left alone, so rattler-build
still verifies that the local file is byte-for-byte the one the recipe names.
"""

from __future__ import annotations

import os
import shutil
import urllib.request
from pathlib import Path

from .bootstrap import CACHE_ROOT

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
# upstream's v2.2.0 GitHub tag archive (it carries tests/, the PyPI sdist does not): the recipe's
# second source, byte for byte the file conda-forge's feedstock names. GitHub is unreachable from
# CI and the development machines; ../shared/sources holds the same bytes (its README says how
# they were made), and MMSTACK_SHARED_SOURCES names another folder holding them.
MMCV_GITHUB_URL = "https://github.com/open-mmlab/mmcv/archive/refs/tags/v2.2.0.tar.gz"
MMCV_GITHUB_SHA256 = "13b2bdab6e97799177dee568efdb2ae0bb48b1dc924a8b617416ee8a392e5348"
MMCV_GITHUB_FILE = "mmcv-2.2.0.github.tar.gz"
SHARED_SOURCES = (
    *(Path(p) for p in (os.environ.get("MMSTACK_SHARED_SOURCES", ""),) if p),
    Path(__file__).resolve().parents[3] / "shared" / "sources",
    Path(__file__).resolve().parents[2] / "shared" / "sources",
)


def cached_sdist(name: str = "mmcv", *, cache_root: Path = CACHE_ROOT) -> Path:
    """A recipe's sdist, checked against its sha256, from a local copy or downloaded once."""
    url, sha256, _ = SDISTS[name]
    cached = cache_root / "sdist" / Path(url).name
    for path in (cached, *(d / Path(url).name for d in LOCAL_COPIES)):
        if path.is_file() and _sha256(path) == sha256:
            return path
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".partial")
    with urllib.request.urlopen(url, timeout=120) as resp, open(partial, "wb") as fh:
        shutil.copyfileobj(resp, fh)
    if _sha256(partial) != sha256:
        partial.unlink()
        raise RuntimeError(f"{url} does not have the sha256 the recipe names")
    partial.rename(cached)
    return cached


def cached_github_archive(*, cache_root: Path = CACHE_ROOT) -> Path:
    """upstream's v2.2.0 tag archive, seeded into the offline cache from a shared copy (sha256 checked)."""
    cached = cache_root / "sdist" / MMCV_GITHUB_FILE
    if cached.is_file() and _sha256(cached) == MMCV_GITHUB_SHA256:
        return cached
    for folder in SHARED_SOURCES:
        path = folder / MMCV_GITHUB_FILE
        if path.is_file() and _sha256(path) == MMCV_GITHUB_SHA256:
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(".partial")
            shutil.copyfile(path, partial)
            partial.rename(cached)
            return cached
    raise FileNotFoundError(f"{MMCV_GITHUB_FILE} (sha256 {MMCV_GITHUB_SHA256[:12]}...) is in none of "
                            f"{[str(d) for d in SHARED_SOURCES]}; set MMSTACK_SHARED_SOURCES to a folder holding it")


def unpacked_sdist(name: str, dest: Path) -> Path:
    """The recipe's sdist unpacked under dest, unpatched; returns its source root."""
    import tarfile

    with tarfile.open(cached_sdist(name)) as tf:
        tf.extractall(dest, filter="data")
    (src,) = [p for p in dest.iterdir() if p.is_dir()]
    return src


def patched_sdist(name: str, dest: Path, extra: tuple[Path, ...] = ()) -> Path:
    """The recipe's sdist unpacked under dest with recipes/<name>/patches applied in order (`patch
    -p1 --fuzz=0`, as the recipes do), then `extra` patches (candidates); returns its source root."""
    import subprocess

    src = unpacked_sdist(name, dest)
    patches = Path(__file__).resolve().parents[2] / "recipes" / name / "patches"
    for p in [*sorted(patches.glob("0*.patch")), *extra]:
        subprocess.run(["patch", "-p1", "-s", "--fuzz=0", "-i", str(p)], cwd=src, check=True)
    return src


def offline_recipe_for(name: str, recipe_dir: Path, dest: Path) -> Path:
    """`offline_recipe` for one of SDISTS, fetching the sdist first if need be; the mmcv recipe's
    second source (upstream's tag archive, for its tests) from the shared copy."""
    url, _, version = SDISTS[name]
    out = offline_recipe(recipe_dir, dest, url=url, local_file=cached_sdist(name), version=version)
    if name == "mmcv":
        _point_url(out / "recipe.yaml", MMCV_GITHUB_URL, cached_github_archive(), version)
    return out


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
