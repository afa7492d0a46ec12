"""CI's build cost per release (issue 42 item 2): data/build_costs.toml holds each kind's measured
CPU seconds, each row naming the committed result it comes from; variants/ci_cost.py multiplies
them by the matrix's rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmstack.errors import BadInput
from mmstack.variants.ci_cost import Costs, kind_of, load_costs, release_cost

pytest.importorskip("rattler_build", reason="py-rattler-build is the 'build' extra")

from mmstack.facts.gpus import load
from mmstack.variants import matrix as variants

ROOT = Path(__file__).resolve().parents[1]


def _field(doc, path: str):
    for part in path.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


@pytest.mark.parametrize("row", load_costs().cost, ids=lambda r: f"{r.kind}:{Path(r.result).name}")
def test_every_cost_is_the_number_its_committed_result_holds(row):
    doc = json.loads((ROOT / row.result).read_text())
    assert _field(doc, row.field) == row.cpu_s


def test_the_per_generation_cost_is_the_sm90_build_of_the_cpu_machine():
    """The number the issue names: proof-cpu-build1's sm_90 build, 3,855.5 CPU-s."""
    assert load_costs().seconds("generation") == 3855.5


def test_release_cost_is_rows_times_costs_plus_noarch():
    m = variants.load_matrix(load(), ROOT / variants.CONFIG_FILE)
    costs = load_costs()
    cost = release_cost(m, costs)
    assert cost.variants == len(m) == 60
    assert cost.by_kind == {"cpu": 10, "fat": 20, "generation": 30}
    expected = sum(costs.seconds(kind_of(v)) for v in m) + costs.seconds("noarch")
    assert cost.hours == pytest.approx(expected / 3600)
    # the pin's rows are CPU and fat only: its share is the CPU builds and fat builds of five Pythons
    assert cost.by_pytorch["2.12"] == pytest.approx(5 * (costs.seconds("cpu") + 2 * costs.seconds("fat")) / 3600)
    assert cost.as_dict()["cpu_hours_per_release"] == round(cost.hours, 1)


def test_a_missing_kind_names_the_file_and_the_fix():
    costs = Costs(cost=tuple(r for r in load_costs().cost if r.kind != "fat"))
    with pytest.raises(BadInput, match="no 'fat' row"):
        costs.seconds("fat")
