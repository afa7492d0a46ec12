"""One packaged data file (src/mmstack/data/NAME, TOML) read into its strict model; a bad row or bad
TOML is one BadInput line naming the file, the field and the fix."""

from __future__ import annotations

import sys
from importlib import resources
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from mmstack.errors import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10: the `tomli` dependency
    import tomli as tomllib

M = TypeVar("M", bound=BaseModel)


def load_model(name: str, model: type[M]) -> M:
    source = f"src/mmstack/data/{name}"
    try:
        return model.model_validate(tomllib.loads(resources.files("mmstack.data").joinpath(name).read_text()),
                                    strict=False)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise BadInput(err["msg"], source=f"{source}: {'.'.join(str(p) for p in err['loc'])}",
                       fix="fix the row (see the comments at the top of the file)") from None
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"not TOML: {exc}", source=source, fix="fix the syntax") from None
