"""CI's build cost per release: the matrix's rows times the measured CPU seconds of each kind of
build (data/build_costs.toml, each row naming the committed result it comes from).

A release builds every row of the matrix once (the generated build workflow's jobs) and the noarch
packages once. Build CPU time only: the test jobs (CPU runners for the CPU rows, GPU runners for
the rest) are not in it. Every measured build ran on linux-64; the linux-aarch64 rows (cross-compiled
on linux-64 by the workflow's build_aarch64 jobs) are in the release total at linux-64's CPU seconds
per kind, an estimate until an aarch64 build is timed, and said to be one (`release_total`).
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mmstack.errors import BadInput
from mmstack.facts.datafile import load_model
from mmstack.variants.matrix import CPU_TAG, FAT_TAG, PLATFORM, Variant

COSTS_FILE = "build_costs.toml"
Kind = Literal["cpu", "generation", "fat", "noarch"]


class CostRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    kind: Kind
    cpu_s: float = Field(gt=0)
    result: str = Field(pattern=r"^lab/results/\S+\.json$")
    field: str
    machine: str


class Costs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    cost: tuple[CostRow, ...]

    def seconds(self, kind: str) -> float:
        """CPU seconds of one build of that kind (the noarch rows summed: one release builds each)."""
        rows = [r.cpu_s for r in self.cost if r.kind == kind]
        if not rows:
            raise BadInput(f"no {kind!r} row", source=f"src/mmstack/data/{COSTS_FILE}",
                           fix=f"add a [[cost]] row of kind {kind!r} from a committed result")
        return sum(rows)


@functools.cache
def load_costs() -> Costs:
    return load_model(COSTS_FILE, Costs)


def kind_of(v: Variant) -> Kind:
    if v.arch_tag == CPU_TAG:
        return "cpu"
    return "fat" if v.arch_tag == FAT_TAG else "generation"


@dataclass(frozen=True)
class ReleaseCost:
    """What one release costs CI in build CPU time, per pytorch minor and in all."""

    variants: int
    by_kind: dict[str, int]  # kind -> rows
    by_pytorch: dict[str, float]  # pytorch minor -> CPU-hours of its rows
    noarch_hours: float
    hours: float

    @property
    def rows_hours(self) -> float:
        """The rows' CPU-hours, without the noarch packages (built once per release, not per platform)."""
        return self.hours - self.noarch_hours

    def as_dict(self) -> dict:
        return {"variants": self.variants, "rows_by_kind": self.by_kind,
                "cpu_hours_by_pytorch": {k: round(v, 1) for k, v in self.by_pytorch.items()},
                "noarch_cpu_hours": round(self.noarch_hours, 3), "cpu_hours_per_release": round(self.hours, 1)}


def release_cost(matrix: list[Variant], costs: Costs | None = None) -> ReleaseCost:
    costs = costs or load_costs()
    kinds = Counter(kind_of(v) for v in matrix)
    by_pytorch: dict[str, float] = {}
    for v in matrix:
        by_pytorch[v.pytorch] = by_pytorch.get(v.pytorch, 0.0) + costs.seconds(kind_of(v)) / 3600
    noarch = costs.seconds("noarch") / 3600
    return ReleaseCost(len(matrix), dict(sorted(kinds.items())), dict(sorted(by_pytorch.items())), noarch,
                       sum(by_pytorch.values()) + noarch)



@dataclass(frozen=True)
class ReleaseTotal:
    """A release's build CPU-hours over every platform CI builds: linux-64's from its measured
    builds (noarch included), each other platform's rows at linux-64's CPU seconds per kind (an
    estimate: no build of that platform has been timed)."""

    measured: ReleaseCost  # linux-64 (PLATFORM), where the builds of build_costs.toml ran
    estimated: dict[str, ReleaseCost]  # other platform -> its rows at linux-64's costs

    @property
    def variants(self) -> int:
        return self.measured.variants + sum(c.variants for c in self.estimated.values())

    @property
    def hours(self) -> float:
        return self.measured.hours + sum(c.rows_hours for c in self.estimated.values())

    def as_dict(self) -> dict:
        return {"cpu_hours_per_release": round(self.hours, 1), "variants": self.variants,
                PLATFORM: self.measured.as_dict(),
                **{p: {"variants": c.variants, "rows_by_kind": c.by_kind, "cpu_hours": round(c.rows_hours, 1),
                       "estimate": f"at {PLATFORM}'s measured CPU seconds per kind; no {p} build has been timed"}
                   for p, c in self.estimated.items()}}


def release_total(matrix: list[Variant], others: dict[str, list[Variant]], costs: Costs | None = None) -> ReleaseTotal:
    """linux-64's `matrix` measured, plus each other platform's rows (platform -> its matrix; an
    empty one is left out) estimated at linux-64's per-kind costs."""
    costs = costs or load_costs()
    return ReleaseTotal(release_cost(matrix, costs),
                        {p: release_cost(rows, costs) for p, rows in others.items() if rows})
