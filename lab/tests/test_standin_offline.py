"""mmstack_lab.standin.offline obtains upstream mmcv's tag archive the way a user's machine can: from a
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

from mmstack_lab.standin import offline

ROOT = Path(__file__).resolve().parents[2]


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
    # a copy of the lab, first on the path: offline finds the recipes in the checkout its package lies in
    shutil.copytree(ROOT / "lab" / "src" / "mmstack_lab", tmp_path / "lab" / "src" / "mmstack_lab",
                    ignore=shutil.ignore_patterns("__pycache__"))
    test.parent.mkdir()
    test.write_text("from mmstack_lab.standin import offline\n\n"
                    "def test_it():\n    offline.cached_github_archive()\n")
    env = {"MMSTACK_TEST_CACHE": str(tmp_path / "cache"), "MMSTACK_SHARED_SOURCES": str(tmp_path / "nothing"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    # no ../shared beside tmp_path's copy of the lab and recipes/mmcv, and GitHub unreachable or not: the
    # URL is pointed at a closed port so the run is the same everywhere
    (tmp_path / "recipes" / "mmcv").mkdir(parents=True)
    recipe = (ROOT / "recipes" / "mmcv" / "recipe.yaml").read_text()
    (tmp_path / "recipes" / "mmcv" / "recipe.yaml").write_text(
        recipe.replace("https://github.com/open-mmlab/mmcv/archive/refs/tags/", "http://127.0.0.1:9/"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "-o", "pythonpath=tests lab/src", str(test)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failure = proc.stdout.split(" test_it ")[1].split("short test summary info")[0]
    lines = [ln for ln in failure.splitlines() if ln.strip("_= ")]
    assert len(lines) == 1, failure  # the reason alone: no traceback, no chained exception
    assert lines[0].startswith("mmcv's tag archive is missing: cannot download http://127.0.0.1:9/v2.2.0.tar.gz")
    assert f"(sha256 {offline.MMCV_GITHUB_SHA256})" in lines[0]


# -- the committed sources (tests/data/sources): mmengine's tag archive, mmdet's STAND-IN tests subset --

def _recipe(name: str) -> dict:
    return yaml.safe_load((ROOT / "recipes" / name / "recipe.yaml").read_text())


def test_mmengine_tag_archive_is_committed_byte_for_byte_the_recipes():
    url, sha256 = offline.recipe_source(ROOT / "recipes" / "mmengine" / "recipe.yaml", "upstream")
    assert url == "https://github.com/open-mmlab/mmengine/archive/refs/tags/v0.10.7.tar.gz"
    committed = offline.SOURCES_DIR / offline.MMENGINE_GITHUB_FILE
    assert offline._sha256(committed) == sha256
    assert sha256 in (offline.SOURCES_DIR / "README.md").read_text()


def test_mmengine_offline_recipe_takes_both_sources_from_local_files_with_the_recipes_sha256(tmp_path):
    out = offline.offline_recipe_for("mmengine", ROOT / "recipes" / "mmengine", tmp_path / "mmengine")
    sources = yaml.safe_load((out / "recipe.yaml").read_text())["source"]
    for source, theirs in zip(sources, _recipe("mmengine")["source"], strict=True):
        assert source["url"].startswith("file:///") and Path(source["url"][7:]).is_file()
        assert source["sha256"] == theirs["sha256"] == offline._sha256(Path(source["url"][7:]))
    assert sources[1]["target_directory"] == "upstream"


def test_mmdet_offline_recipe_names_the_stand_in_for_the_git_commit(tmp_path):
    """The recipe pins upstream's tests by commit (git); offline, the committed subset archive made
    from that commit stands in, marked STAND-IN, its own sha256 checked by rattler-build."""
    (git,) = [s for s in _recipe("mmdet")["source"] if "git" in s]
    out = offline.offline_recipe_for("mmdet", ROOT / "recipes" / "mmdet", tmp_path / "mmdet")
    text = (out / "recipe.yaml").read_text()
    assert "- git:" not in text and "STAND-IN" in text and git["rev"] in text
    (stand_in,) = [s for s in yaml.safe_load(text)["source"] if s.get("target_directory") == "upstream"]
    assert stand_in["url"] == offline.MMDET_TESTS_STAND_IN.resolve().as_uri()
    assert stand_in["sha256"] == offline._sha256(offline.MMDET_TESTS_STAND_IN) == offline.MMDET_TESTS_STAND_IN_SHA256
    readme = (offline.SOURCES_DIR / "README.md").read_text()
    assert offline.MMDET_TESTS_STAND_IN_SHA256 in readme and git["rev"] in readme


def test_mmdet_stand_in_holds_tests_only_of_that_commit():
    import tarfile

    with tarfile.open(offline.MMDET_TESTS_STAND_IN) as tf:
        names = tf.getnames()
        (rev,) = [s for s in _recipe("mmdet")["source"] if "git" in s]
        assert tf.pax_headers.get("comment") == rev["rev"]  # git archive's pax header: the commit archived
    assert {n.split("/")[1] for n in names if n.count("/") >= 1 and n.split("/")[1]} == {"tests"}
    assert {n.split("/")[0] for n in names} == {"mmdetection-3.3.0"}
    assert "mmdetection-3.3.0/tests/test_models/test_losses/test_loss.py" in names


def test_stand_in_git_source_refuses_a_recipe_without_one_git_source(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("source:\n  - url: https://example.invalid/x.tar.gz\n    sha256: " + "0" * 64 + "\n")
    with pytest.raises(AssertionError, match="expected one `- git:` source"):
        offline.stand_in_git_source(recipe, offline.MMDET_TESTS_STAND_IN, offline.MMDET_TESTS_STAND_IN_SHA256)
