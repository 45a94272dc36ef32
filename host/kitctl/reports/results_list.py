"""`kitctl results list [DIR]`: every result file in a folder, one line each.

kitctl artifacts (final and partial) and reference-runner files; a file that cannot be read is
listed with the reason instead of stopping the listing.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.artifact import ArtifactError
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
    parts = []
    if src.benchmark == "maxbatch":
        for r in src.rows:
            if r.has_figure:
                v = r.figure_text
            elif r.search_status == "invalid_non_memory_failure":
                v = "invalid"
            elif r.search_status == "no_passing_batch":
                v = "no pass"
            else:
                v = "unfinished"
            parts.append(f"{r.engine} {r.precision}: {v}")
    else:
        for t in src.tput:
            parts.append(f"{t.engine} {t.precision}: " + (f"{t.median:,.0f} img/s" if t.median else "no result"))
    return "; ".join(parts) or "—"


def list_results(folder: Path) -> list[Entry]:
    if not folder.exists():
        raise ArtifactError(f"no such directory: {folder}")
    if not folder.is_dir():
        raise ArtifactError(f"{folder} is not a directory")
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            src = load_source(path)
        except UnknownKind:
            out.append(Entry(path.name, "—", "—", "—", "—", "not a benchmark result", "other JSON"))
            continue
        except ArtifactError as exc:
            why = str(exc).replace(str(path), "", 1).lstrip(": ").strip()
            out.append(Entry(path.name, "?", "—", "—", "—", why[:160], "unreadable"))
            continue
        engines = list(dict.fromkeys(r.engine for r in (src.rows or src.tput)))  # type: ignore[attr-defined]
        state = src.state if src.kind == KITCTL else "reference"
        if path.name.endswith(".partial.json"):
            state += " (partial)"
        out.append(Entry(path.name, src.benchmark, _date(src.created), src.machine_short, ", ".join(engines),
                         headline(src), state))
    return out
