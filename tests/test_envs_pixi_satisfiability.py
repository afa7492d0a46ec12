"""pixi's satisfiability rules, one by one, against a lock written by `mmstack lock`; and mmstack's
reader and check against pixi's own fixtures (tests/data/pixi_lock_fixtures, SOURCE.md there).

pixi trusts a pixi.lock only when nothing in pixi_core/src/lock_file/outdated.rs and
satisfiability/ finds it outdated (`pixi install --locked` fails otherwise, plain `pixi install`
re-solves). envs/README.md lists each rule with the test here, or why it does not apply.
"""

from __future__ import annotations

import shutil
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from support import committed_lock

from mmstack.envs import lockfile, pixi_manifest, policy
from mmstack.envs.lock import collect_problems
from mmstack.errors import BadInput

pytest.importorskip("rattler", reason="py-rattler (the [build] extra) is not installed")
pytest.importorskip("rattler_build", reason="py-rattler-build (the [build] extra) is not installed")

REPO = Path(__file__).resolve().parents[1]
PIXI_FIXTURES = Path(__file__).parent / "data" / "pixi_lock_fixtures"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return committed_lock.make(tmp_path_factory.mktemp("committed"))


@pytest.fixture(scope="module")
def manifest(root):
    return pixi_manifest.load(root / "pixi.toml")


@pytest.fixture(scope="module")
def locked(root, manifest):
    return lockfile.read_pixi_lock(root / "pixi.lock", manifest.platforms)


# -- outdated.rs: the environments -------------------------------------------------------------


def test_every_environment_pixi_has_is_locked_and_no_other(manifest, locked):
    """outdated.rs: an environment missing from the lock makes it outdated, and so does one the
    manifest no longer has (`removed_environments`). `default` is among them."""
    assert set(locked) == set(manifest.envs)
    assert "default" in locked and locked["default"].by_name("mmcv")[0].build.startswith("cpu_")
    found = policy.pixi_lock_problems(manifest, {n: e for n, e in locked.items() if n != "default"})
    assert [(p.env, p.rule) for p in found] == [("default", "missing-lock")]
    found = policy.pixi_lock_problems(manifest, {**locked, "gone": replace(locked["cpu"], name="gone")})
    assert [(p.env, p.rule) for p in found] == [("gone", "stale-lock")]


def test_the_implicit_default_environment_is_modelled(tmp_path):
    """pixi_manifest/src/toml/manifest.rs: without `default` in [environments], pixi adds it (the
    default feature alone, on every workspace platform). mmstack reads it the same way, and
    `mmstack check` names it when it spans several platforms (mmstack locks one per environment)."""
    text = (REPO / "pixi.toml").read_text()
    assert 'default = ["cpu", "mmdet"]\n' in text
    (tmp_path / "pixi.toml").write_text(text.replace('default = ["cpu", "mmdet"]\n', ""))
    implicit = pixi_manifest.load(tmp_path / "pixi.toml")
    env = implicit.envs["default"]
    assert next(iter(implicit.envs)) == "default" and env.features == ("default",)
    assert [p.name for p in env.platforms] == [p.name for p in implicit.platforms] and len(env.platforms) == 7
    assert {s.name for s in env.specs} == {"python", "mmstack"}
    from mmstack.facts.gpus import load as load_facts
    from mmstack.variants import matrix as variants

    found = policy.manifest_problems(implicit, load_facts(), variants.load_matrix(load_facts(), REPO / variants.CONFIG_FILE))
    assert [(p.env, p.rule) for p in found] == [("default", "one-platform")]
    assert "implicit default" in found[0].message and "define `default` in [environments]" in found[0].fix
    # A workspace with one platform: the implicit default is locked like any other environment.
    (tmp_path / "pixi.toml").write_text('[workspace]\nchannels = ["conda-forge"]\nplatforms = ["linux-64"]\n'
                                        '[dependencies]\npython = "3.11.*"\n')
    one = pixi_manifest.load(tmp_path / "pixi.toml")
    assert list(one.envs) == ["default"] and [p.name for p in one.envs["default"].platforms] == ["linux-64"]


# -- satisfiability/environment.rs -------------------------------------------------------------


def test_channels_are_pixi_tomls_as_pixi_resolves_them(root, manifest, locked):
    """ChannelsMismatch / ChannelsExtended: the locked channels are the manifest's base URLs, same
    order, written as pixi writes them (trailing slash) even though the solve read --channel."""
    want = [f"{(root / 'channel').resolve().as_uri()}/", "https://conda.anaconda.org/conda-forge/"]
    assert manifest.pixi_lock_channels() == want
    for env in locked.values():
        assert list(env.channels) == want, env.name
    # written relative to the workspace root (pixi joins a relative channel to it: envs/portable.py)
    raw = lockfile.load_yaml((root / "pixi.lock").read_text())
    assert all([c["url"] for c in e["channels"]] == ["./channel/", want[1]] for e in raw["environments"].values())
    reordered = replace(locked["h100"], channels=tuple(reversed(want)))
    extended = replace(locked["h100"], channels=(want[0],))
    for bad, how in ((reordered, "changed"), (extended, "extended")):
        (p,) = policy.pixi_env_problems(manifest.envs["h100"], bad, want)
        assert p.rule == "pixi-channels" and f"({how}:" in p.message


def test_a_symlinked_channel_is_named_as_pixi_names_it(tmp_path):
    """rattler's into_base_url joins a path channel to the workspace root lexically: a `./channel`
    that is a symlink stays `<root>/channel` in pixi.lock (the solve may follow it)."""
    real = tmp_path / "store" / "channel"
    real.mkdir(parents=True)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "channel").symlink_to(real)
    (tmp_path / "ws" / "pixi.toml").write_text('[workspace]\nchannels = ["./sub/../channel", "conda-forge"]\n'
                                               'platforms = ["linux-64"]\n')
    m = pixi_manifest.load(tmp_path / "ws" / "pixi.toml")
    assert m.pixi_lock_channels() == [f"{(tmp_path / 'ws').resolve().as_uri()}/channel/", "https://conda.anaconda.org/conda-forge/"]
    assert m.channel_urls()[0] == f"{real.resolve().as_uri()}/"


def test_no_platform_the_environment_does_not_have(manifest, locked):
    """AdditionalPlatformsInLockFile: each environment is locked for its own platforms only (one, or
    for `gpu` each generation's)."""
    for name, env in locked.items():
        names = [p.name for p in manifest.envs[name].platforms]
        assert env.platform == names[0] and sorted(o[0] for o in env.other_platforms) == sorted(names[1:]), name
        assert policy.pixi_env_problems(manifest.envs[name], env, manifest.pixi_lock_channels()) == [], name
    cpu = replace(locked["cpu"], other_platforms=(("osx-arm64", "osx-arm64", ()),))
    (p,) = policy.pixi_env_problems(manifest.envs["cpu"], cpu, manifest.pixi_lock_channels())
    assert p.rule == "pixi-platforms" and "osx-arm64" in p.message


def test_platform_definitions_match_by_identity(root, manifest, locked):
    """PlatformDefinitionChanged: after pixi's renaming of `p1`… by identity, each locked platform
    has its manifest platform's subdir and customised virtual packages; an edited arch is stale."""
    raw = {p["name"] for p in lockfile.load_yaml((root / "pixi.lock").read_text())["platforms"]}
    assert raw == {"linux-64", "p1", "p2", "p3", "p4", "p5", "p6"}
    every = lockfile.read_pixi_lock_platforms(root / "pixi.lock", manifest.platforms)
    for name, envs in every.items():
        assert [e.platform for e in envs] == [p.name for p in manifest.envs[name].platforms], name
        for env, plat in zip(envs, manifest.envs[name].platforms, strict=True):
            assert pixi_manifest.platform_identity(env.subdir, env.virtual_packages) == plat.identity(), (name, plat.name)
    edited = root.parent / "edited"
    shutil.copytree(root, edited)
    text = (edited / "pixi.toml").read_text()  # the lock's ./channel is the copy's: no machine path in it
    (edited / "pixi.toml").write_text(text.replace('cuda = { driver = "12.9", arch = "9.0" }', 'cuda = { driver = "12.9", arch = "9.1" }'))
    m2 = pixi_manifest.load(edited / "pixi.toml")
    found = policy.pixi_lock_problems(m2, lockfile.read_pixi_lock(edited / "pixi.lock", m2.platforms))
    assert [(p.env, p.rule) for p in found] == [("h100", "stale-lock")]
    assert "__cuda_arch=9.1" in found[0].message


def test_solve_options_are_pixis_defaults(root, manifest, locked):
    """SolveStrategyMismatch, ChannelPriorityMismatch, PypiPrereleaseModeMismatch: pixi.toml sets
    none of them (mmstack refuses the keys), so the lock carries no `options` (the defaults)."""
    raw = lockfile.load_yaml((root / "pixi.lock").read_text())
    assert not any("options" in e for e in raw["environments"].values())
    assert all(e.options == () for e in locked.values())
    lowest = replace(locked["lint"], options=(("strategy", "lowest-version"),))
    (p,) = policy.pixi_env_problems(manifest.envs["lint"], lowest, manifest.pixi_lock_channels())
    assert p.rule == "pixi-solve-options" and "lowest-version" in p.message


@pytest.mark.parametrize("manifest_path", ["pixi.toml", "envs/arm/pixi.toml"])
@pytest.mark.parametrize("snippet, where", [
    ('[workspace]\nchannel-priority = "disabled"\n', "workspace.channel-priority"),
    ('[workspace]\nsolve-strategy = "lowest"\n', "workspace.solve-strategy"),
    ('[workspace]\nexclude-newer = "2026-01-01"\n', "workspace.exclude-newer"),
    ('[constraints]\nnumpy = "<2"\n', "constraints"),
    ('[feature.lint.constraints]\nruff = "<1"\n', "feature.lint.constraints"),
    ('[target.linux-64.dependencies]\nnumpy = "*"\n', "target.linux-64"),
    ('[pypi-options]\nprerelease-mode = "allow"\n', "pypi-options"),
    ('[environments.extra]\nfeatures = ["lint"]\nsolve-group = "g"\n', "environments.extra.solve-group"),
    ('[environments.inline]\ndependencies = { git = "*" }\n', "environments.inline.dependencies"),
])
def test_what_mmstack_does_not_model_is_refused(tmp_path, snippet, where, manifest_path):
    """Keys that change what pixi solves or checks (exclude-newer: every record's timestamp;
    [constraints]: ConstraintViolated; solve groups; inline environment features) are BadInput
    naming the field, not silently left out of the lock; in the root workspace and in the Arm hosts'
    (envs/arm/pixi.toml, read by the same reader)."""
    text = (REPO / manifest_path).read_text()
    head, table = snippet.split("\n", 1)
    if head == "[workspace]":
        text = text.replace("[workspace]\n", f"[workspace]\n{table}", 1)
    else:
        text += "\n" + snippet
    (tmp_path / "pixi.toml").write_text(text)
    with pytest.raises(BadInput) as exc:
        pixi_manifest.load(tmp_path / "pixi.toml")
    assert where in exc.value.one_line() and "pixi.toml" in exc.value.one_line()


# -- satisfiability/platform.rs: the records -----------------------------------------------------


def test_records_satisfy_the_specs_the_dependencies_and_nothing_more(manifest, locked):
    """UnsatisfiableMatchSpec (a requested spec or a record's dependency no record or declared
    virtual package meets), DuplicateEntry, TooManyCondaPackages: none, in every environment."""
    assert policy.pixi_lock_problems(manifest, locked) == []
    for env in locked.values():
        names = [p.name for p in env.packages]
        assert len(names) == len(set(names)) and names, env.name


def test_record_rules_catch_a_duplicate_an_extra_and_a_missing_record(manifest, locked):
    env = manifest.envs["h100"]
    h100 = locked["h100"]
    torch = h100.by_name("pytorch")[0]
    stray = replace(locked["lint"].by_name("ruff")[0])
    doctored = replace(h100, packages=(*h100.packages, torch, stray))
    rules = {(p.rule, p.package) for p in policy.pixi_lock_problems(manifest, {**locked, "h100": doctored})}
    assert {("pixi-duplicate", "pytorch"), ("pixi-too-many-packages", "ruff")} <= rules
    without_python = replace(h100, packages=tuple(p for p in h100.packages if p.name != "python"))
    found = policy.lock_problems(env=env, locked=without_python, facts=_facts(), matrix=[], channels=list(h100.channels),
                                 stored_digests=None)
    assert ("spec-unsatisfied", "python") in {(p.rule, p.package) for p in found}
    assert any(p.rule == "missing-dependency" and "needs python" in p.message for p in found)


def test_lock_check_runs_the_pixi_rules(root, tmp_path):
    """`mmstack lock check` (and so `mmstack check`) runs them: a lock whose channels no longer
    match pixi.toml fails it with the rule."""
    tree = tmp_path / "r"
    shutil.copytree(root, tree)
    text = (tree / "pixi.toml").read_text()
    (tree / "pixi.toml").write_text(text.replace('channels = ["./channel", "conda-forge"]', 'channels = ["conda-forge", "./channel"]'))
    found, _ = collect_problems(root=tree, channels=[(tree / "channel").resolve().as_uri()])
    assert {p.rule for p in found} >= {"pixi-channels"}
    assert {p.env for p in found if p.rule == "pixi-channels"} == set(pixi_manifest.load(tree / "pixi.toml").envs)


def _facts():
    from mmstack.facts.gpus import load as load_facts

    return load_facts()


# -- requires-pixi ------------------------------------------------------------------------------


def test_requires_pixi_admits_no_release_with_a_known_layout_bug():
    """pixi#6493 (fixed in v0.72.1 by #6517): the floor, and so the pixi CI installs, is above it;
    the Arm hosts' workspace (envs/arm/pixi.toml) states the same floor."""
    m = pixi_manifest.load(REPO / "pixi.toml")
    assert pixi_manifest.pixi_floor_problems(m) == []
    assert pixi_manifest.pixi_floor_version(m) >= (0, 72, 1)
    arm = pixi_manifest.load(REPO / "envs/arm/pixi.toml")
    assert pixi_manifest.pixi_floor_problems(arm) == [] and arm.requires_pixi == m.requires_pixi
    for path in (REPO / ".github/workflows/build.yml", REPO / ".github/workflows/locks.yml"):
        assert f"PIXI_VERSION: {pixi_manifest.pixi_floor(m)}\n" in path.read_text()
    old = replace(m, requires_pixi=">=0.71")
    from mmstack.variants import matrix as variants

    found = policy.manifest_problems(old, _facts(), variants.load_matrix(_facts(), REPO / variants.CONFIG_FILE))
    assert [(p.rule, p.fix) for p in found] == [("pixi-floor", 'requires-pixi = ">=0.72.1" in [workspace], then `mmstack ci generate`')]
    assert "prefix-dev/pixi#6493" in found[0].message


def test_bare_subdir_features_do_not_get_the_rich_platforms(tmp_path):
    """The layout of pixi#6493's regression test (pixi_core workspace/environment.rs,
    `test_bare_subdir_feature_excludes_custom_rich_platform`), read as pixi >= 0.72.1 reads it;
    and this repository's cpu, build, test and lint stay on the bare linux-64."""
    (tmp_path / "pixi.toml").write_text(textwrap.dedent("""\
        [workspace]
        channels = ["conda-forge"]
        platforms = [
            "linux-64",
            { name = "linux-64-cuda", platform = "linux-64", cuda = "12" },
        ]

        [feature.cpu]
        platforms = ["linux-64"]

        [feature.gpu]
        platforms = ["linux-64-cuda"]

        [environments]
        cpu = ["cpu"]
        gpu = ["gpu"]
        """))
    m = pixi_manifest.load(tmp_path / "pixi.toml")
    assert [p.name for p in m.envs["cpu"].platforms] == ["linux-64"]
    assert [p.name for p in m.envs["gpu"].platforms] == ["linux-64-cuda"]
    ours = pixi_manifest.load(REPO / "pixi.toml")
    for name in ("default", "cpu", "build", "test", "lint"):
        assert [p.name for p in ours.envs[name].platforms] == ["linux-64"], name
    arm = pixi_manifest.load(REPO / "envs/arm/pixi.toml")  # the Arm hosts' workspace: its CPU environment
    for name in ("default", "cpu"):
        assert [p.name for p in arm.envs[name].platforms] == ["linux-aarch64"], name
    assert all(len(e.platforms) == 1 for e in arm.envs.values())  # each locks as one platform, as mmstack locks


# -- the reader on pixi's own lock files ---------------------------------------------------------


# fixture -> what mmstack's check says ((env, rule) pairs it must include; () = satisfiable), as pixi does
PIXI_VERDICTS = {
    "satisfiability/permuted-virtual-packages": (),
    "non-satisfiability/changed-platform-virtual-package": (("default", "stale-lock"),),
    "non-satisfiability/changed-platform-subdir": (("default", "stale-lock"),),
    "non-satisfiability/removed-environment": (("removed", "stale-lock"),),
    "non-satisfiability/mismatched-spec": (("default", "spec-unsatisfied"),),
    "non-satisfiability/missing-dependency": (("default", "missing-dependency"),),
    "non-satisfiability/mismatch-solve-strategy": (("default", "pixi-solve-options"),),
    "non-satisfiability/mismatch-channel-priority2": (("default", "pixi-solve-options"),),
    "non-satisfiability/too-many-platforms": (("default", "pixi-platforms"),),
}


@pytest.mark.parametrize("fixture", sorted(PIXI_VERDICTS))
def test_pixi_fixtures_get_pixis_verdict(fixture):
    d = PIXI_FIXTURES / fixture
    m = pixi_manifest.load(d / "pixi.toml")
    locked = lockfile.read_pixi_lock(d / "pixi.lock", m.platforms)
    assert set(locked) >= set(m.envs)  # every fixture locks the implicit default
    found = {(p.env, p.rule) for p in policy.pixi_lock_problems(m, locked)}
    want = set(PIXI_VERDICTS[fixture])
    assert (found >= want and found) if want else found == set(), (fixture, found)


def test_pixi_fixtures_read_as_pixi_wrote_them():
    """Lock versions 4, 6 and 7; rich platforms; several platforms per environment."""
    m = pixi_manifest.load(PIXI_FIXTURES / "non-satisfiability/missing-dependency/pixi.toml")
    (env,) = lockfile.read_pixi_lock(PIXI_FIXTURES / "non-satisfiability/missing-dependency/pixi.lock", m.platforms).values()
    assert (env.name, env.platform, env.subdir) == ("default", "win-64", "win-64")
    assert [p.label for p in env.packages] == ["pixi 0.15.2 h7ea99a0_0", "ucrt 10.0.22621.0 h57928b3_0", "vc 14.3 hcf57466_18"]
    assert env.channels == ("https://conda.anaconda.org/conda-forge/",)
    assert env.by_name("pixi")[0].sha256 == "663e752ba19bebb97b32ca541cfdeebedfc50664d9423637eda4c9c47343fdbb"
    d = PIXI_FIXTURES / "satisfiability/permuted-virtual-packages"
    m = pixi_manifest.load(d / "pixi.toml")
    (env,) = lockfile.read_pixi_lock(d / "pixi.lock", m.platforms).values()
    assert (env.platform, env.virtual_packages) == ("extra", ("__glibc=2.28", "__cuda=12.0"))
    d = PIXI_FIXTURES / "non-satisfiability/too-many-platforms"
    m = pixi_manifest.load(d / "pixi.toml")
    (env,) = lockfile.read_pixi_lock(d / "pixi.lock", m.platforms).values()
    assert env.platform == "linux-64" and [o[0] for o in env.other_platforms] == ["osx-arm64"]
    assert env.by_name("numpy") and all(p.subdir in ("linux-64", "noarch") for p in env.packages)
    d = PIXI_FIXTURES / "non-satisfiability/mismatch-solve-strategy"
    (env,) = lockfile.read_pixi_lock(d / "pixi.lock", pixi_manifest.load(d / "pixi.toml").platforms).values()
    assert env.options == (("strategy", "lowest-version"),)


def test_a_pixi_fixture_mmstack_cannot_lock_is_refused_naming_the_key():
    """mismatch-channel-priority sets `channel-priority = "disabled"`: pixi holds the lock to it,
    mmstack's solve would not honour it, so the manifest is refused rather than misread."""
    with pytest.raises(BadInput) as exc:
        pixi_manifest.load(PIXI_FIXTURES / "non-satisfiability/mismatch-channel-priority/pixi.toml")
    assert "workspace.channel-priority" in exc.value.one_line()


@pytest.mark.parametrize("fixture", ["introduction-init", "tasks", "conda-extras"])
def test_an_environment_with_no_packages_is_a_valid_lock(fixture):
    """pixi writes an environment with nothing to install as `packages: {}` (locked for no
    platform) and reads it as valid: 10 of the 130 pixi.lock files in pixi's repository have one
    (tests/data/pixi_lock_fixtures/SOURCE.md). mmstack reads them too, each such environment empty."""
    d = PIXI_FIXTURES / "empty-environments" / fixture
    locked = lockfile.read_pixi_lock(d / "pixi.lock")
    empty = {"introduction-init": {"default"}, "tasks": {"default", "extra"}, "conda-extras": {"default"}}[fixture]
    assert {n for n, e in locked.items() if not e.packages} == empty
    for name in empty:
        assert (locked[name].platform, locked[name].other_platforms) == ("", ())
        assert locked[name].channels and all(c.startswith("https://") for c in locked[name].channels)
    if fixture == "conda-extras":
        assert [p.name for p in locked["env-foo"].packages] == ["dep-foo", "my-package"]


def test_an_empty_environment_satisfies_a_manifest_that_asks_for_nothing():
    """pixi's docs example (`pixi init`): no dependencies, nothing locked: no problem, as for pixi."""
    d = PIXI_FIXTURES / "empty-environments" / "introduction-init"
    m = pixi_manifest.load(d / "pixi.toml")
    assert policy.pixi_lock_problems(m, lockfile.read_pixi_lock(d / "pixi.lock", m.platforms)) == []


def test_a_multi_platform_v6_lock_meets_glibc_with_the_subdirs_defaults():
    """A v4-v6 lock records no virtual packages per platform; pixi assumes the subdir's defaults
    (`__glibc=2.28` on linux-64). pixi's own docs example locks python for three platforms: every
    linux record's `__glibc >=2.17` is met, so no line about __glibc (there were 10 here)."""
    d = PIXI_FIXTURES / "multi-platform" / "deps-add"
    m = pixi_manifest.load(d / "pixi.toml")
    locked = lockfile.read_pixi_lock(d / "pixi.lock", m.platforms)
    env = locked["default"]
    assert (env.platform, env.virtual_packages) == ("linux-64", ())
    assert sorted(o[0] for o in env.other_platforms) == ["osx-arm64", "win-64"]  # rattler gives no fixed order
    assert sum("__glibc" in dep for p in env.packages for dep in p.depends) >= 10
    assert policy.pixi_lock_problems(m, locked) == []
