"""A fix hint names only options the command has: each command that reads conda_build_config.yaml,
run where there is none, through the real CLI. An option the hint names for another command is
qualified with that command (`mmstack matrix`: --config PATH) and exists there."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from support.cli import mmstack

REPO = Path(__file__).resolve().parents[1]
COMMANDS = [("check",), ("lock",), ("lock", "check"), ("ci", "generate"), ("matrix",), ("build", "--env", "cpu")]


def _options(*command: str) -> set[str]:
    code, out, err = mmstack(*[c for c in command if not c.startswith("-") and c != "cpu"], "--help")
    assert code == 0, err
    return set(re.findall(r"--[a-z][a-z-]*", out))


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_the_missing_variant_config_hint_names_an_option_the_command_has(command, tmp_path):
    shutil.copy(REPO / "pixi.toml", tmp_path / "pixi.toml")  # the config is what is missing
    code, out, err = mmstack(*command, cwd=tmp_path, timeout=120)
    text = " ".join((out + err).split())
    assert code != 0 and "conda_build_config.yaml not found" in text, text
    fix = re.search(r"\(fix: (.*?)\)\s*(?:│|$)", text).group(1)
    qualified = re.findall(r"`mmstack ([a-z ]+)`: (--[a-z-]+)", fix)
    for other, option in qualified:
        assert option in _options(*other.split()), (other, option)
    plain = set(re.findall(r"--[a-z][a-z-]*", re.sub(r"`mmstack [a-z ]+`: --[a-z-]+", "", fix)))
    mine = _options(*command)
    assert (plain and plain <= mine) or (command == ("matrix",) and ("matrix", "--config") in qualified), (fix, mine)
