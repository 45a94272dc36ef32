"""The batch finders people already use, beside the kit's answer: `kitctl report --peers FILE` reads the JSON that
`tools/peer_batch_finders.py` writes (Lightning's `scale_batch_size`, accelerate's `find_executable_batch_size`,
each answer with the wall time of its own process) and sets it against the max-batch cell whose cap it ran under
(`--like ARTIFACT`: the same file among the report's results)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.artifact import ArtifactError
from ..core.fileio import NotRegularFile, read_regular
from .compare import pct_change
from .report import span_s
from .sources import Source

TOOL = "tools/peer_batch_finders.py"


@dataclass(frozen=True)
class Finder:
    name: str
    answer: int | None
    wall_s: float | None
    how: str  # its settings, as one phrase
    error: str | None = None


@dataclass(frozen=True)
class Peers:
    path: Path
    engine: str
    precision: str
    like: str | None  # the kitctl artifact whose cap the finders ran under (its file name)
    utc: str | None
    finders: tuple[Finder, ...]


def _how(name: str, f: dict[str, Any]) -> str:
    s = f.get("settings") or {}
    v = f.get("versions") or {}
    if name == "lightning":
        return (f"Lightning {v.get('pytorch_lightning', '?')} `scale_batch_size(mode={s.get('mode', '?')!r}, "
                f"max_val={s.get('max_val', '?')}, margin={s.get('margin', '?')})`, in one process")
    if name == "accelerate":
        return (f"accelerate {v.get('accelerate', '?')} `find_executable_batch_size({s.get('starting_batch_size', '?')})`"
                f", × {s.get('factor_on_failure', '?')} on each failure")
    return name


def load_peers(path: Path) -> Peers:
    """A peer finders' JSON, or one ArtifactError line."""
    try:  # read as result files are: a FIFO or a device is refused, not waited on
        doc = json.loads(read_regular(Path(path)).decode("utf-8"))
    except NotRegularFile as exc:
        raise ArtifactError(f"--peers: {exc}") from None
    except OSError as exc:
        raise ArtifactError(f"--peers {path}: {exc.strerror or exc}") from None
    except ValueError:
        raise ArtifactError(f"--peers {path}: not JSON") from None
    if not isinstance(doc, dict) or doc.get("tool") != TOOL or not isinstance(doc.get("finders"), dict):
        raise ArtifactError(f"--peers {path}: not a file of {TOOL}")
    argv = [str(a) for a in doc.get("argv") or []]
    opt = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}
    like = (doc.get("cap") or {}).get("from") or opt.get("--like")
    finders = []
    for name, f in doc["finders"].items():
        f = f if isinstance(f, dict) else {}
        ans, wall = f.get("answer"), f.get("wall_s")
        finders.append(Finder(name, ans if isinstance(ans, int) else None,
                              float(wall) if isinstance(wall, (int, float)) else None, _how(name, f),
                              str(f["error"]) if f.get("error") else None))
    return Peers(Path(path), opt.get("--engine", "pytorch-eager"), str(doc.get("precision") or opt.get("--precision")),
                 Path(like).name if like else None, doc.get("utc"), tuple(finders))


def _vs(answer: int | None, kit: int | None) -> str:
    if answer is None or not kit:
        return "—"
    if answer == kit:
        return "the same"
    d = pct_change(kit, answer)
    return f"{abs(d):.1f}% {'below' if d < 0 else 'above'}"


def peers_section(peers: list[Peers], sources: list[Source], level: int = 2) -> list[str]:
    """One table per peers file: the kit's cell (when its artifact is among the report's results), then each
    finder's answer against it and its wall time."""
    h = "#" * level
    lines = [f"{h} Beside the batch finders people use", ""]
    for p in peers:
        src = next((s for s in sources if p.like and s.path.name == p.like), None)
        cell = next((c for c in (src.kit_results if src else []) if (c.get("engine"), c.get("precision"))
                     == (p.engine, p.precision)), None)
        kit = cell.get("max_batch") if cell else None
        lines += [f"`{p.path.name}` ({p.engine} {p.precision}, {p.utc or 'time not recorded'}); the finders ran under "
                  + (f"the allocator cap of `{p.like}`'s candidates" if p.like else "a cap of their own")
                  + ("" if src else " (that artifact is not among this report's results: no kit row)") + ".", ""]
        lines += ["| tool | answer | against the kit's | wall time | how |", "| --- | ---: | --- | ---: | --- |"]
        if cell is not None:
            run, search = span_s(src.doc.get("created_utc"), src.doc.get("finished_utc")), cell.get("slots_wall_s")
            wall = (f"{run:,.1f} s" if run is not None else "—") + (f" (search {search:,.1f} s)" if search else "")
            nxt = cell.get("next_batch")
            lines.append(f"| kitctl | **{kit:,}**" + (f" ({nxt:,} fails)" if isinstance(nxt, int) else "")
                         + f" | — | {wall} | fresh process per candidate; start to artifact |" if isinstance(kit, int)
                         else f"| kitctl | — | — | {wall} | {cell.get('reason') or 'no answer'} |")
        for f in p.finders:
            shown = f"{f.answer:,}" if f.answer is not None else f"— ({f.error})" if f.error else "—"
            wall = f"{f.wall_s:,.1f} s" if f.wall_s is not None else "—"
            lines.append(f"| {f.name} | {shown} | {_vs(f.answer, kit if isinstance(kit, int) else None)} | {wall} "
                         f"| {f.how} |")
        lines.append("")
    lines += ["A finder's wall time is its own fresh process, imports included; the kit's is its run's, from start to "
              "artifact (calibration included). Each finder's answer is its own rule's: Lightning stops at `max_val` "
              "and takes `margin` off, accelerate multiplies by its factor on each failure.", ""]
    return lines
