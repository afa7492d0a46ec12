"""build.run_build with the real rattler-build engine on tiny recipes (no dependencies, offline).

The real mmcv recipe is rendered in test_build_render.py and built in test_build_e2e.py (slow).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("rattler_build", reason="py-rattler-build is the optional 'build' extra")

from mmstack.builder import recipes as build
from mmstack.errors import BadInput, BuildFailed

RECIPE = """\
package:
  name: tiny
  version: "1.0"
source:
  url: {url}
  sha256: {sha}
build:
  number: 0
  string: ${{{{ flavor }}}}_h${{{{ hash }}}}_0
  script:
    env:
      FLAVOR: ${{{{ flavor }}}}
    content:
      - mkdir -p "$PREFIX/share/tiny"
      - cp payload.txt "$PREFIX/share/tiny/$FLAVOR.txt"
      - {extra}
tests:
  - package_contents:
      files:
        - share/tiny/*.txt
  - script:
      - test -n "$(cat "$PREFIX"/share/tiny/*.txt)"
"""

VARIANTS = "flavor:\n  - plain\n  - spicy\n"


def _recipe(tmp_path: Path, *, extra: str = "true", sha: str | None = None) -> tuple[Path, Path]:
    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "payload.txt").write_text("payload\n")
    tarball = tmp_path / "tiny-1.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tf:
        tf.add(src / "payload.txt", arcname="tiny-1.0/payload.txt")
    digest = sha or hashlib.sha256(tarball.read_bytes()).hexdigest()
    recipe_dir = tmp_path / "recipe"
    recipe_dir.mkdir()
    (recipe_dir / "recipe.yaml").write_text(RECIPE.format(url=tarball.as_uri(), sha=digest, extra=extra))
    config = tmp_path / "variants.yaml"
    config.write_text(VARIANTS)
    return recipe_dir, config


def _repodata(channel: Path) -> dict:
    return json.loads((channel / "linux-64" / "repodata.json").read_text())


def test_builds_every_selected_variant_into_an_indexed_channel(tmp_path):
    recipe_dir, config = _recipe(tmp_path)
    channel = tmp_path / "channel"
    messages: list[str] = []

    built = build.run_build(recipe_dir=recipe_dir, variant_config=config, channel_dir=channel,
                            extra_channels=[], work_dir=tmp_path, progress=messages.append)

    assert sorted(p.build_string.split("_")[0] for p in built) == ["plain", "spicy"]
    for pkg in built:
        assert pkg.path.parent == channel / "linux-64" and pkg.path.is_file()
    assert sorted(_repodata(channel)["packages.conda"]) == sorted(p.path.name for p in built)
    assert any("building tiny-1.0-plain_h" in m for m in messages)
    assert not list(tmp_path.glob("mmstack-build-*")), "the temporary build tree is removed"


def test_select_keeps_only_matching_variants(tmp_path):
    recipe_dir, config = _recipe(tmp_path)
    built = build.run_build(recipe_dir=recipe_dir, variant_config=config, channel_dir=tmp_path / "channel",
                            select={"flavor": "spicy"}, extra_channels=[], work_dir=tmp_path)
    assert [p.variant["flavor"] for p in built] == ["spicy"]


def test_no_matching_variant_is_bad_input(tmp_path):
    recipe_dir, config = _recipe(tmp_path)
    with pytest.raises(BadInput, match="no variant"):
        build.run_build(recipe_dir=recipe_dir, variant_config=config, channel_dir=tmp_path / "channel",
                        select={"flavor": "sour"}, extra_channels=[], work_dir=tmp_path)


def test_failed_build_leaves_the_channel_untouched(tmp_path):
    good_dir, config = _recipe(tmp_path / "good")
    channel = tmp_path / "channel"
    build.run_build(recipe_dir=good_dir, variant_config=config, channel_dir=channel,
                    select={"flavor": "plain"}, extra_channels=[], work_dir=tmp_path)
    before = {p.relative_to(channel): p.read_bytes() for p in channel.rglob("*") if p.is_file()}

    # the second variant fails after the first one succeeded: neither may land
    bad_dir, config = _recipe(tmp_path / "bad", extra='test "$FLAVOR" = plain || gcc no-such-file.c')
    with pytest.raises(BuildFailed) as err:
        build.run_build(recipe_dir=bad_dir, variant_config=config, channel_dir=channel,
                        extra_channels=[], work_dir=tmp_path)

    after = {p.relative_to(channel): p.read_bytes() for p in channel.rglob("*") if p.is_file()}
    assert after == before
    message = err.value.one_line()
    assert "\n" not in message
    assert "tiny-1.0-spicy_h" in message and "no-such-file.c" in message
    log = Path(message.split("the full log is ")[1].split(";")[0])
    assert "Script failed with status" in log.read_text()


def test_source_hash_mismatch_is_one_clear_line(tmp_path):
    recipe_dir, config = _recipe(tmp_path, sha="0" * 64)
    with pytest.raises(BuildFailed) as err:
        build.run_build(recipe_dir=recipe_dir, variant_config=config, channel_dir=tmp_path / "channel",
                        select={"flavor": "plain"}, extra_channels=[], work_dir=tmp_path)
    message = err.value.one_line()
    assert "\n" not in message
    assert "source sha256 mismatch: recipe says 000000000000..." in message
    assert "source.sha256" in message
    assert not (tmp_path / "channel").exists()


def test_missing_recipe_and_config_are_bad_input(tmp_path):
    _, config = _recipe(tmp_path)
    with pytest.raises(BadInput, match="nowhere not found"):
        build.render(recipe_dir=tmp_path / "nowhere", variant_config=config)
    with pytest.raises(BadInput, match="not found"):
        build.render(recipe_dir=tmp_path / "recipe", variant_config=tmp_path / "none.yaml")


def test_stack_build_lands_each_recipe_before_the_next_builds(tmp_path):
    """mmcv's tests need the mmstack package: run_stack_build builds in order, into one channel."""
    helper = tmp_path / "helper"
    helper.mkdir()
    (helper / "recipe.yaml").write_text(
        "package: {name: helper, version: '1'}\n"
        "build: {noarch: generic, script: [mkdir -p $PREFIX/bin, 'printf \"#!/bin/sh\\necho helped\\n\" > $PREFIX/bin/helper',"
        " chmod +x $PREFIX/bin/helper]}\n"
    )
    recipe_dir, config = _recipe(tmp_path / "user")
    text = (recipe_dir / "recipe.yaml").read_text()
    (recipe_dir / "recipe.yaml").write_text(text + "  - requirements:\n      run: [helper]\n    script: [helper]\n")
    built = build.run_stack_build(root=tmp_path, channel_dir=tmp_path / "channel", recipes=[helper, recipe_dir],
                                  variant_config=config, select={"flavor": "plain"}, extra_channels=[],
                                  work_dir=tmp_path)
    assert [p.name for p in built] == ["helper", "tiny"]


def test_a_build_script_error_message_is_what_the_user_sees(tmp_path):
    recipe_dir, config = _recipe(
        tmp_path, extra="\"echo 'mmstack build.sh: ERROR: CUDA variant has no arch list.' && echo 'error: noise' && false\"")
    with pytest.raises(BuildFailed, match=r"mmstack build.sh: ERROR: CUDA variant has no arch list\."):
        build.run_build(recipe_dir=recipe_dir, variant_config=config, channel_dir=tmp_path / "channel",
                        select={"flavor": "plain"}, extra_channels=[], work_dir=tmp_path)


def test_an_override_of_a_zipped_key_is_repeated_down_its_group(tmp_path):
    config = tmp_path / "cbc.yaml"
    config.write_text("cuda:\n  - None\n  - '12.9'\ncc:\n  - '13'\n  - '14'\nzip_keys:\n  - [cuda, cc]\n")
    merged = build.load_variant_config(config, {"cc": "12", "python": "3.11"})
    assert merged["cc"] == ["12", "12"] and merged["python"] == ["3.11"]
    with pytest.raises(BadInput, match="zip group"):
        build.load_variant_config(config, {"cc": ["12", "13", "14"]})


def test_a_rebuilt_package_is_not_shadowed_by_rattlers_cached_extraction(tmp_path, monkeypatch):
    """rattler's package cache is keyed by file name: the old extraction of a package rebuilt with the
    same build string must go before the build, or its tests run the old code."""
    from mmstack.builder.recipes import evict_cached_package, package_cache_dir

    monkeypatch.setenv("RATTLER_CACHE_DIR", str(tmp_path))
    assert package_cache_dir() == tmp_path / "pkgs"
    stale = tmp_path / "pkgs" / "mmstack-0.1.0-pyh4616a5c_0"
    (stale / "site-packages" / "mmstack").mkdir(parents=True)
    (tmp_path / "pkgs" / "mmstack-0.1.0-pyh4616a5c_0.lock").touch()
    other = tmp_path / "pkgs" / "mmcv-2.2.0-cpu_py311_h0_0"
    other.mkdir()
    evict_cached_package("mmstack-0.1.0-pyh4616a5c_0")
    assert not stale.exists() and not (tmp_path / "pkgs" / "mmstack-0.1.0-pyh4616a5c_0.lock").exists()
    assert other.is_dir()  # only the package being rebuilt
    evict_cached_package("mmstack-0.1.0-pyh4616a5c_0")  # nothing cached: no error
