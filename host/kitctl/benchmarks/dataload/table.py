"""dataload's rows: one per loader × encoding × side × source × workers (end table, report, plots)."""
from __future__ import annotations

from typing import Any

from ...core.stats import median
from ..data.caveats import FFCV_PUBLISHED_LOAD
from ...reports.format import interval, unfinished
from ...core.loader_window import steady_text


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for c in doc["results"]:
        s = c.get("summary") or {}
        cores = next((r.get("cpu_count") for r in c["runs"] if r.get("cpu_count")), None)
        out.append({"loader": c["loader"], "encoding": c["encoding"], "side": c["side"],
                    "source": source_label(doc, c["source"]),
                    "workers": c["workers"], "status": c["status"], "reason": c.get("reason", ""),
                    "median": s.get("median"), "ci_low": s.get("ci_low"), "ci_high": s.get("ci_high"),
                    "ci_level": s.get("ci_level"), "runs": len(c["runs"]), "cores": cores,
                    "runs_ok": sum(1 for r in c["runs"] if r.get("status") == "ok"),
                    "per_worker": s["median"] / c["workers"] if s.get("median") else None,
                    "ffcv_published": FFCV_PUBLISHED_LOAD.get((c["loader"], c["encoding"], c["side"], c["source"])),
                    **window_columns(c)})
    return out


def window_columns(c: dict[str, Any]) -> dict[str, Any]:
    """A cell's start-up (median over its runs, apart from the steady figure), its window (median images and
    seconds over its runs) and steadiness; None where the runs were timed before the window rule."""
    def med(key: str) -> float | None:
        xs = [r[key] for r in c["runs"] if r.get("status") == "ok" and isinstance(r.get(key), (int, float))]
        return median(xs) if xs else None

    st = c.get("steadiness") or {}
    return {"startup": med("startup_seconds"), "window_images": med("images"), "window_s": med("window_seconds"),
            "steady": st.get("steady"), "steady_why": st.get("why")}


def has_window_rule(doc: dict[str, Any]) -> bool:
    """Whether the run was measured under the window rule (artifacts from before it keep their table)."""
    return isinstance(doc["configuration"].get("window_rule"), str)


def source_label(doc: dict[str, Any], source: str) -> str:
    """cold, or `cold @ N MB/s` when the run capped the loaders' reads (--read-mbps)."""
    mbps = doc["configuration"].get("read_mbps")
    return f"cold @ {mbps:g} MB/s" if source == "cold" and mbps else source


def unfinished_text(doc: dict[str, Any], r: dict[str, Any]) -> str:
    return unfinished(r["status"], r["reason"], r["runs_ok"], doc["configuration"].get("runs"))


def all_ok(doc: dict[str, Any]) -> bool:
    return bool(doc["results"]) and all(c["status"] == "ok" for c in doc["results"])


def _n(x: Any) -> str:
    return "—" if x is None else f"{x:,.0f}"


def table_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    if has_window_rule(doc):
        return window_table_rows(doc)
    head = ["Loader", "Data", "Source", "Workers", "images/s (median)", "interval", "per worker", "runs",
            "FFCV published (96 vCPU)"]
    body = []
    for r in rows(doc):
        data = f"{r['encoding']}@{r['side']}"
        if r["status"] != "ok":
            body.append([r["loader"], data, r["source"], str(r["workers"]), unfinished_text(doc, r), "", "", str(r["runs"]), ""])
            continue
        ci = interval(r["ci_level"], r["ci_low"], r["ci_high"], digits=0)
        body.append([r["loader"], data, r["source"], str(r["workers"]), _n(r["median"]),
                     ci, _n(r["per_worker"]), str(r["runs"]),
                     _n(r["ffcv_published"]) if r["ffcv_published"] else ""])
    return head, body


def window_table_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Under the window rule: the steady figure, the start-up apart, the window's images and seconds, steadiness."""
    head = ["Loader", "Data", "Source", "Workers", "images/s (median, steady)", "interval", "per worker", "start-up s",
            "window", "steady", "runs", "FFCV published (96 vCPU)"]
    body = []
    for r in rows(doc):
        data = f"{r['encoding']}@{r['side']}"
        if r["status"] != "ok":
            body.append([r["loader"], data, r["source"], str(r["workers"]), unfinished_text(doc, r), "", "", "", "", "",
                         str(r["runs"]), ""])
            continue
        ci = interval(r["ci_level"], r["ci_low"], r["ci_high"], digits=0)
        window = ("—" if r["window_images"] is None or r["window_s"] is None
                  else f"{r['window_images']:,.0f} img · {r['window_s']:.1f} s")
        body.append([r["loader"], data, r["source"], str(r["workers"]), _n(r["median"]), ci, _n(r["per_worker"]),
                     "—" if r["startup"] is None else f"{r['startup']:.2f}", window, steady_text(r["steady"]),
                     str(r["runs"]), _n(r["ffcv_published"]) if r["ffcv_published"] else ""])
    return head, body


def print_table(console, doc: dict[str, Any], final) -> None:
    from rich.table import Table

    head, body = table_rows(doc)
    t = Table(title=f"Data loading, images/s (decode → RandomResizedCrop 224 → flip) — {final}")
    for h in head:
        t.add_column(h, justify="left" if h in ("Loader", "Data", "Source") else "right")
    if has_window_rule(doc):
        body = [[*r[:9], "[yellow]NOT STEADY[/yellow]" if r[9] == "NOT STEADY" else r[9], *r[10:]] for r in body]
    for r in body:
        t.add_row(*r)
    console.print(t)
