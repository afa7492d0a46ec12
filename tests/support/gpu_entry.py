"""The evidence a recipe patch needs to have entered after its GPU run (recipes/mmcv/patches/README.md):
a GPU-proof run with --proposed (mmstack_lab.proof.run) built the recipe with it (proposed.txt: each candidate file's
sha256; proposed_diffs.json: its diff's, so a header rewritten after the run stays checkable), its
sandbox tests and the installed ladder passed, and patch_ab.py measured it."""

from __future__ import annotations

import json
from pathlib import Path

from mmstack_lab.ops.patch_ab import diff_sha256


def built_files(run: Path) -> dict[str, str]:
    """proposed.txt: '<package>/<patch file>' -> the sha256 of the file the run built."""
    return dict(line.split()[::-1] for line in (run / "proposed.txt").read_text().splitlines())


def _ran_and_listed(run: Path, patch: Path) -> tuple[str, str]:
    """Assert that `run` ran this very diff of `patch` (proposed_diffs.json) and that both recipes
    list it; return its package and '<package>/<patch file>'."""
    package = patch.parents[1].name
    key = f"{package}/{patch.name}"
    assert json.loads((run / "proposed_diffs.json").read_text())["diff_sha256"][key] == diff_sha256(patch.read_text()), \
        f"{key} changed since {run.name}"
    for recipe in ("recipe.yaml", "meta.yaml"):
        assert f"patches/{patch.name}" in (patch.parents[1] / recipe).read_text()
    return package, key


def mmdet_over_torchvision(doc: dict, batch: int) -> dict[str, float]:
    """patch_ab --detector: mmdet's it/s over the matched torchvision's at `batch`, on each side,
    after checking both sides' losses stayed finite."""
    (row,) = [r for r in doc["detector"] if r["batch_size"] == batch]
    assert all(row[side]["mmdet"]["losses_finite"] for side in ("released", "patched"))
    return {side: row[side]["mmdet"]["iters_per_s"] / row[side]["torchvision-matched"]["iters_per_s"]
            for side in ("released", "patched")}


def check_entered(run: Path, patch: Path, *, upstream_file: str) -> dict:
    """Assert that `run` built this very diff of `patch` (now in its recipe's patches/ and listed by
    both recipes), that the sm_90 build's sandbox ran upstream's tests (`upstream_file` among them)
    with none failed, and that the build and the installed ladder passed; return the run's
    patch_ab.py result for the patch, after checking it measured a package that carried the patch
    and upstream's tests came out alike on both sides."""
    package, _ = _ran_and_listed(run, patch)
    status = (run / "STATUS").read_text()
    assert "sm90 build rc=0" in status and "verify sm90 rc=0" in status
    summary = json.loads((run / "summary.json").read_text())
    (tests,) = [t for t in summary["builds"]["sm90"]["packages"][0]["test_results"] if t["kind"] == "upstream-tests"]
    assert tests["counts"]["failed"] == 0 and tests["counts"]["passed"] > 200
    assert upstream_file in tests["by_file"]
    assert summary["installed_prefix_ladder"]["sm90"]["ok"] is True
    (result,) = run.glob(f"patchab_{package}-{patch.name.split('-', 1)[0]}-*.json")
    doc = json.loads(result.read_text())
    assert doc["installed_carries_patch"] is True
    up = doc["upstream"]
    assert up["released"]["counts"] == up["patched"]["counts"] and up["patched"]["counts"]["failed"] == 0
    assert up["patched"]["counts"]["passed"] > 0
    return doc


def check_tested(run: Path, patch: Path, *, package_file: str) -> dict | None:
    """The CPU-built flow (issue 39): a `--proposed` build on the CPU machine, carried to the GPU
    machine, whose `test` stage ran the package's whole test section there. Assert that `run` tested
    this very diff of `patch` (now listed by both recipes) in `package_file` with its section passing
    and the installed ladder passing; return the run's patch_ab result for the patch (None for a
    build-only patch without a `patch_ab:` line), after checking it measured a package that carried
    the same file and that upstream's tests came out alike on both sides."""
    package, key = _ran_and_listed(run, patch)
    status = (run / "STATUS").read_text()
    seeded = next(line for line in status.splitlines() if "carried packages (" in line)
    assert package_file in seeded, f"{package_file} was not the package the run seeded"
    assert f"test {package_file} rc=0" in status and "verify sm90 rc=0" in status
    results = list(run.glob(f"patchab_{package}-{patch.name.split('-', 1)[0]}-*.json"))
    if not results:
        assert not any(line.startswith("patch_ab:") for line in patch.read_text().splitlines())
        return None
    (result,) = results
    doc = json.loads(result.read_text())
    assert doc["installed_carries_patch"] is True
    assert f"{doc['patch_sha256']} {key}" in (run / "proposed.txt").read_text().splitlines()
    up = doc.get("upstream")
    if up:
        assert up["released"]["counts"] == up["patched"]["counts"] and up["patched"]["counts"]["failed"] == 0
    return doc


def package_shas(listing: Path) -> dict[str, str]:
    """A build's packages.sha256 (`sha256sum` lines): file name -> sha256."""
    return {name: sha for sha, name in (line.split() for line in listing.read_text().splitlines())}


def seeded_mmcv(build: Path, run: Path, *, source: str = "packages") -> str:
    """Assert that GPU run `run` seeded the very mmcv package CPU build `build` made (by sha256, from
    $CARRY/`source`: "packages", or "proposed" for a --proposed build); return its file name."""
    built = package_shas(build / "packages.sha256")
    (mmcv,) = [p for p in built if p.startswith("mmcv-")]
    seeded = {s["file"]: s for s in json.loads((run / "seeded.json").read_text())}
    assert seeded[mmcv] == {"file": mmcv, "from": source, "sha256": built[mmcv]}, seeded.get(mmcv)
    return mmcv


def check_pair_tested(pair: Path, run: Path) -> dict:
    """A side-by-side CPU pair (A: the recipe, B: --proposed) whose B mmcv a GPU run seeded: assert that
    `run` seeded B's very package (by sha256: A made one of the same name with other bytes), that its
    test section and the installed ladder passed there and upstream's tests had none failed; return
    that upstream-tests result (its by_file names the files that ran)."""
    b = package_shas(pair / "B" / "packages.sha256")
    (mmcv,) = [p for p in b if p.startswith("mmcv-")]
    seeded = {s["file"]: s for s in json.loads((run / "seeded.json").read_text())}
    assert seeded[mmcv]["sha256"] == b[mmcv] and seeded[mmcv]["from"] == "proposed"
    assert package_shas(pair / "A" / "packages.sha256")[mmcv] != b[mmcv]
    status = (run / "STATUS").read_text()
    assert f"test {mmcv} rc=0" in status and "verify sm90 rc=0" in status
    doc = json.loads((run / "test_mmcv_cuda130_sm90.json").read_text())
    assert doc["passed"] is True
    (upstream,) = [t for t in doc["packages"][0]["test_results"] if t["kind"] == "upstream-tests"]
    assert upstream["counts"]["failed"] == 0 and upstream["counts"]["error"] == 0 and upstream["counts"]["passed"] > 200
    return upstream
