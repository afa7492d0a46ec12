"""Typed access to data/pytorch.toml: conda-forge's pytorch pin and migration target, and the
Pythons each is built for. Strict like the GPU facts: an unknown field, a missing source or a
malformed version fails to load with the file and the field named."""

from __future__ import annotations

import functools
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mmstack.facts.datafile import load_model

PYTORCH_FILE = "pytorch.toml"
Minor = Annotated[str, Field(pattern=r"^\d+\.\d+$")]
ROLE_TEXT = {"pin": "conda-forge's pin", "migration": "conda-forge's migration target"}


class PytorchRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    version: Minor
    role: Literal["pin", "migration"]
    pythons: tuple[Minor, ...]
    source: Annotated[str, Field(pattern=r"^https://\S+$")]
    note: str = ""


class PytorchFacts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    pytorch: tuple[PytorchRow, ...]

    @model_validator(mode="after")
    def _one_row_per_version_and_role(self) -> PytorchFacts:
        versions = [r.version for r in self.pytorch]
        if len(set(versions)) != len(versions):
            raise ValueError(f"a pytorch version is listed twice: {versions}")
        roles = [r.role for r in self.pytorch]
        if sorted(set(roles)) != sorted(roles):
            raise ValueError(f"one row per role (pin, migration): {roles}")
        return self

    def row(self, version: str) -> PytorchRow | None:
        return next((r for r in self.pytorch if r.version == version), None)

    def label(self, version: str) -> str:
        """`2.12 (conda-forge's pin)`; the bare version for one the facts do not name."""
        row = self.row(version)
        return f"{version} ({ROLE_TEXT[row.role]})" if row else version


@functools.cache
def load_pytorch() -> PytorchFacts:
    return load_model(PYTORCH_FILE, PytorchFacts)
