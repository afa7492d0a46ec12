"""The facts file: strict schema, a source on every row, and figures that hold together."""

from pathlib import Path

import pytest

from mmstack import arch, facts
from mmstack.errors import BadInput

DATA = Path(facts.__file__).parent / "data" / facts.FACTS_FILE


def test_packaged_facts_load():
    f = facts.load()
    assert set(f.envs) == {"cpu", "rtx3090", "a100", "rtx4090", "h100", "b200", "rtx5090"}


def test_every_row_has_a_source():
    f = facts.load()
    for row in (*f.gpu, *f.generation, *f.cuda_major):
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
    ],
)
def test_gpu_lookup(name, cc, env):
    gpu = facts.load().find_gpu(name)
    assert (gpu.compute_capability, gpu.generation) == (cc, env)


def test_unknown_gpu_did_you_mean():
    with pytest.raises(BadInput, match="did you mean 'RTX 5090'"):
        facts.load().find_gpu("RTX 5900")


def test_every_generation_is_buildable_by_its_cuda_and_first_cuda_is_right():
    f = facts.load()
    for gen in f.generation:
        if not gen.is_gpu:
            continue
        assert gen.compute_capability in f.toolkit(gen.cuda).sass
        first = f.first_toolkit_for(gen.compute_capability)
        # the facts' first_cuda predates 11.8 for Ampere; the known toolkits start at 11.8
        assert arch.parse_arch(gen.compute_capability) and first is not None
        if facts.version_key(gen.first_cuda) >= (11, 8):
            assert first.version == gen.first_cuda


def test_cuda13_dropped_maxwell_pascal_volta_and_blackwell_needs_128():
    f = facts.load()
    assert not {"5.0", "6.0", "6.1", "7.0", "7.2"} & set(f.toolkit("13.0").sass)
    assert f.first_toolkit_for("12.0").version == "12.8"
    assert f.first_toolkit_for("10.0").version == "12.8"
    assert "12.7" not in {t.version for t in f.cuda}  # there was never a CUDA 12.7


def test_driver_floors_rise_with_the_toolkit():
    f = facts.load()
    ordered = sorted(f.cuda, key=lambda t: t.key)
    drivers = [facts.version_key(t.min_driver) for t in ordered]
    assert drivers == sorted(drivers)
    for t in ordered:  # minor-version compatibility floor is at or below each toolkit's own
        floor = f.minor_compat_driver(t.major)
        assert floor and facts.version_key(floor) <= facts.version_key(t.min_driver)


def _write(tmp_path, text):
    p = tmp_path / "gpus.toml"
    p.write_text(text)
    return p


def test_unknown_field_fails(tmp_path):
    text = DATA.read_text().replace('architecture = "Turing"', 'architecture = "Turing"\nboost_clock = 1590', 1)
    with pytest.raises(BadInput, match=r"gpu\.0\.boost_clock"):
        facts.load_file(_write(tmp_path, text))


def test_missing_source_fails(tmp_path):
    text = DATA.read_text().replace('source = "https://developer.nvidia.com/cuda-gpus"\n', "", 1)
    with pytest.raises(BadInput, match="source"):
        facts.load_file(_write(tmp_path, text))


def test_malformed_toml_names_the_file(tmp_path):
    with pytest.raises(BadInput, match="gpus.toml"):
        facts.load_file(_write(tmp_path, "[[gpu]\nname="))
