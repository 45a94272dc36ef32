"""`kitctl results list [DIR]`: every result file in a folder, one line each.

kitctl artifacts (final and partial) and reference-runner files; a file that cannot be read is
listed with the reason instead of stopping the listing.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import benchmarks
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
    """The result's figures in one line (its benchmark's own words), "—" when it has none yet."""
    return benchmarks.get(src.benchmark).headline(src) or "—"


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
        engines = list(dict.fromkeys(e for e, *_ in benchmarks.get(src.benchmark).cells(src)))
        state = src.state if src.kind == KITCTL else "reference"
        if path.name.endswith(".partial.json"):
            state += " (partial)"
        out.append(Entry(path.name, src.benchmark, _date(src.created), src.machine_short, ", ".join(engines),
                         headline(src), state))
    return out
