"""Markdown cell formatting shared by the report shell and every benchmark's report section."""
from __future__ import annotations

from typing import Any, Callable

from ..core.tables import engine_label


def cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def table(headers: list[str], rows: list[list[Any]], right: set[int] | None = None) -> list[str]:
    right = right or set()
    out = ["| " + " | ".join(headers) + " |",
           "| " + " | ".join("---:" if i in right else "---" for i in range(len(headers))) + " |"]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return out


def fmt_int(x: Any) -> str:
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else "—"


def is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def mib(x: float | None, digits: int = 0) -> str:
    return "—" if x is None else f"{num(x, digits)} MiB"


def num(x: Any, digits: int = 0) -> str:
    """A number with thousands separators; a value the schema lets through that is not a number
    (an older or hand-edited artifact) is shown as written, never a crash."""
    if x is None:
        return "—"
    return f"{x:,.{digits}f}" if is_num(x) else repr(x)


def join(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else (items[0] if items else "")


def heading(level: int) -> Callable[[str], str]:
    return lambda text: "#" * level + " " + text


def cell_label(engine: str, precision: str) -> str:
    """"PyTorch eager fp32": an engine × precision in a sentence."""
    return f"{engine_label(engine)} {precision}"


def interval(level: float | None, low: float | None, high: float | None, digits: int = 1) -> str:
    """A median's interval cell, "95% 1.0–2.0": one run (or too few for the level) has none, "—"."""
    if low is None or high is None:
        return "—"
    lvl = f"{level * 100:.0f}% " if level else ""
    return f"{lvl}{low:,.{digits}f}–{high:,.{digits}f}"


def unfinished(status: str, why: str | None, runs_done: int, runs_asked: int | None) -> str:
    """A cell without a figure: FAILED with its reason, or not yet finished (an interrupted run's partial) with the
    runs it has; a pending cell is not a failure and must not read as one."""
    if status == "failed" or (status not in ("pending", "running") and why):
        return f"FAILED: {why or status}"
    of = f" of {runs_asked}" if runs_asked else ""
    return f"{status} ({runs_done}{of} run{'' if runs_done == 1 and not of else 's'} done)"
