"""dataload's rows: one per loader × encoding × side × source × workers (end table, report, plots)."""
from __future__ import annotations

from typing import Any

from ...core.stats import median
from ..data.caveats import FFCV_PUBLISHED_LOAD
from ...reports.format import interval, unfinished
from ...core.loader_window import steady_text
from .config import DataloadConfig, DataloadRecorded, recorded
from .results import DataloadCell, cells


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    rec = recorded(doc)
    out = []
    for c in cells(doc):
        s = c.summary
        mid, low, high, level = (s.median, s.ci_low, s.ci_high, s.ci_level) if s else (None, None, None, None)
        cores = next((r.cpu_count for r in c.runs if r.cpu_count), None)
        pinned = next((tuple(r.cpus) for r in c.runs if r.cpus), None)  # --cpus: the CPUs its runs were held to
        out.append({"loader": c.loader, "encoding": c.encoding, "side": c.side,
                    "source": source_label(rec, c.source),
                    "workers": c.workers, "cpus": pinned, "status": c.status, "reason": c.reason,
                    "median": mid, "ci_low": low, "ci_high": high, "ci_level": level, "runs": len(c.runs),
                    "cores": cores,
                    "runs_ok": c.runs_ok,
                    "per_worker": mid / c.workers if mid else None,
                    "ffcv_published": FFCV_PUBLISHED_LOAD.get((c.loader, c.encoding, c.side, c.source)),
                    **window_columns(c)})
    return out


def window_columns(c: DataloadCell) -> dict[str, Any]:
    """A cell's start-up (median over its runs, apart from the steady figure), its window (median images and
    seconds over its runs) and steadiness; None where the runs were timed before the window rule."""
    ok = [r for r in c.runs if r.ok]

    def med(xs: list[Any]) -> float | None:
        xs = [x for x in xs if isinstance(x, (int, float))]
        return median(xs) if xs else None

    st = c.steadiness
    return {"startup": med([r.startup_seconds for r in ok]), "window_images": med([r.images for r in ok]),
            "window_s": med([r.window_seconds for r in ok]),
            "steady": st.steady if st is not None else None, "steady_why": st.why if st is not None else None}


def source_label(rec: DataloadRecorded | DataloadConfig, source: str) -> str:
    """cold, or `cold @ N MB/s` when the run capped the loaders' reads (--read-mbps)."""
    mbps = rec.read_mbps
    return f"cold @ {mbps:g} MB/s" if source == "cold" and mbps else source


def unfinished_text(rec: DataloadRecorded, r: dict[str, Any]) -> str:
    return unfinished(r["status"], r["reason"], r["runs_ok"], rec.runs)


def all_ok(doc: dict[str, Any]) -> bool:
    return bool(doc["results"]) and all(c.ok for c in cells(doc))


def workers_text(r: dict[str, Any]) -> str:
    """`8`, or `8 @ CPUs 0-7` for runs held to some CPUs (--cpus)."""
    from ...core.cpus import cpu_ranges

    return str(r["workers"]) + (f" @ CPUs {cpu_ranges(r['cpus'])}" if r.get("cpus") else "")


def _n(x: Any) -> str:
    return "—" if x is None else f"{x:,.0f}"


def table_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    rec = recorded(doc)
    if rec.has_window_rule:
        return window_table_rows(doc, rec)
    head = ["Loader", "Data", "Source", "Workers", "images/s (median)", "interval", "per worker", "runs",
            "FFCV published (96 vCPU)"]
    body = []
    for r in rows(doc):
        data = f"{r['encoding']}@{r['side']}"
        if r["status"] != "ok":
            body.append([r["loader"], data, r["source"], workers_text(r), unfinished_text(rec, r), "", "", str(r["runs"]), ""])
            continue
        ci = interval(r["ci_level"], r["ci_low"], r["ci_high"], digits=0)
        body.append([r["loader"], data, r["source"], workers_text(r), _n(r["median"]),
                     ci, _n(r["per_worker"]), str(r["runs"]),
                     _n(r["ffcv_published"]) if r["ffcv_published"] else ""])
    return head, body


def window_table_rows(doc: dict[str, Any], rec: DataloadRecorded) -> tuple[list[str], list[list[str]]]:
    """Under the window rule: the steady figure, the start-up apart, the window's images and seconds, steadiness."""
    head = ["Loader", "Data", "Source", "Workers", "images/s (median, steady)", "interval", "per worker", "start-up s",
            "window", "steady", "runs", "FFCV published (96 vCPU)"]
    body = []
    for r in rows(doc):
        data = f"{r['encoding']}@{r['side']}"
        if r["status"] != "ok":
            body.append([r["loader"], data, r["source"], workers_text(r), unfinished_text(rec, r), "", "", "", "", "",
                         str(r["runs"]), ""])
            continue
        ci = interval(r["ci_level"], r["ci_low"], r["ci_high"], digits=0)
        window = ("—" if r["window_images"] is None or r["window_s"] is None
                  else f"{r['window_images']:,.0f} img · {r['window_s']:.1f} s")
        body.append([r["loader"], data, r["source"], workers_text(r), _n(r["median"]), ci, _n(r["per_worker"]),
                     "—" if r["startup"] is None else f"{r['startup']:.2f}", window, steady_text(r["steady"]),
                     str(r["runs"]), _n(r["ffcv_published"]) if r["ffcv_published"] else ""])
    return head, body


def print_table(console, doc: dict[str, Any], final) -> None:
    from rich.table import Table

    head, body = table_rows(doc)
    t = Table(title=f"Data loading, images/s (decode → RandomResizedCrop 224 → flip) — {final}")
    for h in head:
        t.add_column(h, justify="left" if h in ("Loader", "Data", "Source") else "right")
    if recorded(doc).has_window_rule:
        body = [[*r[:9], "[yellow]NOT STEADY[/yellow]" if r[9] == "NOT STEADY" else r[9], *r[10:]] for r in body]
    for r in body:
        t.add_row(*r)
    console.print(t)
