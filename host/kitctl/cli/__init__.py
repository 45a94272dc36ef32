"""The `kitctl` command line: the typer app and its commands, the live progress view, the flags' help
(the only place that imports typer; exit codes and the one-line error: kitctl.errors)."""
from .app import app, command, main, version_text

__all__ = ["app", "command", "main", "version_text"]
