"""tests/support/offline.py obtains upstream mmcv's tag archive the way a user's machine can: from a
shared folder, else the recipe's own URL (sha256 checked), else one line saying what to do.
GitHub is unreachable here, so the download runs against a local HTTP server serving a copy of the
same archive: real HTTP, the recipe's real sha256."""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from support import offline

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def archive() -> Path:
    return offline.cached_github_archive()


@pytest.fixture
def served(tmp_path, archive):
    """A copy of the archive under a real http.server on 127.0.0.1; yields its URL."""
    root = tmp_path / "www"
    root.mkdir()
    shutil.copyfile(archive, root / "v2.2.0.tar.gz")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v2.2.0.tar.gz"
    finally:
        server.shutdown()
        server.server_close()


def test_url_and_sha256_are_the_recipes_own():
    data = yaml.safe_load((ROOT / "recipes" / "mmcv" / "recipe.yaml").read_text())
    (upstream,) = [s for s in data["source"] if s.get("target_directory") == "upstream"]
    assert offline.MMCV_GITHUB_URL == upstream["url"].replace("${{ version }}", data["context"]["version"])
    assert offline.MMCV_GITHUB_URL == "https://github.com/open-mmlab/mmcv/archive/refs/tags/v2.2.0.tar.gz"
    assert offline.MMCV_GITHUB_SHA256 == upstream["sha256"]


def test_without_a_shared_copy_it_downloads_the_url_and_checks_the_sha256(tmp_path, served):
    got = offline.obtain_github_archive(cache_root=tmp_path / "cache", shared=(tmp_path / "none",), url=served)
    assert got == tmp_path / "cache" / "sdist" / offline.MMCV_GITHUB_FILE
    assert offline._sha256(got) == offline.MMCV_GITHUB_SHA256
    assert sorted(p.name for p in got.parent.iterdir()) == [offline.MMCV_GITHUB_FILE]  # no partial left


def test_a_download_with_another_sha256_is_refused_and_nothing_is_kept(tmp_path, served):
    cache = tmp_path / "cache"
    with pytest.raises(offline.SourceUnavailable) as exc:
        offline.obtain_github_archive(cache_root=cache, shared=(), url=served, sha256="0" * 64)
    msg = str(exc.value)
    assert "\n" not in msg
    assert f"sha256 {offline.MMCV_GITHUB_SHA256}" in msg and f"not the recipe's {'0' * 64}" in msg
    assert list((cache / "sdist").iterdir()) == []


def test_a_shared_copy_is_used_before_the_network(tmp_path, archive):
    shared = tmp_path / "shared"
    shared.mkdir()
    shutil.copyfile(archive, shared / offline.MMCV_GITHUB_FILE)
    got = offline.obtain_github_archive(cache_root=tmp_path / "cache", shared=(shared,),
                                        url="http://127.0.0.1:9/unreachable")
    assert offline._sha256(got) == offline.MMCV_GITHUB_SHA256


def test_neither_shared_copy_nor_network_says_in_one_line_what_to_do(tmp_path):
    shared = tmp_path / "shared"
    with pytest.raises(offline.SourceUnavailable) as exc:
        offline.obtain_github_archive(cache_root=tmp_path / "cache", shared=(shared,),
                                      url="http://127.0.0.1:9/v2.2.0.tar.gz")
    msg = str(exc.value)
    assert "\n" not in msg
    assert "cannot download http://127.0.0.1:9/v2.2.0.tar.gz" in msg
    assert f"(sha256 {offline.MMCV_GITHUB_SHA256})" in msg
    assert f"save it as {shared / offline.MMCV_GITHUB_FILE}" in msg
    assert "MMSTACK_SHARED_SOURCES" in msg


def test_a_test_needing_the_archive_fails_with_that_line_not_a_traceback(tmp_path):
    """What a user sees in the e2e tests: pytest's one-line failure naming the fix."""
    test = tmp_path / "tests" / "test_needs_archive.py"
    shutil.copytree(ROOT / "tests" / "support", tmp_path / "tests" / "support",
                    ignore=shutil.ignore_patterns("__pycache__"))
    test.write_text("from support import offline\n\n"
                    "def test_it():\n    offline.cached_github_archive()\n")
    env = {"MMSTACK_TEST_CACHE": str(tmp_path / "cache"), "MMSTACK_SHARED_SOURCES": str(tmp_path / "nothing"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    # no ../shared beside tmp_path's copy of tests/support and recipes/mmcv, and GitHub unreachable or not: the
    # URL is pointed at a closed port so the run is the same everywhere
    (tmp_path / "recipes" / "mmcv").mkdir(parents=True)
    recipe = (ROOT / "recipes" / "mmcv" / "recipe.yaml").read_text()
    (tmp_path / "recipes" / "mmcv" / "recipe.yaml").write_text(
        recipe.replace("https://github.com/open-mmlab/mmcv/archive/refs/tags/", "http://127.0.0.1:9/"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "-o", "pythonpath=tests", str(test)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failure = proc.stdout.split(" test_it ")[1].split("short test summary info")[0]
    lines = [ln for ln in failure.splitlines() if ln.strip("_= ")]
    assert len(lines) == 1, failure  # the reason alone: no traceback, no chained exception
    assert lines[0].startswith("mmcv's tag archive is missing: cannot download http://127.0.0.1:9/v2.2.0.tar.gz")
    assert f"(sha256 {offline.MMCV_GITHUB_SHA256})" in lines[0]
