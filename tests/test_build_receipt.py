"""builder/receipt.py: a test receipt beside each package, kept by `mmstack channel index`, replaced
with its package, and invisible to py-rattler's solve and install (real solves over a real channel)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from support.cli import mmstack
from support.probe_package import build_probe

from mmstack.builder import receipt
from mmstack.builder.channel import add_packages
from mmstack.commands.ladder_cmds import ladder_summary
from mmstack.variants import matrix, selection
from mmstack_lab.standin import fake_channel, page_channel

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """fake_channel's stand-in channel (mmcv per matrix row and its dependencies), indexed."""
    from mmstack.facts.gpus import load

    rows = matrix.load_matrix(load(), ROOT / matrix.CONFIG_FILE)
    return fake_channel.build_channel(tmp_path_factory.mktemp("small") / "ch", fake_channel.standard_packages(rows))


def _receipt_for(pkg: Path) -> Path:
    machine, docs = page_channel.recorded_h200()
    name, version, build = pkg.name.removesuffix(".conda").rsplit("-", 2)
    doc = receipt.make(pkg, name=name, version=version, build_string=build, subdir=pkg.parent.name, test_results=docs,
                       machine_part=machine, tests_passed=3, seconds=12.0, via="test")
    return receipt.write(pkg, doc)


def test_a_receipt_names_the_file_the_machine_the_levels_upstream_and_the_tools(small, tmp_path):
    shutil.copytree(small, tmp_path / "ch")
    small = tmp_path / "ch"
    pkg = next((small / "linux-64").glob("mmcv-2.2.0-cuda129_sm90_py311_*.conda"))
    path = _receipt_for(pkg)
    assert path == pkg.with_name(pkg.name + ".receipt.json") and receipt.package_of(path) == pkg.name
    doc = json.loads(path.read_text())
    assert doc["schema"] == receipt.SCHEMA
    assert doc["package"] == {"file": pkg.name, "subdir": "linux-64", "name": "mmcv", "version": "2.2.0",
                              "build_string": pkg.name.removesuffix(".conda").split("-", 2)[2],
                              "sha256": hashlib.sha256(pkg.read_bytes()).hexdigest()}
    assert doc["machine"]["gpus"] == [{"name": "NVIDIA H200", "compute_capability": "9.0", "driver": "580.159.04"}]
    assert doc["machine"]["cuda_runtime"] == "13.0" and doc["machine"]["recorded_from"].startswith("STAND-IN")
    assert [(lv["level"], lv["status"]) for lv in doc["tests"]["ladder"]] == [
        (lv["level"], lv["status"]) for lv in json.loads((page_channel.RECORDED / "verify_installed_sm90.json").read_text())["levels"]]
    assert all(isinstance(lv["seconds"], float) and "reason" not in lv for lv in doc["tests"]["ladder"])  # all PASS
    (up,) = doc["tests"]["upstream"]
    assert up["counts"]["passed"] > 100 and up["skip_reasons"], up
    assert doc["code"] == {"sass": [], "ptx": [], "glibc": None, "glibc_needed_by": None, "objects": []}  # empty stand-in
    assert set(doc["tools"]) == {"mmstack", "py-rattler-build", "py-rattler", "rattler-build"} and all(doc["tools"].values())
    assert doc["date"].endswith("Z") and "not a signature" in doc["proves"]
    assert str(small) not in path.read_text()  # no machine path


def test_the_receipt_of_a_package_with_kernels_holds_its_sass_ptx_and_glibc(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: the package needs a real CUDA object")
    built = page_channel.build(tmp_path)
    doc = json.loads(page_channel.write_h200_receipt(built["channel"], built["files"]["sm89"]).read_text())
    assert (doc["code"]["sass"], doc["code"]["ptx"]) == (["8.9"], ["8.9"])
    assert doc["code"]["glibc"] and doc["code"]["glibc_needed_by"].startswith("lib/python3.11/site-packages/mmcv/_ext")
    assert str(tmp_path) not in json.dumps(doc)


def test_channel_index_keeps_receipts_and_lists_only_packages(small, tmp_path):
    ch = tmp_path / "ch"
    shutil.copytree(small, ch)
    receipts = [_receipt_for(p) for p in sorted((ch / "linux-64").glob("mmcv-*.conda"))[:3]]
    code, _out, err = mmstack("channel", "index", str(ch), "--json")
    assert code == 0, err
    assert all(r.is_file() for r in receipts)
    assert set(receipt.read_all(ch)) == {f"linux-64/{receipt.package_of(r)}" for r in receipts}
    listed = json.loads((ch / "linux-64" / "repodata.json").read_text())
    names = set(listed.get("packages", {})) | set(listed.get("packages.conda", {}))
    assert not any(n.endswith(".json") for n in names) and {receipt.package_of(r) for r in receipts} <= names


def test_a_rebuilt_package_drops_the_receipt_of_the_file_it_replaces(small, tmp_path):
    ch = tmp_path / "ch"
    shutil.copytree(small, ch)
    pkg = next((ch / "linux-64").glob("mmcv-2.2.0-cpu_py311_*.conda"))
    old = _receipt_for(pkg)
    again = tmp_path / "out" / "linux-64" / pkg.name
    again.parent.mkdir(parents=True)
    shutil.copy2(pkg, again)
    add_packages(ch, [again])
    assert pkg.is_file() and not old.exists()


def test_py_rattler_solves_and_installs_the_same_with_receipts_beside_the_packages(small, tmp_path):
    """The receipts (and a stray JSON that is no receipt) change neither the solve nor the install."""
    from rattler import install

    ch = tmp_path / "ch"
    shutil.copytree(small, ch)
    machine = selection.Machine("12.9", "8.9")
    before = selection.solve([ch.as_uri()], ["mmcv"], machine)
    for p in sorted((ch / "linux-64").glob("mmcv-*.conda")) + sorted((ch / "noarch").glob("*.conda")):
        _receipt_for(p)
    (ch / "linux-64" / "stray.json").write_text("{}")
    mmstack("channel", "index", str(ch), "--quiet")
    after = selection.solve([ch.as_uri()], ["mmcv"], machine)
    assert after == before and after.build and after.build.startswith("cuda129_sm89_py3")

    from rattler import BuildString, GenericVirtualPackage, PackageName, Subdir, Version, solve

    vps = [GenericVirtualPackage(PackageName(n), Version(v), BuildString("0")) for n, v in machine.virtual_packages().items()]
    records = asyncio.run(solve([ch.as_uri()], ["mmcv"], platforms=[Subdir("linux-64"), Subdir("noarch")],
                                virtual_packages=vps))
    prefix = tmp_path / "prefix"
    asyncio.run(install(records, target_prefix=prefix))
    metas = {json.loads(m.read_text())["name"]: json.loads(m.read_text()) for m in (prefix / "conda-meta").glob("*.json")}
    mmcv = metas["mmcv"]
    pkg = ch / "linux-64" / mmcv["fn"]
    assert mmcv["sha256"] == hashlib.sha256(pkg.read_bytes()).hexdigest() and pkg.with_name(pkg.name + ".receipt.json").is_file()
    assert not any(f.endswith(".receipt.json") for m in metas.values() for f in m.get("files", []))


def test_the_ladder_summary_keeps_each_levels_verdict_and_seconds_and_the_runtime():
    doc = json.loads((page_channel.RECORDED / "verify_installed_sm90.json").read_text())
    s = ladder_summary(doc)
    assert s["ok"] is True and s["torch_cuda"] == "13.0"
    assert [(lv["level"], lv["status"], lv["seconds"]) for lv in s["levels"]] == [
        (lv["level"], lv["status"], lv["seconds"]) for lv in doc["levels"]]


def test_a_receipt_from_another_build_of_the_same_file_name_is_not_read_as_current(small, tmp_path):
    """read_all returns receipts by file name; whether one is current is its sha256 against the
    repodata's (what the page checks)."""
    ch = tmp_path / "ch"
    shutil.copytree(small, ch)
    pkg = next((ch / "linux-64").glob("mmcv-2.2.0-cpu_py311_*.conda"))
    _receipt_for(pkg)
    (ch / "linux-64" / "garbage.conda.receipt.json").write_text("not json")
    docs = receipt.read_all(ch)
    assert list(docs) == [f"linux-64/{pkg.name}"]
    listed = json.loads((ch / "linux-64" / "repodata.json").read_text())
    assert docs[f"linux-64/{pkg.name}"]["package"]["sha256"] == listed["packages.conda"][pkg.name]["sha256"]


# -- written by the commands, through the real engine (a one-file generic recipe, as tests/test_cli_test.py's) --

PROBE = """\
package:
  name: mmstack-receipt-probe
  version: "1.0"
build:
  noarch: generic
  script:
    - mkdir -p $PREFIX/share/probe
    - echo probe > $PREFIX/share/probe/file.txt
tests:
  - script:
      - test -f $PREFIX/share/probe/file.txt
      # what `mmstack verify --json` prints on stderr (a STAND-IN line: no mmstack in this test environment)
      - echo 'mmstack-result {"kind":"ladder","levels":[{"level":"L1","name":"import","seconds":1.5,"status":"PASS","reason":"a path"},{"level":"L2","name":"CUDA","seconds":0.0,"status":"SKIP","reason":"no GPU"}],"ok":true,"torch_cuda":null}' >&2
{extra}
"""
FAILS = """\
  - script:
      - exit 3
"""


def _probe(tmp_path: Path, *, failing: bool, test: bool) -> tuple[Path, Path, Path]:
    return build_probe(tmp_path, PROBE.replace("{extra}", FAILS if failing else ""), test=test)


def test_build_with_tests_and_test_after_a_pass_write_the_receipt(tmp_path):
    pkg, channel, empty = _probe(tmp_path, failing=False, test=True)
    doc = json.loads(receipt.path_for(pkg).read_text())
    assert doc["tested_by"] == "mmstack build" and doc["package"]["sha256"] == hashlib.sha256(pkg.read_bytes()).hexdigest()
    assert doc["tests"]["passed"] == 1  # the section's one test
    assert doc["tests"]["ladder"] == [{"level": "L1", "name": "import", "seconds": 1.5, "status": "PASS"},
                                      {"level": "L2", "name": "CUDA", "seconds": 0.0, "status": "SKIP", "reason": "no GPU"}]
    if shutil.which("nvidia-smi") is None:
        assert doc["machine"]["gpus"] == [] and doc["machine"]["summary"] == receipt.NO_GPU
    code, out, err = mmstack("test", str(pkg), "--channel", str(channel), "--source-channel", str(empty), "--json")
    assert code == 0, err
    assert json.loads(out)["packages"][0]["receipt"] == pkg.name + receipt.SUFFIX
    again = json.loads(receipt.path_for(pkg).read_text())
    assert again["tested_by"] == "mmstack test" and again["tests"]["passed"] == 1 and again["tests"]["ladder"]


def test_a_failing_test_section_writes_no_receipt(tmp_path):
    pkg, channel, empty = _probe(tmp_path, failing=True, test=False)
    assert not receipt.path_for(pkg).exists()  # built with --no-test: nothing was shown
    code, out, _err = mmstack("test", str(pkg), "--channel", str(channel), "--source-channel", str(empty), "--json")
    assert code == 1 and json.loads(out)["packages"][0]["receipt"] is None
    assert not receipt.path_for(pkg).exists()


def test_the_real_conda_installs_the_same_with_receipts_beside_the_packages(small):
    """tests/data/receipts/conda.json: conda 26.7.1 (classic solver, offline) really installed mmcv from
    fake_channel's channel without and with a receipt beside every package (and a stray JSON): the same
    packages, no receipt in its package cache or the prefix; and the mmcv is the one py-rattler picks."""
    fixture = json.loads((ROOT / "tests" / "data" / "receipts" / "conda.json").read_text())
    plain, with_receipts = fixture["answers"]["plain"], fixture["answers"]["receipts"]
    assert plain["success"] and with_receipts["success"] and plain["linked"] == with_receipts["linked"]
    assert with_receipts["receipts_in_pkgs_dir"] == [] and not any(f.endswith(".json") for f in with_receipts["files"])
    env = fixture["env"]
    picked = selection.solve([small.as_uri()], fixture["specs"],
                             selection.Machine(env["CONDA_OVERRIDE_CUDA"], env["CONDA_OVERRIDE_CUDA_ARCH"]))
    (mmcv,) = [x for x in with_receipts["linked"] if x[0] == "mmcv"]
    assert selection.mask_hash(picked.build or "") == mmcv[2]


def test_a_package_with_no_tests_gets_no_receipt(tmp_path):
    pytest.importorskip("rattler_build")
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "recipe.yaml").write_text(PROBE.split("tests:")[0])
    empty = tmp_path / "empty"
    (empty / "noarch").mkdir(parents=True)
    assert mmstack("channel", "index", str(empty), "--quiet")[0] == 0
    code, out, err = mmstack("build", "--root", str(ROOT), "--recipe", str(recipe), "--channel", str(tmp_path / "channel"),
                             "--source-channel", str(empty), "--quiet", "--json")
    assert code == 0, err
    (p,) = json.loads(out)["packages"]
    assert p["receipt"] is None and not receipt.path_for(p["path"]).exists()
