"""A one-file generic recipe built by the real `mmstack build` into a local channel (tests of
`mmstack test` and of receipts): no dependencies, so its only source channel is an empty, indexed one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import mmstack

ROOT = Path(__file__).resolve().parents[2]


def build_probe(tmp_path: Path, recipe_text: str, *, test: bool) -> tuple[Path, Path, Path]:
    """(package file, its channel, the empty source channel); `test=False` builds with --no-test."""
    pytest.importorskip("rattler_build")
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "recipe.yaml").write_text(recipe_text)
    empty = tmp_path / "empty"
    (empty / "noarch").mkdir(parents=True)
    assert mmstack("channel", "index", str(empty), "--quiet")[0] == 0
    channel = tmp_path / "channel"
    code, out, err = mmstack("build", "--root", str(ROOT), "--recipe", str(recipe), *([] if test else ["--no-test"]),
                             "--channel", str(channel), "--source-channel", str(empty), "--quiet", "--json")
    assert code == 0, err
    (pkg,) = [Path(p["path"]) for p in json.loads(out)["packages"]]
    assert pkg.is_file() and pkg.parent.parent == channel.resolve()
    return pkg, channel, empty
