"""Argument parsing only: every command calls a keyword-only function and maps errors to exit codes.

Exit codes (DESIGN.md): 0 all good, 1 a check found a problem, 2 bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from . import report
from .errors import MmstackError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Build, lock and verify MMCV for every NVIDIA GPU generation.",
)
arch_app = typer.Typer(no_args_is_help=True, help="Arch lists: will this build run on that GPU?")
app.add_typer(arch_app, name="arch")

JSON = typer.Option(False, "--json", help="Machine-readable output for CI.")


@app.command()
def gpus(name: Optional[str] = typer.Argument(None, help="A GPU name or alias, e.g. 'RTX 4090'."),
         json: bool = JSON) -> None:
    """Known GPUs and their generations; or one GPU's facts."""
    from .commands.facts_cmds import run_gpus

    raise typer.Exit(run_gpus(name=name, as_json=json))


@arch_app.command("check")
def arch_check(
    gpu: str = typer.Option(..., "--gpu", help="GPU name, e.g. 'RTX 5090'."),
    arch_list: str = typer.Option(..., "--arch-list", help="e.g. '8.9;9.0+PTX', 'sm_90', a -gencode flag."),
    cuda: Optional[str] = typer.Option(None, "--cuda", help="CUDA toolkit that builds it, e.g. 12.8."),
    json: bool = JSON,
) -> None:
    """Will a build with ARCH_LIST run on GPU? Exit 0 runs natively (warnings for JIT/lower minor), 1 not."""
    from .commands.facts_cmds import run_arch_check

    raise typer.Exit(run_arch_check(gpu=gpu, arch_list=arch_list, cuda=cuda, as_json=json))


@app.command()
def matrix(
    format: str = typer.Option("table", "--format", help="table, json or github."),
    config: Path = typer.Option(Path("conda_build_config.yaml"), "--config", help="Variant config file."),
) -> None:
    """The rendered, validated variant matrix."""
    from .commands.facts_cmds import run_matrix

    raise typer.Exit(run_matrix(fmt=format, config=config))


@app.command()
def check(root: Path = typer.Option(Path("."), "--root", help="Repository root."), json: bool = JSON) -> None:
    """Validate facts, variants, recipes, pixi.toml, workflows and locks together."""
    from .commands.check_cmd import run_check

    raise typer.Exit(run_check(root=root, as_json=json))


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors, distinct exit codes, no tracebacks for known problems."""
    try:
        result = app(args=argv, standalone_mode=False)
        return int(result or 0)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except MmstackError as exc:
        report.error_line(exc.one_line())
        return exc.exit_code
    except (typer.BadParameter, typer.Abort) as exc:  # pragma: no cover - click handles most
        report.error_line(str(exc))
        return 2
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            report.error_line(exc.format_message() + " (see --help)")
            return 2
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
