"""The matrix's pytorch rows against data/pytorch.toml: every pytorch minor of the matrix is
conda-forge's pin or its migration target, and every Python a row takes is one conda-forge's
pytorch of that minor is built for (a row past that list builds against nothing)."""

from __future__ import annotations

from mmstack.facts.pytorch import PYTORCH_FILE, PytorchFacts
from mmstack.variants.matrix import Variant


def problems(matrix: list[Variant], facts: PytorchFacts) -> list[str]:
    out = []
    for pt in sorted({v.pytorch for v in matrix}):
        row = facts.row(pt)
        if row is None:
            listed = ", ".join(r.version for r in facts.pytorch)
            out.append(f"pytorch {pt} is neither conda-forge's pin nor its migration target ({PYTORCH_FILE}: {listed})")
            continue
        pythons = sorted({v.python for v in matrix if v.pytorch == pt} - set(row.pythons))
        if pythons:
            out.append(f"pytorch {pt}: conda-forge builds it for Python {', '.join(row.pythons)}, not {', '.join(pythons)}")
    return out
