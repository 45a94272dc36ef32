"""Where a command's output goes: the result (a table, or with --json one JSON document) on stdout,
everything else (progress, notes) on stderr, so `kitctl … | jq` and `> file` get only the result.

A piped table is not wrapped at 80 columns: off a terminal the console is as wide as the table needs.
`--csv FILE` writes the tables a command prints, cell text only (rich markup stripped).
"""
from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .errors import Fail

# Off a terminal nothing wraps a table's row: as wide as any of ours gets (rich needs a number).
PIPE_WIDTH = 100_000


def stdout_console() -> Console:
    return Console(highlight=False, width=None if sys.stdout.isatty() else PIPE_WIDTH)


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


def check_csv_path(path: Path | None) -> None:
    """Before anything runs: a --csv file that could never be written is refused in one line."""
    if path is None:
        return
    if path.is_dir():
        raise Fail(f"--csv {path}: is a folder; give a file name")
    if not path.parent.is_dir():
        raise Fail(f"--csv {path}: no folder {path.parent}")


def _cell_text(cell: Any) -> str:
    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(str(cell)).plain if isinstance(cell, str) else str(cell)


def table_rows(t: Table) -> list[list[str]]:
    """A rich table as rows of plain text, its header first."""
    cols = t.columns
    out = [[_cell_text(c.header) for c in cols]]
    cells = [list(c.cells) for c in cols]
    for i in range(t.row_count):
        out.append([_cell_text(cells[j][i]) if i < len(cells[j]) else "" for j in range(len(cols))])
    return out


def write_csv(path: Path, tables: list[Table]) -> None:
    """The tables one after another (a blank row between two), written atomically."""
    from .core.fileio import replace_atomically

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for k, t in enumerate(tables):
        if k:
            w.writerow([])
        w.writerows(table_rows(t))
    try:
        replace_atomically(path, lambda tmp: tmp.write_text(buf.getvalue(), encoding="utf-8"))
    except OSError as exc:
        raise Fail(f"cannot write --csv {path}: {exc.strerror or exc}") from None


class ResultOutput:
    """A console-like sink for a command's result: tables go to stdout (to stderr with --json, whose
    document is then stdout's only content), lines likewise; the tables are kept for --csv."""

    def __init__(self, as_json: bool = False, csv_path: Path | None = None) -> None:
        self.as_json = as_json
        self.csv_path = csv_path
        self.out = stderr_console() if as_json else stdout_console()
        self.tables: list[Table] = []

    def print(self, *objects: Any, **kw: Any) -> None:
        self.tables.extend(o for o in objects if isinstance(o, Table))
        self.out.print(*objects, **kw)

    def finish(self, document: Any = None) -> None:
        """Write the CSV (when asked) and, with --json, the one JSON document on stdout."""
        if self.csv_path is not None:
            write_csv(self.csv_path, self.tables)
        if self.as_json:
            sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
            sys.stdout.flush()
