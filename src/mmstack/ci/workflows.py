"""CI workflows generated from the variant matrix: `mmstack ci generate [--check]`.

build.yml holds one job per variant of conda_build_config.yaml (the matrix is written out, not
computed at run time, so a diff of the workflow shows what CI will build) and a job that
assembles their packages into one indexed channel; locks.yml installs every environment from its
lockfile on pull requests and re-solves on a schedule. Both embed the config's digest, so a
matrix change without a regenerated workflow fails `mmstack ci generate --check` and
`mmstack check`. The text is deterministic: same inputs, same bytes.

The text lives in templates/*.yml, rendered with jinja2 (as conda-smithy renders its CI templates).
Their delimiters are chosen so that every template is itself valid YAML, which a YAML linter can
read: `<< name >>` for a value (GitHub's own `${{ }}` expressions stay literal) and `#%` line
statements (YAML comments) for includes and loops.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import jinja2

from mmstack.envs import pixi_manifest
from mmstack.errors import CheckFailed
from mmstack.facts.gpus import Facts, load
from mmstack.variants.matrix import CONFIG_FILE, CPU_TAG, FAT_TAG, PLATFORM, Variant, config_digest, load_matrix

BUILD_FILE = Path(".github/workflows/build.yml")
LOCKS_FILE = Path(".github/workflows/locks.yml")
FIX = "mmstack ci generate"
_DIGEST_LINE = re.compile(r"^# config digest: ([0-9a-f]+)", re.MULTILINE)
TEMPLATES = Path(__file__).with_name("templates")

# Pinned versions, once: setup-pixi as pixi's CI docs pin it
# (https://pixi.sh/latest/integration/ci/github_actions/; pixi itself is the floor of pixi.toml's
# `requires-pixi`, read from pixi.toml). The build and test jobs run mmstack's own `build
# --no-test` and `test` (py-rattler-build, pinned by the `build` extra), so a lab runs the same steps
# by hand and tests/test_build_e2e.py runs them against the local engine.
SETUP_PIXI = "prefix-dev/setup-pixi@v0.9.2"
# conda-lock as the `test` extra pins it (tests/test_ci_workflows.py holds the two equal): locks.yml
# runs its `--check-input-hash` on every committed conda-lock file, as tests/test_envs_conda_lock.py does.
CONDA_LOCK_SPEC = "conda-lock==4.0.3"
# The other target platform: its rows are cross-compiled on CPU_RUNNER (as conda-forge builds its
# aarch64 packages on linux-64) and tested on an Arm runner: the GPU runner mapped for the row, else
# vars.ARM_RUNNER, else GitHub's hosted linux arm64 runner (no GPU: the ladder skips L2 and L4).
ARM_PLATFORM = "linux-aarch64"
ARM_RUNNER = "ubuntu-24.04-arm"


# --- the matrix --------------------------------------------------------------------------------

def runner_key(v: Variant) -> str:
    """What vars.GPU_RUNNERS is looked up by: the environment a build serves ('rtx4090'), the
    build string prefix of a fat build ('cuda129_all': one per CUDA, their driver floors differ),
    or 'cpu'. Another platform's row (no environment serves it yet) has its build string prefix
    and the platform ('cuda130_sm90-linux-aarch64'), so it never shares a key with a linux-64 row."""
    if v.platform != PLATFORM:
        return f"{v.build_string_prefix}-{v.platform}"
    if v.cuda is None:
        return CPU_TAG
    if v.arch_tag == FAT_TAG or not v.envs:
        return v.build_string_prefix
    return v.envs[0]


def job_name(v: Variant, rows: Sequence[Variant] = ()) -> str:
    """`py3.11 pytorch2.13 cuda12.9 sm89 (rtx4090)`, `py3.11 pytorch2.12 cpu (cpu)`, `py3.11 pytorch2.13
    cuda12.9 all (any GPU)`: the pytorch minor too, the matrix builds two (conda-forge's pin and target).
    Another platform's row names it and the Arm hosts it serves: `py3.11 pytorch2.13 cuda13.0 sm90
    linux-aarch64 (NVIDIA GH200)`, from `rows` (the matrix of its platform)."""
    build = "cpu" if v.cuda is None else f"cuda{v.cuda} {v.arch_tag}"
    if v.platform != PLATFORM:
        return f"py{v.python} pytorch{v.pytorch} {build} {v.platform} ({_arm_hosts(v, rows)})"
    return f"py{v.python} pytorch{v.pytorch} {build} ({', '.join(v.envs) or 'any GPU'})"


def _arm_hosts(v: Variant, rows: Sequence[Variant]) -> str:
    """The Arm hosts of data/arm_hosts.toml a solver installs the row on (arm_hosts.serving_row over
    `rows`, the matrix of its platform; 'any Arm host' for the CPU and fat rows)."""
    from mmstack.variants import arm_hosts

    if v.cuda is None or v.arch_tag == FAT_TAG:
        return "any Arm host"
    return ", ".join(arm_hosts.hosts_of(v, list(rows))) or "no Arm host"


def github_matrix(variants: list[Variant], *, config_path: Path) -> dict:
    """The GitHub Actions matrix: one `include` entry per variant, in the matrix's order.

    Each entry carries the variant keys rattler-build takes as `--variant KEY=VALUE`, the
    environments the build serves, the job name, the runner key, and a cache key made of the
    variant key and the config's digest (the workflow appends a hash of recipes/mmcv/).
    """
    digest = config_digest(config_path)
    include = []
    for v in variants:
        include.append({
            "name": job_name(v, variants),
            "key": v.key,
            **v.variant_keys(),
            "build_string_prefix": v.build_string_prefix,
            "build_string_glob": v.build_string_glob,
            "envs": list(v.envs),
            "runner_key": runner_key(v),
            "cache_key": f"mmcv-{v.key}-{digest}",
        })
    return {"include": include}


def env_cuda(facts: Facts, variants: list[Variant]) -> list[dict]:
    """Each environment with the CUDA its build uses ("" for cpu): locks.yml's matrix."""
    rows = []
    for env in facts.envs:
        cudas = sorted({v.cuda or "" for v in variants if env in v.envs})
        rows.append({"env": env, "cuda": cudas[0] if cudas else ""})
    return rows


# --- rendering ---------------------------------------------------------------------------------

def _yaml_list(entries: list[dict]) -> list[str]:
    """The lines of a block list of flat mappings; scalars as JSON strings (valid YAML, no quoting
    surprises). The template indents them."""
    lines = []
    for entry in entries:
        for i, (k, value) in enumerate(entry.items()):
            lead = "- " if i == 0 else "  "
            lines.append(f"{lead}{k}: {json.dumps(value)}")
    return lines


@cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        variable_start_string="<<", variable_end_string=">>",
        line_statement_prefix="#%",
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,  # a template naming a value render() does not give fails
        autoescape=False,  # YAML, not HTML
    )


def render(root: Path) -> dict[Path, str]:
    """The workflow files (repo-relative path -> text) for the repository at ROOT."""
    facts = load()
    config = Path(root) / CONFIG_FILE
    variants = load_matrix(facts, config)
    arm = load_matrix(facts, config, ARM_PLATFORM)
    pixi = pixi_manifest.pixi_floor(pixi_manifest.load(Path(root) / pixi_manifest.MANIFEST))
    common = dict(digest=config_digest(config), pixi_version=pixi, setup_pixi=SETUP_PIXI)
    build = _env().get_template(BUILD_FILE.name).render(
        **common,
        count=len(variants),
        variant_keys=list(variants[0].variant_keys()) if variants else [],
        include=_yaml_list(github_matrix(variants, config_path=config)["include"]),
        arm_platform=ARM_PLATFORM,
        arm_runner=ARM_RUNNER,
        arm_count=len(arm),
        arm_variant_keys=list(arm[0].variant_keys()) if arm else [],
        arm_include=_yaml_list(github_matrix(arm, config_path=config)["include"]),
        arm_key_lines=[f'"{k}": {hosts}' for k, hosts in
                       dict.fromkeys((runner_key(v), _arm_hosts(v, arm)) for v in arm)],
    )
    locks = _env().get_template(LOCKS_FILE.name).render(**common, include=_yaml_list(env_cuda(facts, variants)),
                                                         conda_lock_spec=CONDA_LOCK_SPEC)
    return {BUILD_FILE: build, LOCKS_FILE: locks}


# --- generate and check ------------------------------------------------------------------------

def _fix(root: Path) -> str:
    return FIX if Path(root) == Path(".") else f"{FIX} --root {root}"


def drift(root: Path, expected: dict[Path, str] | None = None) -> list[CheckFailed]:
    """One CheckFailed per workflow file that differs from what `mmstack ci generate` writes."""
    root = Path(root)
    expected = render(root) if expected is None else expected
    digest = config_digest(root / CONFIG_FILE)
    problems = []
    for rel, text in expected.items():
        path = root / rel
        if not path.is_file():
            problems.append(CheckFailed(f"missing; it is generated from {CONFIG_FILE}",
                                        source=str(rel), fix=_fix(root)))
            continue
        current = path.read_text()
        if current == text:
            continue
        found = _DIGEST_LINE.search(current)
        if found is None or found.group(1) != digest:
            was = found.group(1) if found else "none"
            msg = (f"out of date: {CONFIG_FILE} changed (config digest {digest}, "
                   f"the workflow was generated from {was})")
        else:
            msg = f"differs from what `{FIX}` writes for config digest {digest} (edited by hand?)"
        problems.append(CheckFailed(msg, source=str(rel), fix=_fix(root)))
    return problems


def _raise_first(problems: list[CheckFailed]) -> None:
    if problems:
        first = problems[0]
        if len(problems) > 1:
            first = CheckFailed(first.message + f" (and {len(problems) - 1} more file)",
                                source=first.source, fix=first.fix)
        raise first


def check_workflows(root: Path) -> str:
    """For `mmstack check`: raise CheckFailed on drift; else a one-line summary."""
    expected = render(root)
    _raise_first(drift(root, expected))
    jobs = len(load_matrix(load(), Path(root) / CONFIG_FILE))
    arm = len(load_matrix(load(), Path(root) / CONFIG_FILE, ARM_PLATFORM))
    cross = f"; {arm} {ARM_PLATFORM} build (cross-compiled) and {arm} test jobs" if arm else ""
    return (f"{BUILD_FILE.name} ({jobs} build and {jobs} test jobs{cross}) and {LOCKS_FILE.name} match {CONFIG_FILE} "
            f"(digest {config_digest(Path(root) / CONFIG_FILE)})")


def run_ci_generate(*, root: Path, check: bool, as_json: bool = False) -> int:
    """Write the workflows (or, with check, exit 1 naming the first stale file and the fix)."""
    import json

    root = Path(root)
    if check:
        summary = check_workflows(root)
        print(json.dumps({"ok": True, "summary": summary}) if as_json else summary)
        return 0
    expected = render(root)
    done: dict[str, str] = {}
    for rel, text in expected.items():
        path = root / rel
        if path.is_file() and path.read_text() == text:
            done[str(rel)] = "unchanged"
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        done[str(rel)] = "written"
    if as_json:
        print(json.dumps({"ok": True, "files": done}, indent=2))
    else:
        for name, what in done.items():
            print(f"{name}: {what}")
    return 0
