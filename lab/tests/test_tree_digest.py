"""lab/gpu/tree-digest.sh: the digest that tells, in a device run's machine.txt, whether .gpu-commit
named the tree that was sent (the device's git metadata is the session's base commit, so
recipe-run9's follow-up calls said a commit that was two behind, with nothing to flag it).

In a copy of the tree's code: the digest is a function of the files a device run uses, not of
ignored caches or of results and docs; .gpu-commit is refused while that code has uncommitted
changes and then carries the commit and the digest; gpu-proof.sh's check reads it back.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE = ("recipes", "scripts", "src", "lab/src", "lab/gpu", "pyproject.toml", "lab/pyproject.toml", "conda_build_config.yaml")
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for rel in CODE:
        src = ROOT / rel
        if src.is_dir():
            shutil.copytree(src, tree / rel, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, tree / rel)
    (tree / "lab" / "results").mkdir(parents=True)
    (tree / "lab" / "tests").mkdir(parents=True)
    shutil.copy(ROOT / ".gitignore", tree / ".gitignore")
    return tree


def _digest(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(tree / "lab" / "gpu" / "tree-digest.sh"), *args], cwd=tree, capture_output=True, text=True)


def _git(tree: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tree, check=True, capture_output=True)


def test_the_digest_follows_the_code_only(tmp_path):
    tree = _copy(tmp_path)
    first = _digest(tree).stdout.strip()
    assert len(first) == 64 and int(first, 16) >= 0
    (tree / "src" / "mmstack" / "__pycache__").mkdir(exist_ok=True)
    (tree / "src" / "mmstack" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (tree / "lab" / "results" / "r.json").write_text("{}")
    (tree / "lab" / "tests" / "test_x.py").write_text("")
    (tree / "docs").mkdir()
    (tree / "docs" / "d.md").write_text("x")
    assert _digest(tree).stdout.strip() == first  # caches, results, the lab's tests and docs do not count
    with (tree / "lab" / "src" / "mmstack_lab" / "detector" / "bench_detector.py").open("a") as f:
        f.write("\n# changed\n")
    assert _digest(tree).stdout.strip() != first


def test_gpu_commit_waits_for_a_commit_then_names_it_and_its_digest(tmp_path):
    tree = _copy(tmp_path)
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-qm", "the tree")
    (tree / "recipes" / "mmcv" / "build.sh").write_text((tree / "recipes" / "mmcv" / "build.sh").read_text() + "\n# edit\n")
    refused = _digest(tree, "--gpu-commit")
    assert refused.returncode == 2 and "commit them first" in refused.stderr
    assert not (tree / ".gpu-commit").exists()
    _git(tree, "commit", "-qam", "the edit")
    done = _digest(tree, "--gpu-commit")
    assert done.returncode == 0, done.stderr
    head, digest = (tree / ".gpu-commit").read_text().splitlines()
    assert head.endswith(" the edit") and digest == "digest " + _digest(tree).stdout.strip()


def test_the_proof_drivers_machine_txt_says_matches_stale_or_unchecked(tmp_path):
    """mmstack_lab.proof.run writes tree_digest into machine.txt from lab/gpu/tree-digest.sh and .gpu-commit."""
    from mmstack_lab.proof import run as driver
    from mmstack_lab.proof.context import Run

    assert "tree-digest.sh --gpu-commit" in (ROOT / "lab" / "gpu" / "carry.sh").read_text()
    tree = _copy(tmp_path)
    here = _digest(tree).stdout.strip()
    r = Run(root=tree, carry=tmp_path / "c", res=tmp_path / "res", work=tmp_path / "w",
            facts={"python": "3.11", "python_full": "3.11.7", "torch": "2.13", "torch_full": "2.13.0", "cuda": "",
                   "cuda_full": None, "gcc": "", "c_stdlib_version": ""})
    r.res.mkdir()

    def line(gpu_commit: str | None) -> str:
        (tree / ".gpu-commit").unlink(missing_ok=True)
        if gpu_commit is not None:
            (tree / ".gpu-commit").write_text(gpu_commit)
        driver._machine_txt(r)
        return next(x for x in (r.res / "machine.txt").read_text().splitlines() if x.startswith("tree_digest:"))

    assert line(f"abc1234 the tree\ndigest {here}\n") == f"tree_digest: {here} (matches .gpu-commit)"
    assert "(STALE: .gpu-commit names " + "0" * 64 in line(f"abc1234 the tree\ndigest {'0' * 64}\n")
    assert "(.gpu-commit has no digest: unchecked)" in line("abc1234 the tree\n")
    assert "unchecked" in line(None)
