"""Argument parsing only: every command calls a keyword-only function and maps errors to exit codes.

Exit codes (docs/architecture.md): 0 all good, 1 a check found a problem, 2 bad input.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from mmstack import report
from mmstack.errors import BadInput, MmstackError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Build, lock and verify MMCV for every NVIDIA GPU generation.",
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("mmstack")
        except PackageNotFoundError:  # run from a source tree that was never installed
            v = "unknown (not installed; pip install -e .)"
        typer.echo(f"mmstack {v}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print mmstack's version and exit.")) -> None:
    """Build, lock and verify MMCV for every NVIDIA GPU generation."""


arch_app = typer.Typer(no_args_is_help=True, help="Arch lists: will this build run on that GPU?")
app.add_typer(arch_app, name="arch")

def _raw_path(value: str | Path) -> Path | str:
    """A path option's value; an empty one stays '' (Path('') is '.', the current directory) for
    `_not_empty` to refuse."""
    return value if isinstance(value, str) and not value.strip() else Path(value)


def _not_empty(ctx: typer.Context, param: typer.CallbackParam, value: object) -> object:
    """An empty string given for an option or argument is bad input (exit 2), never a default."""
    if isinstance(value, str) and not value.strip():
        opts = [o for o in param.opts if o.startswith("--")]
        name = opts[0] if opts else (param.name or "argument").upper()
        raise BadInput(f"{name} is empty", source="command line",
                       fix=f"give {name} a value" + ("" if param.required else ", or leave it out for its default"))
    return value


JSON = typer.Option(False, "--json", help="Machine-readable output for CI.")


@app.command()
def gpus(name: str | None = typer.Argument(None, callback=_not_empty, help="A GPU name or alias, e.g. 'RTX 4090' (as nvidia-smi prints it)."),
         arch: str | None = typer.Option(None, "--arch", callback=_not_empty, help="Only GPUs of this compute capability or major: 8.6, sm_86, 8 (or 8.x)."),
         env: str | None = typer.Option(None, "--env", callback=_not_empty, help="Only GPUs this environment runs (natively or not), or 'none'."),
         json: bool = JSON) -> None:
    """Known GPUs: compute capability, first CUDA, the environment that serves each (or none); or one GPU's facts."""
    from mmstack.commands.facts_cmds import run_gpus

    raise typer.Exit(run_gpus(name=name, arch=arch, env=env, as_json=json))


@arch_app.command("check")
def arch_check(
    gpu: str | None = typer.Option(None, "--gpu", callback=_not_empty, help="GPU name, e.g. 'RTX 5090' or 'NVIDIA A100-SXM4-80GB'."),
    cc: str | None = typer.Option(None, "--cc", callback=_not_empty, help="The GPU's compute capability (8.6 or sm_86), for a name the facts lack."),
    arch_list: str | None = typer.Option(None, "--arch-list", callback=_not_empty, help="e.g. '8.9;9.0+PTX', 'sm_90', a -gencode flag."),
    package: Path | None = typer.Option(None, "--package", parser=_raw_path, callback=_not_empty, help="A .whl, .conda, .tar.bz2 or .so: read its SASS/PTX instead of --arch-list."),
    glibc: str | None = typer.Option(None, "--glibc", callback=_not_empty, help="With --package: the glibc of the system it is for (default: this machine's); a package needing a newer one fails."),
    cuda: str | None = typer.Option(None, "--cuda", callback=_not_empty, help="CUDA toolkit that builds it, e.g. 12.8 (with --arch-list)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress line (megabytes read, for a package over 100 MB) on stderr."),
    channel: list[str] | None = typer.Option(None, "--channel", help="Instead: which mmcv build of these channels (repeat it: ./channel, conda-forge) a solver installs for the GPU (its __cuda_arch; --cuda: the driver's CUDA)."),
    json: bool = JSON,
) -> None:
    """Will a build (an arch list, or a package's CUDA code) run on GPU? Exit 0 runs (warnings for JIT/lower minor), 1 not."""
    from mmstack.commands.facts_cmds import run_arch_channel, run_arch_check

    if channel:
        raise typer.Exit(run_arch_channel(gpu=gpu, cc=cc, channels=channel, cuda=cuda, as_json=json))

    raise typer.Exit(run_arch_check(gpu=gpu, cc=cc, arch_list=arch_list, package=package, cuda=cuda, as_json=json,
                                    glibc=glibc, quiet=quiet))


@app.command()
def matrix(
    format: str = typer.Option("table", "--format", help="table, json or github."),
    config: Path = typer.Option(Path("conda_build_config.yaml"), "--config", parser=_raw_path, callback=_not_empty, help="Variant config file."),
    target_platform: str = typer.Option("linux-64", "--target-platform", help="linux-64 or linux-aarch64: the rows the config's selectors keep for it."),
) -> None:
    """The rendered, validated variant matrix."""
    from mmstack.commands.facts_cmds import run_matrix

    raise typer.Exit(run_matrix(fmt=format, config=config, target_platform=target_platform))


@app.command()
def check(root: Path = typer.Option(Path("."), "--root", parser=_raw_path, callback=_not_empty, help="Repository root."), json: bool = JSON,
          strict: bool = typer.Option(False, "--strict", help="A stage that did not run (SKIP) is a failure (CI).")) -> None:
    """Validate facts, variants, recipes, pixi.toml, workflows and locks together."""
    from mmstack.commands.check_cmd import run_check

    raise typer.Exit(run_check(root=root, as_json=json, strict=strict))


@app.command()
def verify(
    levels: str | None = typer.Option(None, "--levels", callback=_not_empty, help="Comma-separated, e.g. L1,L3,L4 (default: all)."),
    json: bool = JSON,
    expect_gpu: bool = typer.Option(False, "--expect-gpu", help="No usable GPU is a FAIL, not a SKIP."),
    python: str | None = typer.Option(None, "--python", callback=_not_empty, help="Verify another environment's interpreter."),
    timeout: float = typer.Option(300.0, "--timeout", min=0.1, help="Seconds each level (each part of one) may take."),
    model: str | None = typer.Option(None, "--model", callback=_not_empty, help="L5 also trains mmdet detectors, and L6 checkpoints them: faster-rcnn, faster-rcnn-mdconv, faster-rcnn-dconv (comma-separated)."),
    nproc: int | None = typer.Option(None, "--nproc", help="L5 also runs the step under torchrun with N ranks (NCCL on N GPUs, else gloo)."),
    l4: str = typer.Option("quick", "--l4", help="L4 mode: quick (5 ops) or complete (every op mmcv.ops exports, each compared with the CPU kernel, torch/torchvision or known values, or listed as run-only)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress line (the level running, its time last run) on stderr."),
) -> None:
    """The L1..L6 ladder (import, CUDA, ops load, ops run, train, checkpoints) in one child process; a crash costs a fresh one."""
    from mmstack.commands.ladder_cmds import run_verify

    raise typer.Exit(run_verify(levels=levels, as_json=json, expect_gpu=expect_gpu, python=python, timeout=timeout,
                                model=model, nproc=nproc, l4=l4, quiet=quiet))


@app.command()
def fatbin(path: Path = typer.Argument(..., parser=_raw_path, callback=_not_empty, help="An .so, .whl, .conda or .tar.bz2."),
           expect: str | None = typer.Option(None, "--expect", help="Exit 1 unless the archs equal this list, e.g. '8.9' or '9.0;12.0+PTX'."),
           json: bool = JSON) -> None:
    """SASS and PTX archs inside a shared object or a package holding some.

    Family-specific code prints with its suffix (10.0f, 12.0f) where `cuobjdump --list-elf` prints
    sm_100 / sm_120: cuobjdump drops the 'f'; it is the same entry."""
    from mmstack.commands.ladder_cmds import run_fatbin

    raise typer.Exit(run_fatbin(path=path, as_json=json, expect=expect))


@app.command()
def doctor(json: bool = JSON) -> None:
    """Environment fingerprint (GPU, driver, torch, CUDA, compilers, mmcv archs) and the problems found."""
    from mmstack.commands.doctor_cmds import run_doctor

    raise typer.Exit(run_doctor(as_json=json))


@app.command()
def detect(
    channel: list[str] | None = typer.Option(None, "--channel", help="Also: which mmcv build of these channels (repeat it) the solver installs here."),
    json: bool = JSON,
) -> None:
    """Local GPU(s), driver, this machine's __cuda_arch, and which environment to use."""
    from mmstack.commands.doctor_cmds import run_detect

    raise typer.Exit(run_detect(as_json=json, channels=channel or []))


@app.command()
def build(
    env: str | None = typer.Option(None, "--env", callback=_not_empty, help="Build the variants this environment takes (see `matrix`)."),
    all_: bool = typer.Option(False, "--all", help="Build every variant of the matrix."),
    channel: Path = typer.Option(Path("channel"), "--channel", parser=_raw_path, callback=_not_empty, help="Local channel directory (created if missing)."),
    recipe: list[str] | None = typer.Option(None, "--recipe", help="Recipe name under recipes/ or a directory (repeatable; default: mmstack, mmcv, mmdet)."),
    source_channel: list[str] | None = typer.Option(None, "--source-channel", help="Where dependencies come from (repeatable; default: conda-forge)."),
    no_test: bool = typer.Option(False, "--no-test", help="Skip the recipes' test sections (L1-L4 in the sandbox)."),
    root: Path = typer.Option(Path("."), "--root", parser=_raw_path, callback=_not_empty, help="Repository root (recipes/, conda_build_config.yaml)."),
    variant: list[str] | None = typer.Option(None, "--variant", help="KEY=VALUE replacing a variant key's values for this build, e.g. cuda_compiler_version=13.0 (repeatable; --env then selects on the other keys)."),
    keep_build: bool = typer.Option(False, "--keep-build", help="Keep the build tree (--work-dir's mmstack-build-tree; the next build there empties it)."),
    work_dir: Path | None = typer.Option(None, "--work-dir", parser=_raw_path, callback=_not_empty, help="Where build trees go (default: the system temp dir)."),
    log: Path | None = typer.Option(None, "--log", parser=_raw_path, callback=_not_empty, help="Also write rattler-build's full log (build and test output) to this file."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress line (units compiled, ETA, the test running) on stderr."),
    target_platform: str = typer.Option("linux-64", "--target-platform", help="linux-64, or linux-aarch64: the config's aarch64 rows, cross-compiled here (test sections skipped)."),
    json: bool = JSON,
) -> None:
    """Build the recipes into a local channel and index it (all or nothing per recipe)."""
    from mmstack.commands.build_cmds import run_build_cmd

    raise typer.Exit(run_build_cmd(root=root, channel=channel, env=env, build_all=all_, recipes=recipe,
                                   extra_channels=source_channel, test=not no_test, as_json=json,
                                   variant=variant, keep_build=keep_build, work_dir=work_dir, log=log,
                                   quiet=quiet, target_platform=target_platform))


@app.command("test")
def test_(
    package: list[Path] = typer.Argument(..., parser=_raw_path, help="Package file(s) to test (.conda), e.g. built with `build --no-test`."),
    channel: Path = typer.Option(Path("channel"), "--channel", parser=_raw_path, callback=_not_empty, help="Local channel with the packages' siblings (used if it exists)."),
    source_channel: list[str] | None = typer.Option(None, "--source-channel", help="Where dependencies come from (repeatable; default: conda-forge)."),
    log: Path | None = typer.Option(None, "--log", parser=_raw_path, callback=_not_empty, help="Also write rattler-build's full test output to this file."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress line (the test running) on stderr."),
    json: bool = JSON,
) -> None:
    """Run a built package's own test section on this machine (build on CPUs, test on the GPU)."""
    from mmstack.commands.build_cmds import run_test_cmd

    raise typer.Exit(run_test_cmd(packages=package, channel=channel, extra_channels=source_channel, as_json=json,
                                  log=log, quiet=quiet))


channel_app = typer.Typer(no_args_is_help=True, help="Local conda channels.")
app.add_typer(channel_app, name="channel")


@channel_app.command("index")
def channel_index(path: Path = typer.Argument(..., parser=_raw_path, callback=_not_empty, help="Channel directory (subdirs holding packages)."),
                  quiet: bool = typer.Option(False, "--quiet", help="No progress line (packages read, for channels of over 200) on stderr."),
                  json: bool = JSON) -> None:
    """(Re)index a local channel atomically."""
    from mmstack.commands.build_cmds import run_channel_index

    raise typer.Exit(run_channel_index(path=path, as_json=json, quiet=quiet))


@channel_app.command("page")
def channel_page(path: Path = typer.Argument(..., parser=_raw_path, callback=_not_empty, help="An indexed channel directory."),
                 out: Path | None = typer.Option(None, "--out", parser=_raw_path, callback=_not_empty, help="Where to write the page (default: DIR/index.html)."),
                 source_channel: list[str] | None = typer.Option(None, "--source-channel", help="Where mmcv's dependencies come from for the solves (repeatable; default: conda-forge)."),
                 url: str | None = typer.Option(None, "--url", callback=_not_empty, help="Where the channel is published (the install commands name it; default: wherever the page is opened from)."),
                 no_solve: bool = typer.Option(False, "--no-solve", help="Offline: pick each GPU's build by the arch rules over the channel's fatbins, not by a solve."),
                 quiet: bool = typer.Option(False, "--quiet", help="No progress line on stderr."),
                 json: bool = JSON) -> None:
    """Write a static page: packages x GPU generations (tested, predicted, will not run) and a GPU-name box."""
    from mmstack.commands.build_cmds import run_channel_page

    raise typer.Exit(run_channel_page(path=path, out=out, source_channels=None if no_solve else (source_channel or None),
                                      solve=not no_solve, as_json=json, url=url, quiet=quiet))


ci_app = typer.Typer(no_args_is_help=True, help="CI workflows generated from the variant matrix.")
app.add_typer(ci_app, name="ci")


@ci_app.command("generate")
def ci_generate(
    check: bool = typer.Option(False, "--check", help="Write nothing; exit 1 if a workflow is out of date."),
    root: Path = typer.Option(Path("."), "--root", parser=_raw_path, callback=_not_empty, help="Repository root."),
    json: bool = JSON,
) -> None:
    """Write .github/workflows/build.yml and locks.yml from conda_build_config.yaml (or check them)."""
    from mmstack.ci.workflows import run_ci_generate

    raise typer.Exit(run_ci_generate(root=root, check=check, as_json=json))


lock_app = typer.Typer(help="Lockfiles per GPU generation: `mmstack lock` writes them, `mmstack lock check` gates CI.")
app.add_typer(lock_app, name="lock")
ENV_OPT = typer.Option(None, "--env", help="An environment of pixi.toml (repeatable; default: all).")
CHANNEL_OPT = typer.Option(None, "--channel", help="Channel name, URL or local path (repeatable; default: pixi.toml's).")
ROOT_OPT = typer.Option(Path("."), "--root", parser=_raw_path, callback=_not_empty, help="Repository root (pixi.toml, conda_build_config.yaml, envs/).")


@lock_app.callback(invoke_without_command=True)
def lock(
    ctx: typer.Context,
    env: list[str] | None = ENV_OPT,
    channel: list[str] | None = CHANNEL_OPT,
    root: Path = ROOT_OPT,
    yml_only: bool = typer.Option(False, "--yml-only", help="Only (re)write envs/<env>.yml from pixi.toml; no solve."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress line (the environment being solved, i of n) on stderr."),
    json: bool = JSON,
) -> None:
    """Solve every environment with py-rattler; write pixi.lock and envs/*.conda-lock.yml (all or nothing)."""
    if ctx.invoked_subcommand is not None:
        return
    from mmstack.commands.lock_cmds import run_lock

    raise typer.Exit(run_lock(root=root, envs=env or None, channels=channel or None, yml_only=yml_only, as_json=json,
                             quiet=quiet))


@lock_app.command("check")
def lock_check(
    env: list[str] | None = ENV_OPT,
    channel: list[str] | None = CHANNEL_OPT,
    root: Path = ROOT_OPT,
    require_lock: bool = typer.Option(False, "--require-lock", help="No pixi.lock is a failure (for a tree that commits its lock)."),
    json: bool = JSON,
) -> None:
    """Exit 1 with one line per problem when a lock is stale or breaks the policy for its generation."""
    from mmstack.commands.lock_cmds import run_lock_check

    raise typer.Exit(run_lock_check(root=root, envs=env or None, channels=channel or None, require_lock=require_lock,
                                    as_json=json))


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors, distinct exit codes, no tracebacks for known problems.

    typer runs in standalone mode, so a usage error (unknown command or option, missing argument)
    is reported by typer itself, usage line and all, with exit 2, whichever click it carries (typer
    >= 0.26 vendors its own as `typer._click`; older ones import click): mmstack names neither.
    Every exit, a command's return code included, arrives here as SystemExit. SIGINT and SIGTERM
    end a command through commands/interrupts.py: one line, exit 130 / 143, its children ended."""
    from mmstack.commands import interrupts

    previous = interrupts.install()
    try:
        code = _run(argv, interrupts)
    except BaseException:  # whatever an interrupted native call raised on its way out; else a bug's traceback
        _if_interrupted(interrupts, argv)
        raise
    finally:
        interrupts.restore(previous)
    if argv is None:  # the program (the mmstack script, python -m mmstack[.cli]), not a caller in-process
        _leave_if_native_threads(code)
    return code


NATIVE = ("rattler", "rattler_build")  # py-rattler(-build): tokio worker threads that outlive the command


def _leave_if_native_threads(code: int) -> None:
    """Leave through os._exit once py-rattler or py-rattler-build ran: their tokio threads can call
    into an interpreter that is finalizing ("PyGILState_Release: thread state ... must be current",
    exit -6; seen once on `arch check --channel` on a loaded CI machine). commands/interrupts.py leaves
    an interrupted command the same way. Nothing of mmstack's needs finalization: files are written
    and closed inside the commands; stdout and stderr are flushed here."""
    if not any(name in sys.modules for name in NATIVE):
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _run(argv: list[str] | None, interrupts) -> int:
    try:
        app(args=argv, prog_name="mmstack", standalone_mode=True)
    except SystemExit as exc:
        _if_interrupted(interrupts, argv)
        return _exit_code(exc.code)
    except MmstackError as exc:
        _if_interrupted(interrupts, argv)
        report.error_line(exc.one_line())
        if _wants_json(sys.argv[1:] if argv is None else argv):
            report.print_json({"ok": False, "error": error_doc(exc)})
        return exc.exit_code
    return 0


def _if_interrupted(interrupts, argv: list[str] | None) -> None:
    """Leave with the interrupt's line and exit code (130 SIGINT, 143 SIGTERM) if one is unwinding;
    an error raised while it unwound (a build whose script was killed) is its consequence. With
    --json, stdout gets the error document as for any other stop."""
    exc = interrupts.raised()
    if exc is None:
        return

    def say(line: str) -> None:
        report.info(line)
        if _wants_json(sys.argv[1:] if argv is None else argv):
            report.print_json({"ok": False, "error": {"kind": "Interrupted", "exit_code": exc.exit_code,
                                                      "message": line, "source": None, "fix": None, "line": line}})

    interrupts.exit_interrupted(exc, say)


def _wants_json(args: list[str]) -> bool:
    """--json among the options (before a `--`): a CI step parsing stdout gets a JSON answer on error too."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


def error_doc(exc: MmstackError) -> dict:
    """The error as JSON: what `--json` prints on stdout when a command stops on one (stderr keeps the line)."""
    return {"kind": type(exc).__name__, "exit_code": exc.exit_code, "message": exc.message,
            "source": exc.source, "fix": exc.fix, "line": exc.one_line()}


def _exit_code(code: object) -> int:
    """SystemExit's code as an exit status: None is 0, a message (never one of ours) is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    report.error_line(str(code))
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
