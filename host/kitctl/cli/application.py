"""The `kitctl` command line (typer): the app, its command groups and the console entry point.

`kitctl run <benchmark>` commands come from the benchmark registry (kitctl.benchmarks): each
benchmark's command parses its flags into its typed config and starts the run through
kitctl.run.session. Exit codes and the one-line error: kitctl.errors (a command ends by raising its Exit).
"""
from __future__ import annotations

import sys
from typing import Any

import typer

from .. import benchmarks
from ..core import signals
from ..core.signals import Interrupted
from ..errors import EXIT_INTERRUPTED, EXIT_USAGE, Exit, err
from . import images as images_cli
from .clean import clean
from .doctor import doctor
from .reports import register as register_reports


app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Containerized benchmarks for deep-learning engines: max batch, training throughput, data loading.")


def version_text() -> str:
    """"kitctl 0.1.0 (commit 1a2b3c4d5e6f, dirty)": the version and the commit the code came from."""
    from .. import __version__
    from ..core.provenance import git_state

    try:
        state = git_state()
    except ValueError:  # a malformed stamp or KITCTL_GIT_* variable: the version still answers
        state = None
    if state is None or not state.commit:
        return f"kitctl {__version__} (commit unknown)"
    return f"kitctl {__version__} (commit {state.commit[:12]}{', dirty' if state.dirty else ''})"


def _print_version(value: bool) -> None:
    if value:
        print(version_text())
        raise typer.Exit(0)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the kit's version and commit, and exit.")) -> None:
    """Containerized benchmarks for deep-learning engines: max batch, training throughput, data loading."""
run_app = typer.Typer(no_args_is_help=True, help="Run a benchmark.")
app.add_typer(run_app, name="run")
for _b in benchmarks.all():
    run_app.command(_b.name)(_b.command)
register_reports(app)  # report, compare, results list
app.add_typer(images_cli.images_app, name="images")
for _b in benchmarks.all():  # a benchmark's own top-level commands (e.g. preparing its data)
    if _b.add_commands is not None:
        _b.add_commands(app)
app.command("doctor")(doctor)
app.command("clean")(clean)


def _hide_flag_types(cmd: Any) -> Any:
    """typer's rich help shows `<bool>` beside a flag, which reads as if it took a value
    (`--cudnn-benchmark true` is then an extra argument): flags show no type column."""
    helper = cmd.get_help_option(typer.Context(cmd))  # made on first use: make it now, to reach it
    for p in [*getattr(cmd, "params", []), *([helper] if helper is not None else [])]:
        if getattr(p, "is_flag", False):
            p.metavar = ""
    for sub in getattr(cmd, "commands", {}).values():
        _hide_flag_types(sub)
    return cmd


def command() -> Any:
    """The click command behind `app`, with flags shown as flags."""
    return _hide_flag_types(typer.main.get_command(app))


def _usage_error_types() -> tuple[type, ...]:
    # typer >= 0.29 vendors its own click (and does not install click); older typer re-exports
    # click's classes. Either way the UsageError that typer raises is a base of its BadParameter:
    # find it there rather than importing click, which may not be installed.
    return tuple(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def main() -> None:
    """Console entry point: usage errors become one line, exit 2; a signal, exit 130."""
    signals.install()  # already done by kitctl.entry; here for `from kitctl.cli import main`
    try:
        signals.check()
        rc = command()(standalone_mode=False, prog_name="kitctl")
    except _usage_error_types() as exc:
        if not exc.format_message():  # no_args_is_help: the help was the answer
            sys.exit(EXIT_USAGE)
        hint = f" (see: {exc.ctx.command_path} --help)" if getattr(exc, "ctx", None) else ""
        err.print(f"kitctl: {exc.format_message()}{hint}")
        sys.exit(EXIT_USAGE)
    except Exit as exc:  # a command's end below the CLI (kitctl.errors): its line, if any, already said
        sys.exit(exc.code)
    except (typer.Abort, KeyboardInterrupt):  # typer.Abort is click's Abort in older typer
        err.print("kitctl: aborted")
        sys.exit(EXIT_INTERRUPTED)
    except Interrupted as exc:
        signals.stop_interrupting()
        err.print(f"kitctl: interrupted ({exc})")
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
