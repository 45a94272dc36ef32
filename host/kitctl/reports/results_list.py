"""`kitctl results list [DIR]`: every result file in a folder, one line each.

kitctl artifacts (final and partial) and reference-runner files; a file that cannot be read is
listed with the reason instead of stopping the listing. Other JSON files, and `*.json` names that
are no regular file (FIFO, device) or a symlink out of the folder, are listed apart, never opened
or followed (`is_result`). A "running" partial whose writer is gone (its lock is free) says so.
"""
from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

from .. import benchmarks
from ..core.artifact import PARTIAL_SUFFIX, ArtifactError, being_written
from ..core.fileio import escapes
from .sources import KITCTL, UnknownKind, load_source


@dataclass(frozen=True)
class Entry:
    name: str
    benchmark: str
    date: str
    gpu: str
    engines: str
    headline: str
    state: str


def _date(iso: str | None) -> str:
    if not iso:
        return "—"
    return iso.replace("T", " ")[:16] + " UTC" if len(iso) >= 16 else iso


def headline(src) -> str:
    """The result's figures in one line (its benchmark's own words), "—" when it has none yet."""
    return benchmarks.get(src.benchmark).headline(src) or "—"


# The states of files that are not results: listed apart from them (`is_result`).
OTHER_JSON, SKIPPED = "other JSON", "skipped"


def is_result(e: Entry) -> bool:
    return e.state not in (OTHER_JSON, SKIPPED)


def _skip_reason(path: Path, folder: Path) -> str | None:
    """Why a `*.json` name is not even opened: a symlink out of the folder, or no regular file."""
    if escapes(path, folder):
        return "a symlink out of the folder: not followed"
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"cannot stat: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        return "a directory" if stat.S_ISDIR(mode) else "not a regular file (FIFO, device or socket): not read"
    return None


def list_results(folder: Path) -> list[Entry]:
    try:
        if not folder.exists():
            raise ArtifactError(f"no such directory: {folder}")
        if not folder.is_dir():
            raise ArtifactError(f"{folder} is not a directory")
        paths = sorted(folder.glob("*.json"))
    except OSError as exc:  # a name too long, a folder that cannot be read
        raise ArtifactError(f"cannot read {folder}: {exc.strerror or exc}") from None
    out = []
    for path in paths:
        skip = _skip_reason(path, folder)
        if skip:
            out.append(Entry(path.name, "—", "—", "—", "—", skip, SKIPPED))
            continue
        try:
            src = load_source(path)
        except UnknownKind:
            out.append(Entry(path.name, "—", "—", "—", "—", "not a benchmark result", OTHER_JSON))
            continue
        except ArtifactError as exc:
            why = str(exc).replace(str(path), "", 1).lstrip(": ").strip()
            out.append(Entry(path.name, "?", "—", "—", "—", why[:160], "unreadable"))
            continue
        engines = list(dict.fromkeys(e for e, *_ in benchmarks.get(src.benchmark).cells(src)))
        state = src.state if src.kind == KITCTL else "reference"
        if path.name.endswith(PARTIAL_SUFFIX):
            if state == "running" and not being_written(path):
                state = "crashed: no kitctl writes it (--resume continues it)"
            state += " (partial)"
        out.append(Entry(path.name, src.benchmark, _date(src.created), src.machine_short, ", ".join(engines),
                         headline(src), state))
    return out
