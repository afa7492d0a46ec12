"""`mmstack lock` / `lock check` against real conda-forge records (tests/data/conda-forge-subset, copied from ../shared/fixtures).

The fixture holds pytorch 2.7.1 cuda126 and 2.8.0 cpu builds, cuda-nvcc 12.8, cuda-version 12.8
and python 3.11 (no mmcv), so the scenario is a two-generation world: `cpu` and `rtx4090` pinned
to CUDA 12.8 (the facts' rows with cuda 12.8), a variant matrix for CUDA 12.8, and a tiny local
channel with the two mmcv builds that matrix names. Everything else is the real solver and the
real conda-forge metadata (sha256, depends, `__cuda` requirements). Nothing is installed.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import pytest

from mmstack.cli import main
from mmstack.commands.lock_cmds import run_lock, run_lock_check
from mmstack.envs import lockfile
from mmstack.envs.lock import collect_problems
from mmstack.facts.gpus import load as load_facts
from mmstack_lab.standin import fake_channel

# real conda-forge records: the copy in tests/data (its README says where they come from)
FIXTURE = Path(__file__).resolve().parent / "data" / "conda-forge-subset" / "conda-forge"
pytestmark = pytest.mark.skipif(not FIXTURE.is_dir(), reason=f"fixture channel absent: {FIXTURE}")
pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
pytest.importorskip("rattler_build", reason="py-rattler-build (the [build] extra) is not installed")


MATRIX = """\
python:
  - "3.11"
pytorch:
  - "2.7"
cuda_compiler:
  - cuda-nvcc
cuda_compiler_version:
  - None
  - "12.8"
mmcv_arch_list:
  - none
  - "8.9"
arch_tag:
  - cpu
  - sm89
zip_keys:
  - [cuda_compiler_version, mmcv_arch_list, arch_tag]
"""


def manifest(fixture_url: str, mmcv_url: str) -> str:
    return textwrap.dedent(f"""\
        [workspace]
        name = "fixture"
        channels = ["{fixture_url}", "{mmcv_url}"]
        platforms = [
          "linux-64",
          {{ name = "linux-64-rtx4090", platform = "linux-64", cuda = {{ driver = "12.8", arch = "8.9" }}, glibc = "2.28" }},
        ]

        [dependencies]
        python = "3.11.*"

        [feature.cuda.dependencies]
        pytorch = {{ version = "*", build = "cuda*" }}
        cuda-nvcc = "*"

        [feature.cpu]
        platforms = ["linux-64"]

        [feature.cpu.dependencies]
        pytorch = {{ version = "*", build = "cpu*" }}
        mmcv = {{ version = "2.2.0.*", build = "cpu_*" }}

        [feature.gen-rtx4090]
        platforms = ["linux-64-rtx4090"]

        [feature.gen-rtx4090.dependencies]
        cuda-version = "12.8.*"
        mmcv = {{ version = "2.2.0.*", build = "cuda128_sm89_*" }}

        [environments]
        default = ["cpu"]
        cpu = ["cpu"]
        rtx4090 = ["cuda", "gen-rtx4090"]
        """)


@pytest.fixture(scope="session")
def facts_128():
    """The packaged facts, narrowed to cpu + rtx4090 with rtx4090 pinned to CUDA 12.8 (the fixture's)."""
    facts = load_facts()
    rows = {g.env: g for g in facts.generation}
    gens = (rows["cpu"], rows["rtx4090"].model_copy(update={"cuda": "12.8"}))
    return facts.model_copy(update={"generation": gens})


@pytest.fixture(scope="session")
def locked_tree(tmp_path_factory, facts_128):
    """A repository root with pixi.toml, the matrix, a mmcv channel, and a lock made by `run_lock`."""
    fc = fake_channel
    base = tmp_path_factory.mktemp("fixture-lock")
    mmcv = base / "mmcv-channel"
    fc.build_channel(mmcv, [
        fc.Pkg("mmcv", "2.2.0", "cuda128_sm89_py311",
               depends=("python >=3.11,<3.12.0a0", "pytorch >=2.7,<2.8", "__cuda", "cuda-version >=12.8,<13")),
        fc.Pkg("mmcv", "2.2.0", "cpu_py311", depends=("python >=3.11,<3.12.0a0", "pytorch")),
    ])
    root = base / "repo"
    root.mkdir()
    (root / "pixi.toml").write_text(manifest(FIXTURE.as_uri(), mmcv.as_uri()))
    (root / "conda_build_config.yaml").write_text(MATRIX)
    assert run_lock(root=root, facts=facts_128) == 0
    return root


@pytest.fixture
def tree(locked_tree, tmp_path):
    """A fresh copy of the locked tree to tamper with."""
    dst = tmp_path / "repo"
    shutil.copytree(locked_tree, dst)
    return dst


def _platforms(root):
    from mmstack.envs.pixi_manifest import load

    return load(root / "pixi.toml").platforms


# pixi.lock's platform table as pixi writes it for this manifest (pixi_core lock_file/platform_rename.rs
# and the examples in prefix-dev/pixi, e.g. examples/multi-machine/pixi.lock): the bare subdir keeps
# its name and pixi's default virtual packages; each named platform is `p<N>` in manifest order, with
# its subdir, its declared virtual packages and the defaults.
PIXI_PLATFORMS = """\
version: 7
platforms:
- name: linux-64
  virtual-packages:
  - __unix=0=0
  - __linux=4.18
  - __glibc=2.28
  - __archspec=0=x86_64
- name: p1
  subdir: linux-64
  virtual-packages:
  - __cuda=12.8
  - __cuda_arch=8.9
  - __glibc=2.28
  - __unix=0=0
  - __linux=4.18
  - __archspec=0=x86_64
environments:
"""


def _platform_block(text: str) -> str:
    return text[:text.index("environments:\n") + len("environments:\n")]


def test_lock_is_written_in_pixis_form(locked_tree):
    assert _platform_block((locked_tree / "pixi.lock").read_text()) == PIXI_PLATFORMS


def test_conda_lock_files_carry_conda_locks_content_hash_and_vp_spec(locked_tree, facts_128):
    from mmstack.envs.lock import conda_lock_hash
    from mmstack.envs.pixi_manifest import load

    env = load(locked_tree / "pixi.toml").envs["rtx4090"]
    doc = lockfile.load_yaml((locked_tree / "envs" / "rtx4090.conda-lock.yml").read_text())
    assert doc["metadata"]["content_hash"] == {"linux-64": conda_lock_hash(env, env.platforms[0], facts_128)}
    vp = lockfile.load_yaml((locked_tree / "envs" / "rtx4090.virtual-packages.yml").read_text())
    assert vp == {"subdirs": {"linux-64": {"packages": {
        "__cuda": "12.8", "__cuda_arch": "8.9", "__glibc": "2.28", "__linux": "4.18", "__unix": "0",
        "__archspec": "1 x86_64"}}}}


def test_lock_check_reads_pixis_form_with_its_own_order(tree, facts_128):
    """pixi may list the virtual packages in another order (and `=0` builds); identity is what counts."""
    lock = tree / "pixi.lock"
    text = lock.read_text()
    reordered = PIXI_PLATFORMS.replace("  - __cuda=12.8\n  - __cuda_arch=8.9\n  - __glibc=2.28\n  - __unix=0=0\n",
                                       "  - __unix=0=0\n  - __glibc=2.28\n  - __cuda_arch=8.9\n  - __cuda=12.8\n")
    assert reordered != PIXI_PLATFORMS
    lock.write_text(reordered + text[len(_platform_block(text)):])
    assert problems(tree, facts_128) == []


def test_lock_check_reads_the_full_name_form(tree, facts_128):
    """Locks written before the aliases (full names, declared virtual packages only) still check."""
    lock = tree / "pixi.lock"
    text = lock.read_text()
    full = ("version: 7\nplatforms:\n- name: linux-64\n- name: linux-64-rtx4090\n  subdir: linux-64\n"
            "  virtual-packages:\n  - __cuda=12.8\n  - __cuda_arch=8.9\n  - __glibc=2.28\nenvironments:\n")
    body = text[len(_platform_block(text)):].replace("\n      p1:\n", "\n      linux-64-rtx4090:\n")
    assert "linux-64-rtx4090:" in body
    lock.write_text(full + body)
    assert lockfile.read_pixi_lock(lock)["rtx4090"].platform == "linux-64-rtx4090"
    assert problems(tree, facts_128) == []


def test_alias_of_another_identity_is_stale(tree, facts_128):
    """`p1` locked for sm_90 does not match pixi.toml's rtx4090 platform (sm_89): flagged, not renamed."""
    lock = tree / "pixi.lock"
    lock.write_text(lock.read_text().replace("  - __cuda_arch=8.9\n", "  - __cuda_arch=9.0\n", 1))
    lines = problems(tree, facts_128)
    assert any(ln.startswith("rtx4090: -: locked on platform p1") and "[stale-lock]" in ln for ln in lines), lines


def problems(root, facts, **kw):
    found, _ = collect_problems(root=root, facts=facts, **kw)
    return [p.line() for p in found]


def test_solves_both_environments_and_writes_both_formats(locked_tree):
    envs = lockfile.read_pixi_lock(locked_tree / "pixi.lock", _platforms(locked_tree))
    assert set(envs) == {"default", "cpu", "rtx4090"}
    gpu, cpu = envs["rtx4090"], envs["cpu"]
    assert gpu.by_name("pytorch")[0].build.startswith("cuda126")
    assert gpu.by_name("mmcv")[0].build.startswith("cuda128_sm89_py311_")
    assert gpu.by_name("cuda-nvcc") and gpu.by_name("cuda-version")[0].version == "12.8"
    assert cpu.by_name("pytorch")[0].build.startswith("cpu_")
    assert not cpu.by_name("cuda-version")
    assert gpu.platform == "linux-64-rtx4090"  # aligned from the file's `p1` by identity
    assert lockfile.read_pixi_lock(locked_tree / "pixi.lock")["rtx4090"].platform == "p1"
    assert list(gpu.virtual_packages) == ["__cuda=12.8", "__cuda_arch=8.9", "__glibc=2.28", "__unix=0=0",
                                          "__linux=4.18", "__archspec=0=x86_64"]
    assert all(p.sha256 and p.md5 for p in gpu.packages)

    cl = lockfile.read_conda_lock(locked_tree / "envs" / "rtx4090.conda-lock.yml")
    assert {p.name: (p.version, p.build, p.sha256) for p in cl.packages} == \
        {p.name: (p.version, p.build, p.sha256) for p in gpu.packages}
    assert set(cl.digests) == set(lockfile.DIGEST_KEYS)
    # conda-lock v1 shape: every record has the fields conda-lock's model requires.
    from ruamel.yaml import YAML

    doc = YAML(typ="safe").load((locked_tree / "envs" / "rtx4090.conda-lock.yml").read_text())
    assert doc["version"] == 1 and set(doc["metadata"]) >= {"content_hash", "channels", "platforms", "sources"}
    torch = next(p for p in doc["package"] if p["name"] == "pytorch")
    assert set(torch) == {"name", "version", "manager", "platform", "dependencies", "url", "hash", "category", "optional"}
    assert torch["dependencies"]["cuda-version"] == ">=12.6,<13"
    assert torch["url"].startswith(FIXTURE.as_uri()) and len(torch["hash"]["sha256"]) == 64
    assert (locked_tree / "envs" / "rtx4090.yml").read_text().count("mmcv=2.2.0=cuda128_sm89_*") == 1


def test_lock_check_passes(locked_tree, facts_128, capsys):
    assert run_lock_check(root=locked_tree, facts=facts_128) == 0
    assert "lock check: OK" in capsys.readouterr().out


def test_relock_prints_unchanged(locked_tree, facts_128, tmp_path, capsys):
    root = tmp_path / "r"
    shutil.copytree(locked_tree, root)
    before = (root / "pixi.lock").read_text()
    assert run_lock(root=root, facts=facts_128, envs=["rtx4090"]) == 0
    out = capsys.readouterr().out
    assert "rtx4090: unchanged" in out
    assert (root / "pixi.lock").read_text() == before  # the cpu env kept, byte for byte


def _env_block(text: str, env: str) -> tuple[int, int]:
    start = text.index(f"\n  {env}:\n")
    end = text.index("\npackages:\n")
    nxt = re.search(r"\n  [a-z0-9]+:\n", text[start + 1:end])
    return start, (start + 1 + nxt.start()) if nxt else end


def test_changed_sha256_fails(tree, facts_128):
    lock = tree / "pixi.lock"
    text = lock.read_text()
    m = re.search(r"(- conda: \S+/pytorch-2\.7\.1-\S+\n(?:  .*\n)*?  sha256: )([0-9a-f]{64})", text)
    lock.write_text(text.replace(m.group(0), m.group(1) + "0" * 64))
    lines = problems(tree, facts_128)
    assert any("rtx4090: pytorch:" in ln and "[sha256-mismatch]" in ln for ln in lines), lines
    assert any("[conda-lock-mismatch]" in ln and "sha256 differs" in ln for ln in lines), lines


def test_cpu_pytorch_in_gpu_env_fails(tree, facts_128):
    lock = tree / "pixi.lock"
    text = lock.read_text()
    s, e = _env_block(text, "rtx4090")
    block = text[s:e]
    cpu_torch = re.search(r"- conda: (\S+/pytorch-2\.8\.0-cpu\S+)", text).group(1)
    block = re.sub(r"- conda: \S+/pytorch-2\.7\.1-\S+", f"- conda: {cpu_torch}", block)
    lock.write_text(text[:s] + block + text[e:])
    lines = problems(tree, facts_128)
    assert any(ln.startswith("rtx4090: pytorch:") and "is a CPU build" in ln and "[cpu-pytorch]" in ln for ln in lines), lines
    assert any("[spec-unsatisfied]" in ln and "pytorch * cuda*" in ln for ln in lines), lines
    assert run_lock_check(root=tree, facts=facts_128) == 1


def test_removed_package_fails(tree, facts_128):
    lock = tree / "pixi.lock"
    text = lock.read_text()
    s, e = _env_block(text, "rtx4090")
    block = re.sub(r"\n      - conda: \S+/cuda-nvtx-\S+", "", text[s:e])
    lock.write_text(text[:s] + block + text[e:])
    lines = problems(tree, facts_128)
    assert any("[missing-dependency]" in ln and "needs cuda-nvtx" in ln for ln in lines), lines
    assert any("rtx4090: cuda-nvtx:" in ln and "[conda-lock-mismatch]" in ln for ln in lines), lines


def test_manifest_edit_makes_lock_stale(tree, facts_128):
    path = tree / "pixi.toml"
    path.write_text(path.read_text().replace('cuda-nvcc = "*"', 'cuda-nvcc = "*"\nnumpy = "*"'))
    lines = problems(tree, facts_128)
    assert any(ln.startswith("rtx4090: -:") and "pixi.toml changed" in ln and "[stale-lock]" in ln for ln in lines), lines
    assert not any(ln.startswith("cpu:") and "[stale-lock]" in ln for ln in lines), lines  # cpu's share is unchanged


def test_manifest_pin_edit_is_unsatisfied_and_stale(tree, facts_128):
    path = tree / "pixi.toml"
    path.write_text(path.read_text().replace('cuda-nvcc = "*"', 'cuda-nvcc = "12.9.*"'))
    lines = problems(tree, facts_128)
    assert any("[spec-unsatisfied]" in ln and "cuda-nvcc 12.9.*" in ln for ln in lines), lines
    assert any("[stale-lock]" in ln for ln in lines), lines


def test_matrix_edit_makes_lock_stale(tree, facts_128):
    path = tree / "conda_build_config.yaml"
    path.write_text(path.read_text().replace('  - "2.7"', '  - "2.8"'))
    lines = problems(tree, facts_128)
    assert any("conda_build_config.yaml changed" in ln for ln in lines), lines


def test_unconfigured_channel_fails(tree, facts_128):
    lines = problems(tree, facts_128, channels=[FIXTURE.as_uri()])  # the mmcv channel left out
    assert any(ln.startswith("rtx4090: mmcv:") and "[unknown-channel]" in ln for ln in lines), lines


def test_missing_sha256_fails(tree, facts_128):
    lock = tree / "pixi.lock"
    text = lock.read_text()
    m = re.search(r"(- conda: \S+/python-3\.11\.0-\S+\n(?:  .*\n)*?)(  sha256: [0-9a-f]{64}\n)", text)
    lock.write_text(text.replace(m.group(0), m.group(1)))
    lines = problems(tree, facts_128)
    assert any("python:" in ln and "[missing-sha256]" in ln for ln in lines), lines


def test_pypi_torch_next_to_conda_mmcv_fails(tree, facts_128):
    lock = tree / "pixi.lock"
    text = lock.read_text()
    s, e = _env_block(text, "rtx4090")
    wheel = "https://files.pythonhosted.org/packages/xx/torch-2.7.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    block = text[s:e].rstrip("\n") + f"\n      - pypi: {wheel}\n"
    text = text[:s] + block + text[e:]
    text += f"- pypi: {wheel}\n  name: torch\n  version: 2.7.1\n"
    lock.write_text(text)
    lines = problems(tree, facts_128)
    assert any(ln.startswith("rtx4090: torch:") and "[pypi-torch]" in ln for ln in lines), lines


def test_missing_lock(tree, facts_128, capsys):
    (tree / "pixi.lock").unlink()
    assert run_lock_check(root=tree, facts=facts_128, require_lock=True) == 1
    assert "no pixi.lock (--require-lock) [missing-lock] (fix: mmstack lock)" in capsys.readouterr().out
    assert run_lock_check(root=tree, facts=facts_128) == 0


def test_malformed_lock_is_bad_input(tree, facts_128):
    from mmstack.errors import BadInput

    (tree / "pixi.lock").write_text("version: 7\nenvironments: [not, a, mapping\n")
    with pytest.raises(BadInput) as exc:
        collect_problems(root=tree, facts=facts_128)
    assert exc.value.exit_code == 2 and "pixi.lock" in exc.value.one_line()


def test_malformed_conda_lock_is_bad_input(tree, facts_128):
    from mmstack.errors import BadInput

    (tree / "envs" / "cpu.conda-lock.yml").write_text("version: 1\nmetadata: {}\npackage: []\n")
    with pytest.raises(BadInput) as exc:
        collect_problems(root=tree, facts=facts_128)
    assert "cpu.conda-lock.yml" in exc.value.one_line() and "content_hash" in exc.value.one_line()


def test_failed_solve_writes_nothing(tree, facts_128, capsys):
    from mmstack.errors import CheckFailed

    before = {p: p.read_bytes() for p in [tree / "pixi.lock", *sorted((tree / "envs").iterdir())]}
    path = tree / "pixi.toml"
    path.write_text(path.read_text().replace('cuda-nvcc = "*"', 'cuda-nvcc = "99.*"'))
    with pytest.raises(CheckFailed) as exc:
        run_lock(root=tree, facts=facts_128)
    assert "rtx4090: cannot solve" in exc.value.message and "cuda-nvcc" in exc.value.message
    assert {p: p.read_bytes() for p in before} == before
    assert not [p for p in (tree / "envs").iterdir() if p.name.endswith(".tmp")]


def test_cli_exit_codes(tree, facts_128, monkeypatch):
    # The CLI uses the packaged facts; point the facts loader at the narrowed ones.
    monkeypatch.setattr("mmstack.envs.lock.load_facts", lambda: facts_128)
    assert main(["lock", "check", "--root", str(tree)]) == 0
    (tree / "pixi.lock").write_text("garbage: [\n")
    assert main(["lock", "check", "--root", str(tree)]) == 2
