"""The facts file: strict schema, a source on every row, and figures that hold together."""

import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mmstack.errors import BadInput
from mmstack.facts import gpus as facts

DATA = Path(facts.__file__).parents[1] / "data" / facts.FACTS_FILE


def test_packaged_facts_load():
    f = facts.load()
    assert set(f.envs) == {"cpu", "rtx3090", "a100", "rtx4090", "h100", "b200", "rtx5090"}


def test_every_row_has_a_source():
    f = facts.load()
    for row in (*f.gpu, *f.generation, *f.cuda_major, *f.architecture):
        assert row.source.startswith("https://")
    for tk in f.cuda:
        assert tk.sources and all(s.startswith("https://") for s in tk.sources)


@pytest.mark.parametrize(
    "name, cc, env",
    [
        ("RTX 3090", "8.6", "rtx3090"), ("RTX 3080", "8.6", "rtx3090"), ("A6000", "8.6", "rtx3090"),
        ("A40", "8.6", "rtx3090"), ("A100", "8.0", "a100"), ("A30", "8.0", "a100"),
        ("RTX 4090", "8.9", "rtx4090"), ("L40S", "8.9", "rtx4090"), ("L4", "8.9", "rtx4090"),
        ("RTX 6000 Ada", "8.9", "rtx4090"), ("H100", "9.0", "h100"), ("NVIDIA H200", "9.0", "h100"),
        ("GH200", "9.0", "h100"), ("B200", "10.0", "b200"), ("GB200", "10.0", "b200"),
        ("RTX 5090", "12.0", "rtx5090"), ("geforce rtx 5080", "12.0", "rtx5090"),
        ("RTX PRO 6000 Blackwell", "12.0", "rtx5090"), ("T4", "7.5", ""), ("RTX 2080", "7.5", ""),
        # as nvidia-smi / NVML print them
        ("NVIDIA A100-SXM4-80GB", "8.0", "a100"), ("NVIDIA H100 80GB HBM3", "9.0", "h100"),
        ("Tesla V100-SXM2-16GB", "7.0", ""), ("NVIDIA GeForce RTX 3060 Laptop GPU", "8.6", "rtx3090"),
        ("NVIDIA GeForce RTX 4090 Laptop GPU", "8.9", "rtx4090"), ("Tesla P100-PCIE-16GB", "6.0", ""),
        ("NVIDIA RTX A5500 Laptop GPU", "8.6", "rtx3090"), ("NVIDIA GeForce GTX 1080 Ti", "6.1", ""),
        ("NVIDIA RTX 6000 Ada Generation", "8.9", "rtx4090"), ("Quadro RTX 8000", "7.5", ""),
        # China-market and cloud parts (same chip as a listed product)
        ("NVIDIA H800", "9.0", "h100"), ("NVIDIA H20", "9.0", "h100"), ("NVIDIA A800-SXM4-80GB", "8.0", "a100"),
        ("NVIDIA L20", "8.9", "rtx4090"), ("NVIDIA GeForce RTX 4090 D", "8.9", "rtx4090"), ("NVIDIA A10G", "8.6", "rtx3090"),
        ("GeForce RTX 5090 D", "12.0", "rtx5090"),
        # Jetson: no linux-64 environment serves it
        ("Jetson AGX Orin", "8.7", ""), ("Jetson Nano", "5.3", ""), ("Jetson T5000", "11.0", ""),
        ("NVIDIA B300", "10.3", ""), ("NVIDIA GB10", "12.1", ""),
    ],
)
def test_gpu_lookup(name, cc, env):
    gpu = facts.load().find_gpu(name)
    assert (gpu.compute_capability, gpu.generation) == (cc, env)


def test_unknown_gpu_did_you_mean():
    with pytest.raises(BadInput, match="did you mean 'RTX 5090'"):
        facts.load().find_gpu("RTX 5900")


# Names real systems print (issue 23): nvidia-smi on JetPack 6, deviceQuery on a Jetson Nano, NVML on a GH200,
# vGPU guests (profile = frame buffer GB + series letter) and MIG instances map to the physical GPU's row.
@pytest.mark.parametrize("printed, row, cc", [
    ("Orin (nvgpu)", "Orin (nvgpu)", "8.7"), ("Orin", "Orin (nvgpu)", "8.7"),
    ("NVIDIA Tegra X1", "NVIDIA Tegra X1", "5.3"), ("NVIDIA GH200 144G HBM3e", "NVIDIA GH200", "9.0"),
    ("NVIDIA GH200 480GB", "NVIDIA GH200", "9.0"),
    ("NVIDIA A10-24Q", "NVIDIA A10", "8.6"), ("NVIDIA A10-6Q", "NVIDIA A10", "8.6"), ("GRID A100-40C", "NVIDIA A100", "8.0"),
    ("GRID A100-4-20C", "NVIDIA A100", "8.0"), ("GRID T4-16Q", "NVIDIA T4", "7.5"), ("GRID P4-8C", "Tesla P4", "6.1"),
    ("NVIDIA L40S-48Q", "NVIDIA L40S", "8.9"),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA A100", "8.0"), ("NVIDIA A100 80GB PCIe MIG 1c.3g.40gb", "NVIDIA A100", "8.0"),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "NVIDIA H100", "9.0"), ("NVIDIA GB200 MIG 1g.24gb+me", "NVIDIA GB200", "10.0"),
    ("Tesla K80", "Tesla K80", "3.7"), ("GeForce GTX 780", "GeForce GTX 780", "3.5"), ("Tesla K40m", "Tesla K40", "3.5"),
    ("GeForce GTX 580", "GeForce GTX 580", "2.0"), ("NVIDIA Tegra K1", "Jetson TK1", "3.2"),
])
def test_names_real_systems_print(printed, row, cc):
    gpu = facts.load().find_gpu(printed)
    assert (gpu.name, gpu.compute_capability) == (row, cc)


def test_a_mig_or_vgpu_suffix_does_not_invent_a_gpu():
    f = facts.load()
    for name in ("NVIDIA A7-24Q", "GRID Z100-40C", "NVIDIA X100-SXM4-40GB MIG 1g.5gb"):
        assert f.lookup_gpu(name) is None, name


# Names the facts lack, with their real compute capability (the chip's): a did-you-mean names its own
# compute capability, and says it is another GPU whenever its model differs, since the figure may differ.
@pytest.mark.parametrize("name, real_cc", [
    ("Quadro K2000", "3.0"), ("GeForce GT 640", "3.0"), ("GeForce GTX 745", "5.0"), ("GeForce GTX 960A", "5.0"),
    ("Tesla K520", "3.0"), ("NVIDIA Tegra X2", "6.2"), ("GeForce GTX 860M", "5.0"), ("Quadro K1100M", "3.0"),
    ("Quadro M3000 SE", "5.2"), ("GeForce GTX 675MX", "3.0"), ("RTX 5900", "12.0"), ("Gefroce RTX 3090", "8.6"),
])
def test_did_you_mean_is_honest_about_compute_capability(name, real_cc):
    f = facts.load()
    with pytest.raises(BadInput) as err:
        f.find_gpu(name)
    msg = str(err.value)
    m = re.search(r"did you mean '([^']+)' \(compute capability ([\d.]+)\)", msg)
    if m is None:
        assert "did you mean" not in msg
        return
    assert f.find_gpu(m.group(1)).compute_capability == m.group(2)
    assert m.group(2) == real_cc or "another GPU" in msg, msg


def test_a_misspelling_is_not_called_another_gpu():
    with pytest.raises(BadInput) as err:
        facts.load().find_gpu("Gefroce RTX 3090")
    assert "did you mean 'GeForce RTX 3090' (compute capability 8.6)?" in str(err.value)
    assert "another GPU" not in str(err.value)


def test_every_generation_is_buildable_by_its_cuda_and_first_cuda_is_right():
    f = facts.load()
    for gen in f.generation:
        if not gen.is_gpu:
            continue
        assert gen.compute_capability in f.toolkit(gen.cuda).sass
        assert f.first_cuda(gen.compute_capability) == gen.first_cuda
        first = f.first_toolkit_for(gen.compute_capability)
        if facts.version_key(gen.first_cuda) >= (10, 2):  # the toolkit rows start at 10.2
            assert first.version == gen.first_cuda


# First CUDA per architecture, from each toolkit's release notes (and Wikipedia's table before 10.2).
@pytest.mark.parametrize("gpu, first", [
    ("GeForce GTX 750 Ti", "6.0"), ("GeForce GTX 980", "6.5"), ("GeForce GTX 1080", "8.0"), ("NVIDIA V100", "9.0"),
    ("NVIDIA T4", "10.0"), ("NVIDIA A100", "11.0"), ("GeForce RTX 3090", "11.1"), ("Jetson AGX Orin", "11.5"),
    ("GeForce RTX 4090", "11.8"), ("NVIDIA H100", "11.8"), ("NVIDIA B200", "12.8"), ("NVIDIA B300", "12.9"),
    ("GeForce RTX 5090", "12.8"), ("NVIDIA GB10", "12.9"), ("Jetson T5000", "13.0"),
])
def test_first_cuda(gpu, first):
    f = facts.load()
    assert f.first_cuda(f.find_gpu(gpu).compute_capability) == first


def test_toolkits_10_2_to_13_5_without_12_7():
    versions = [t.version for t in sorted(facts.load().cuda, key=lambda t: t.key)]
    assert versions == ["10.2", "11.0", "11.1", "11.2", "11.3", "11.4", "11.5", "11.6", "11.7", "11.8", "12.0", "12.1",
                        "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9", "13.0", "13.1", "13.2", "13.3", "13.4",
                        "13.5"]


# What each toolkit added, dropped and deprecated (release notes; the 11.0-11.5 nvcc warning names
# compute_35/37/50, 11.6-11.8 compute_35/37; 12.8 and 12.9 deprecate offline compilation before sm_75; 13.0 removes it).
@pytest.mark.parametrize("version, added, dropped, deprecated", [
    ("11.0", ("8.0",), ("3.0", "3.2"), ("3.5", "3.7", "5.0")),
    ("11.1", ("8.6",), (), ("3.5", "3.7", "5.0")),
    ("11.8", ("8.9", "9.0"), (), ("3.5", "3.7")),  # nvcc 11.8.89 warns for sm_35/sm_37 only (issue 40)
    ("12.0", (), ("3.5", "3.7"), ()),
    ("12.8", ("10.0", "10.1", "12.0"), (), ("5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2")),  # as 12.9
    ("12.9", ("10.3", "12.1"), (), ("5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2")),
    ("13.0", ("8.8", "11.0"), ("5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "10.1"), ()),
    ("13.2", (), (), ()),
    ("13.3", (), (), ()),
    ("13.4", ("10.7",), (), ()),
    ("13.5", (), (), ()),
])
def test_toolkit_changes(version, added, dropped, deprecated):
    c = facts.load().changes(version)
    assert (c.added, c.dropped, c.deprecated) == (added, dropped, deprecated)


def test_newer_minor_is_answered_by_newest_row_and_12_7_is_bad_input():
    f = facts.load()
    assert f.resolve_toolkit("13.5") == (f.toolkit("13.5"), "")
    tk, note = f.resolve_toolkit("13.9")
    assert tk.version == "13.5" and "13.9" in note
    assert f.resolve_toolkit("12.9") == (f.toolkit("12.9"), "")
    with pytest.raises(BadInput, match=r"12\.7"):
        f.resolve_toolkit("12.7")


# -- cross-checks against what was read from NVIDIA (tests/data/facts/) ---------------------------

FIXTURES = Path(__file__).parent / "data" / "facts"


def _lines(name: str) -> list[list[str]]:
    text = (FIXTURES / name).read_text()
    return [[p.strip() for p in ln.split("|")] for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def test_every_gpu_on_nvidias_lists_is_known_with_its_compute_capability():
    """NVIDIA's figure, except where the row's chip says otherwise (then the row records the list's figure)."""
    f = facts.load()
    rows = _lines("cuda-gpus.txt")
    assert len(rows) > 100
    overruled = []
    for cc, name in rows:
        gpu = f.lookup_gpu(name)
        assert gpu is not None, f"{name} ({cc}) from NVIDIA's list is not in gpus.toml"
        if gpu.nvidia_list_says:
            assert gpu.nvidia_list_says == cc != gpu.compute_capability, name
            overruled.append(gpu.name)
        else:
            assert gpu.compute_capability == cc, name
    assert sorted(overruled) == sorted(g.name for g in f.gpu if g.nvidia_list_says)


# -- chips: a GPU's compute capability is its chip's ------------------------------------------------


def test_every_rows_compute_capability_is_its_chips():
    f = facts.load()
    chips = {c.name: c for c in f.chip}
    assert len(chips) == len(f.chip) >= 50
    for gpu in f.gpu:
        assert chips[gpu.chip].compute_capability == gpu.compute_capability, (gpu.name, gpu.chip)
        if gpu.same_chip_as:
            assert f.find_gpu(gpu.same_chip_as).chip == gpu.chip, gpu.name
    assert all(c.source.startswith("https://") for c in f.chip)


# The five rows NVIDIA's legacy list gets wrong (issue 23): the chip decides.
@pytest.mark.parametrize("name, chip, cc, listed", [
    ("Quadro M5000M", "GM204", "5.2", "5.0"), ("Quadro M4000M", "GM204", "5.2", "5.0"),
    ("Quadro M3000M", "GM204", "5.2", "5.0"), ("Quadro M620", "GM107", "5.0", "5.2"),
    ("GeForce 910M", "GK208B", "3.5", "5.2"),
])
def test_rows_nvidias_list_gets_wrong_follow_their_chip(name, chip, cc, listed):
    gpu = facts.load().find_gpu(name)
    assert (gpu.chip, gpu.compute_capability, gpu.nvidia_list_says) == (chip, cc, listed)


def test_a_row_whose_chip_disagrees_is_refused(tmp_path):
    text = DATA.read_text()
    assert 'name = "Quadro M620"\ncompute_capability = "5.0"' in text
    wrong = text.replace('name = "Quadro M620"\ncompute_capability = "5.0"', 'name = "Quadro M620"\ncompute_capability = "5.2"')
    with pytest.raises(BadInput, match=r"gpu\.\d+\.compute_capability: Quadro M620 says 5\.2 but its chip GM107 is 5\.0"):
        facts.load_file(_write(tmp_path, wrong))
    unknown_chip = text.replace('chip = "GM107"', 'chip = "GM999"', 1)
    with pytest.raises(BadInput, match=r"chip: 'GM999'"):
        facts.load_file(_write(tmp_path, unknown_chip))


@pytest.mark.parametrize("cc, last", [
    ("2.0", "8.0"), ("2.1", "8.0"), ("3.0", "10.2"), ("3.2", "10.2"), ("3.5", "11.8"), ("3.7", "11.8"),
    ("5.0", "12.9"), ("7.2", "12.9"), ("7.5", None), ("12.0", None),
])
def test_last_cuda(cc, last):
    """Derived from the toolkit rows (dropped after the last row that lists it); Fermi's from its row."""
    f = facts.load()
    assert f.last_cuda(cc) == last
    if last and facts.version_key(last) >= (10, 2):
        assert cc in f.toolkit(last).sass
        assert all(cc not in t.sass for t in f.cuda if t.key > facts.version_key(last))


def test_laptop_and_variant_parts_from_nvidias_driver_readme_have_their_own_rows():
    f = facts.load()
    rows = _lines("nvidia-driver-readme-gpus.txt")
    assert len(rows) >= 14
    for _pci_ids, name in rows:
        gpu = f.lookup_gpu(name)
        assert gpu is not None and gpu.name == name, name
        assert gpu.same_chip_as and gpu.source.startswith("https://github.com/NVIDIA/open-gpu-kernel-modules"), name
        assert ("Laptop" in name) == (gpu.segment == "laptop"), name
    # the name misleads: an Ada chip, not the Ampere RTX 3050's
    assert f.lookup_gpu("NVIDIA GeForce RTX 3050 A Laptop GPU").compute_capability == "8.9"
    assert f.lookup_gpu("NVIDIA GeForce RTX 3050 Laptop GPU").compute_capability == "8.6"


def test_driver_floors_equal_nvidias_table():
    table = {name: driver for name, driver in _lines("cuda-driver-table.txt")}
    unknown = []
    for tk in facts.load().cuda:
        if tk.driver is None:  # "unknown" only where the table has no line for the toolkit
            assert not any(name.startswith(f"CUDA {tk.version} ") for name in table), tk.version
            unknown.append(tk.version)
        else:
            assert table[f"CUDA {tk.version} GA"] == tk.min_driver, tk.version
    assert unknown == ["13.4", "13.5"]
    assert facts.load().minor_compat_driver(11) == "450.80.02"


def _sm_list(text: str) -> set[str]:
    return {f"{int(t[3:-1])}.{t[-1]}" for t in text.split() if t.startswith("sm_")}


def test_cuda_13_0_matches_recorded_nvcc_list():
    recorded = _sm_list(" ".join(ln for ln in (FIXTURES / "nvcc-13.0-list-gpu-arch.txt").read_text().splitlines()
                                if not ln.startswith("#")))
    assert recorded == set(facts.load().toolkit("13.0").sass)


def _wheel_reads() -> dict[str, dict[str, list[str]]]:
    reads: dict[str, dict[str, list[str]]] = {}
    for version, what, values in _lines("nvcc-wheels.txt"):
        reads.setdefault(version, {})[what] = values.split()
    return reads


def test_toolkits_match_what_their_nvcc_wheels_say():
    """11.7, 12.9 and 13.1..13.5 as read from NVIDIA's own nvcc/crt wheels (tests/data/facts/nvcc-wheels.txt)."""
    f = facts.load()
    known = {t.version for t in f.cuda}
    reads = _wheel_reads()
    assert {"11.7", "12.9", "13.1", "13.2", "13.3", "13.4", "13.5"} <= known & set(reads)
    for version, read in reads.items():
        if version not in known:
            continue
        tk = f.toolkit(version)
        if "list-gpu-code" in read:
            assert _sm_list(" ".join(read["list-gpu-code"])) == set(tk.sass), version
        targets = {f"{int(t[3:].rstrip('af')) // 10}.{int(t[3:].rstrip('af')) % 10}{t[-1] if t[-1] in 'af' else ''}"
                   for t in read["ptxas"]}
        assert targets == set(tk.sass) | set(tk.arch_specific), version
        assert int(read["max_gcc"][0]) == tk.max_gcc, version
        if "deprecated" in read:
            assert _sm_list(" ".join(read["deprecated"])) == set(tk.deprecated), version


def test_every_toolkit_read_from_its_wheel_has_a_row():
    """13.4/13.5 have rows although their GA driver could not be read ("unknown")."""
    f = facts.load()
    for version in _wheel_reads():
        assert f.resolve_toolkit(version) == (f.toolkit(version), ""), version


def test_minor_releases_never_dropped_an_arch():
    """What resolve_toolkit relies on when asked about a release newer than the newest row of its major."""
    ordered = sorted(facts.load().cuda, key=lambda t: t.key)
    for older, newer in itertools.pairwise(ordered):
        if older.major == newer.major:
            assert set(older.sass) <= set(newer.sass), newer.version


def test_cuda_matches_this_machines_nvcc():
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    version = re.search(r"release (\d+\.\d+)", subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout)
    f = facts.load()
    if version is None or version.group(1) not in {t.version for t in f.cuda}:
        pytest.skip(f"nvcc {version and version.group(1)} is not a toolkit row of the facts")
    out = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True)
    assert _sm_list(out.stdout) == set(f.toolkit(version.group(1)).sass)
    virtual = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True).stdout
    assert {f"{int(t[8:-1])}.{t[-1]}" for t in virtual.split() if t.startswith("compute_")} == set(f.toolkit(version.group(1)).sass)


def test_same_chip_rows_agree_and_aliases_are_unique():
    f = facts.load()
    names = {}
    for g in f.gpu:
        if g.same_chip_as:
            assert f.find_gpu(g.same_chip_as).compute_capability == g.compute_capability
        for n in (g.name, *g.aliases):
            assert names.setdefault(facts._norm(n), g.name) == g.name


def test_coverage_of_nvidias_lists():
    f = facts.load()
    assert len(f.gpu) >= 200
    ccs = {g.compute_capability for g in f.gpu}
    assert {"2.0", "2.1", "3.0", "3.2", "3.5", "3.7", "5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5",
            "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"} == ccs
    assert {g.segment for g in f.gpu} == set(facts.SEGMENTS)


def test_cuda13_dropped_maxwell_pascal_volta_and_blackwell_needs_128():
    f = facts.load()
    assert not {"5.0", "6.0", "6.1", "7.0", "7.2"} & set(f.toolkit("13.0").sass)
    assert f.first_toolkit_for("12.0").version == "12.8"
    assert f.first_toolkit_for("10.0").version == "12.8"
    assert "12.7" not in {t.version for t in f.cuda}  # there was never a CUDA 12.7


def test_driver_floors_rise_with_the_toolkit():
    f = facts.load()
    ordered = sorted((t for t in f.cuda if t.driver), key=lambda t: t.key)
    drivers = [facts.version_key(t.min_driver) for t in ordered]
    assert drivers == sorted(drivers)
    for t in ordered:  # minor-version compatibility floor is at or below each toolkit's own
        floor = f.minor_compat_driver(t.major)
        if t.major < 11:  # minor-version compatibility began with CUDA 11
            assert floor is None
        elif t.version == "11.0":  # "CUDA 11.0 was released with an earlier driver" (release notes, table 2 note)
            assert facts.version_key(floor) > facts.version_key(t.min_driver)
        else:
            assert floor and facts.version_key(floor) <= facts.version_key(t.min_driver)


def _write(tmp_path, text):
    p = tmp_path / "gpus.toml"
    p.write_text(text)
    return p


def test_unknown_field_fails(tmp_path):
    text = DATA.read_text().replace('segment = "datacenter"', 'segment = "datacenter"\nboost_clock = 1590', 1)
    with pytest.raises(BadInput, match=r"gpu\.0\.boost_clock"):
        facts.load_file(_write(tmp_path, text))


def test_derived_fields_are_refused(tmp_path):
    text = DATA.read_text().replace('segment = "datacenter"', 'segment = "datacenter"\ngeneration = "h100"', 1)
    with pytest.raises(BadInput, match=r"gpu\.0\.generation: derived"):
        facts.load_file(_write(tmp_path, text))


def test_same_chip_mismatch_and_alias_clash_fail(tmp_path):
    text = DATA.read_text().replace('same_chip_as = "NVIDIA H100"', 'same_chip_as = "NVIDIA A100"', 1)
    with pytest.raises(BadInput, match="same_chip_as"):
        facts.load_file(_write(tmp_path, text))
    # same compute capability, another chip: still refused
    text = DATA.read_text().replace('same_chip_as = "NVIDIA A2"', 'same_chip_as = "GeForce RTX 3090"', 1)
    with pytest.raises(BadInput, match="same_chip_as"):
        facts.load_file(_write(tmp_path, text))
    text = DATA.read_text().replace('aliases = ["L4"]', 'aliases = ["L4", "H100"]', 1)
    with pytest.raises(BadInput, match="also names"):
        facts.load_file(_write(tmp_path, text))


def test_missing_source_fails(tmp_path):
    text = DATA.read_text().replace('source = "https://developer.nvidia.com/cuda-gpus"\n', "", 1)
    with pytest.raises(BadInput, match="source"):
        facts.load_file(_write(tmp_path, text))


def test_malformed_toml_names_the_file(tmp_path):
    with pytest.raises(BadInput, match=r"gpus\.toml"):
        facts.load_file(_write(tmp_path, "[[gpu]\nname="))


# issue 22 item 7: hints that misled ("RTX 4900" -> "RTX A400", "nope" -> "Nano", --cuda 9.0 -> "13.0")
@pytest.mark.parametrize("name, meant", [("RTX 4900", "RTX 4090"), ("GTX 1008", "GTX 1080"), ("RTX 5900", "RTX 5090")])
def test_two_swapped_digits_of_a_model_number_suggest_that_model(name, meant):
    with pytest.raises(BadInput) as err:
        facts.load().find_gpu(name)
    msg = str(err.value)
    assert f"did you mean '{meant}'" in msg and "another GPU" not in msg, msg


@pytest.mark.parametrize("name", ["nope", "banana", "my gpu"])
def test_a_name_with_no_model_number_gets_no_far_fetched_suggestion(name):
    with pytest.raises(BadInput) as err:
        facts.load().find_gpu(name)
    assert "did you mean" not in str(err.value), str(err.value)


@pytest.mark.parametrize("version, words", [
    ("9.0", "CUDA 9.0 is older than every toolkit in the facts (the oldest is 10.2)"),
    ("14.0", "CUDA 14.0 is newer than every toolkit in the facts (the newest is 13.5)"),
    ("12.7", "did you mean '12.6'?"),
    ("twelve", "unknown CUDA version 'twelve'"),
])
def test_an_unknown_cuda_version_is_placed_against_the_known_ones(version, words):
    with pytest.raises(BadInput) as err:
        facts.load().toolkit(version)
    assert words in str(err.value), str(err.value)
    assert "did you mean '13.0'" not in str(err.value)


# Issue 40 item 6: names that were unknown or on the wrong chip.
@pytest.mark.parametrize("name, known_as, chip, cc", [
    ("GRID A100D-80C", "NVIDIA A100", "GA100", "8.0"),  # vGPU types with a board suffix
    ("GRID A100DX-80C", "NVIDIA A100", "GA100", "8.0"),
    ("NVIDIA H100XM-80C", "NVIDIA H100", "GH100", "9.0"),
    ("GRID H100L-94C", "NVIDIA H100", "GH100", "9.0"),
    ("NVIDIA H200X-141C", "NVIDIA H200", "GH100", "9.0"),
    ("NVIDIA H20-3e", "NVIDIA H20", "GH100", "9.0"),
    ("NVIDIA H20 141GB HBM3e", "NVIDIA H20", "GH100", "9.0"),
    ("B100", "NVIDIA B100", "GB100", "10.0"),  # did-you-mean sent it to V100 (7.0)
    ("NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 4090 Laptop GPU", "AD103", "8.9"),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", "GeForce RTX 4070 Ti SUPER", "AD103", "8.9"),
    ("GeForce RTX 4070 Ti", "GeForce RTX 4070 Ti", "AD104", "8.9"),
    ("GeForce RTX 4090", "GeForce RTX 4090", "AD102", "8.9"),
])
def test_names_issue_40(name, known_as, chip, cc):
    gpu = facts.load().find_gpu(name)
    assert (gpu.name, gpu.chip, gpu.compute_capability) == (known_as, chip, cc)


def test_a_board_suffix_is_stripped_only_from_a_vgpu_profile():
    f = facts.load()
    assert f.lookup_gpu("NVIDIA A100D") is None  # not a vGPU type name: no guessing


def test_arm_hosts_and_tegra_carry_sources():
    f = facts.load()
    arm = {g.name for g in f.gpu if g.host == "linux-aarch64"}
    assert {"NVIDIA GH200", "NVIDIA GB200", "NVIDIA GB300", "NVIDIA GB10"} <= arm
    assert all(g.host_source for g in f.gpu if g.host) and all(g.host for g in f.gpu if g.segment == "jetson")
    assert {g.platform for g in f.generation} == {"linux-64"}


def test_generation_platforms_are_pixi_s():
    """[[generation]] platform is the subdir of the pixi platform its environment's feature pins (pixi.toml)."""
    import tomllib

    manifest = tomllib.loads((Path(__file__).parents[1] / "pixi.toml").read_text())
    subdir = {p["name"]: p["platform"] for p in manifest["workspace"]["platforms"] if isinstance(p, dict)}
    for gen in facts.load().generation:
        if gen.is_gpu:
            (plat,) = manifest["feature"][f"gen-{gen.env}"]["platforms"]
            assert subdir[plat] == gen.platform, gen.env


def test_a_toolkit_family_must_name_its_own_archs(tmp_path):
    text = DATA.read_text()
    bad = text.replace('families = [["10.0", "10.3"], ["10.1"], ["12.0", "12.1"]]', 'families = [["10.0", "10.3"], ["12.0", "12.1"]]', 1)
    assert bad != text
    with pytest.raises(BadInput, match=r"10\.1f in no family"):
        facts.load_file(_write(tmp_path, bad))
    unsourced = text.replace('tegra_source = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#binary-compatibility"\n', "", 1)
    with pytest.raises(BadInput, match="tegra"):
        facts.load_file(_write(tmp_path, unsourced))


def test_deprecations_equal_what_the_measured_nvcc_printed():
    """Where a wheel carries nvcc (13.x), tests/data/facts/ptxas-matrix.json records the targets its
    `nvcc -arch=sm_XY --dryrun -c` warned deprecated; the facts say the same."""
    import json

    matrix = json.loads((Path(__file__).parent / "data" / "facts" / "ptxas-matrix.json").read_text())
    f = facts.load()
    measured = {v: row["nvcc_deprecated"] for v, row in matrix["toolkits"].items() if row["nvcc_deprecated"] is not None}
    assert {"13.0", "13.5"} <= set(measured)
    for version, warned in measured.items():
        assert {f"{t[3:-1]}.{t[-1]}" for t in warned} == set(f.toolkit(version).deprecated), version
    assert all(tk.deprecated_source for tk in f.cuda if tk.deprecated)
