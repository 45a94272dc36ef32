"""`kitctl results list [DIR]`: every result file in a folder, one line each, newest first.

DIR defaults to results/, the user's own; the project's reference results (results/reference/)
are not mixed in: one line after the table says where they are.

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
REFERENCE = "reference"  # the project's committed results, kept apart from the user's (results/reference/)


def is_result(e: Entry) -> bool:
    return e.state not in (OTHER_JSON, SKIPPED)


def newest_first(keyed: list[tuple[str, Entry]]) -> list[Entry]:
    """Newest first by creation time (the run just made on top); files without a date last, by name."""
    dated = sorted((k for k in keyed if k[0]), key=lambda k: (k[0], k[1].name), reverse=True)
    return [e for _, e in dated] + sorted((e for k, e in keyed if not k), key=lambda e: e.name)


def reference_dir(folder: Path) -> Path | None:
    """The project's reference results beside the user's (folder/reference), when there are some."""
    ref = folder / REFERENCE
    try:
        return ref if ref.is_dir() and any(ref.glob("*.json")) else None
    except OSError:
        return None


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
    out: list[tuple[str, Entry]] = []  # (created ISO time or "", entry)
    for path in paths:
        skip = _skip_reason(path, folder)
        if skip:
            out.append(("", Entry(path.name, "—", "—", "—", "—", skip, SKIPPED)))
            continue
        try:
            src = load_source(path)
        except UnknownKind:
            out.append(("", Entry(path.name, "—", "—", "—", "—", "not a benchmark result", OTHER_JSON)))
            continue
        except ArtifactError as exc:
            why = str(exc).replace(str(path), "", 1).lstrip(": ").strip()
            out.append(("", Entry(path.name, "?", "—", "—", "—", why[:160], "unreadable")))
            continue
        engines = list(dict.fromkeys(e for e, *_ in benchmarks.get(src.benchmark).cells(src)))
        state = src.state if src.kind == KITCTL else "reference"
        if path.name.endswith(PARTIAL_SUFFIX):
            if state == "running" and not being_written(path):
                state = "crashed: no kitctl writes it (--resume continues it)"
            state += " (partial)"
        out.append((src.created or "", Entry(path.name, src.benchmark, _date(src.created), src.machine_short,
                                             ", ".join(engines), headline(src), state)))
    return newest_first(out)
