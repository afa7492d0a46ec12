"""src/mmstack/data/pytorch.toml: conda-forge's pytorch pin and migration target (issue 42 item 2),
and the matrix's rows checked against them (variants/pytorch_rows.py, `mmstack matrix`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmstack.facts.pytorch import PytorchFacts, load_pytorch
from mmstack.variants import pytorch_rows

pytest.importorskip("rattler_build", reason="py-rattler-build is the 'build' extra")

from support.cli import mmstack

from mmstack.facts.gpus import load
from mmstack.variants import matrix as variants
from mmstack.variants.ci_cost import release_cost

ROOT = Path(__file__).resolve().parents[1]


def test_one_pin_and_one_migration_target_each_with_a_source():
    facts = load_pytorch()
    assert {r.role: r.version for r in facts.pytorch} == {"pin": "2.12", "migration": "2.13"}
    for row in facts.pytorch:
        assert row.source.startswith("https://github.com/conda-forge/")
        assert row.pythons == ("3.10", "3.11", "3.12", "3.13", "3.14")
    assert facts.label("2.12") == "2.12 (conda-forge's pin)"
    assert facts.label("2.9") == "2.9"


def test_a_second_pin_or_an_unknown_field_does_not_load():
    row = {"version": "2.12", "role": "pin", "pythons": ["3.12"], "source": "https://example.org/x"}
    with pytest.raises(ValueError, match="one row per role"):
        PytorchFacts.model_validate({"pytorch": [row, {**row, "version": "2.11"}]}, strict=False)
    with pytest.raises(ValueError, match="Extra inputs"):
        PytorchFacts.model_validate({"pytorch": [{**row, "typo": 1}]}, strict=False)


def test_the_repo_matrix_builds_only_what_conda_forge_builds():
    m = variants.load_matrix(load(), ROOT / variants.CONFIG_FILE)
    assert pytorch_rows.problems(m, load_pytorch()) == []
    assert {v.pytorch for v in m} == {"2.12", "2.13"}


def test_a_row_conda_forge_does_not_build_is_named():
    m = variants.load_matrix(load(), ROOT / variants.CONFIG_FILE)
    cpu = next(v for v in m if v.cuda is None and v.pytorch == "2.13")
    facts = PytorchFacts.model_validate({"pytorch": [
        {"version": "2.13", "role": "migration", "pythons": ["3.11"], "source": "https://example.org/a"}]}, strict=False)
    wrong = pytorch_rows.problems([cpu, variants.Variant("3.14", "2.13", None, "none", "cpu"),
                                   variants.Variant("3.11", "2.9", None, "none", "cpu")], facts)
    assert wrong == ["pytorch 2.13: conda-forge builds it for Python 3.11, not 3.14"
                     if cpu.python == "3.11" else f"pytorch 2.13: conda-forge builds it for Python 3.11, not {cpu.python}, 3.14",
                     "pytorch 2.9 is neither conda-forge's pin nor its migration target (pytorch.toml: 2.13)"]


def test_mmstack_matrix_says_which_row_is_which_and_the_ci_cost():
    code, out, err = mmstack("matrix", cwd=ROOT)
    assert code == 0, err
    for py in ("3.10", "3.11", "3.12", "3.13", "3.14"):
        assert f"│ {py} " in out
    assert "2.12 (conda-forge's pin)" in out and "2.13 (conda-forge's migration target)" in out
    cost = release_cost(variants.load_matrix(load(), ROOT / variants.CONFIG_FILE))
    assert f"linux-64 {cost.hours:.1f} for 60 variants" in " ".join(out.split())  # the aarch64 estimate beside it: test_variants_aarch64
    rows = json.loads(mmstack("matrix", "--format", "json", cwd=ROOT)[1])
    assert {(r["pytorch"], r["pytorch_role"]) for r in rows} == {("2.12", "pin"), ("2.13", "migration")}
