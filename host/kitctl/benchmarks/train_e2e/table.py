"""train-e2e's rows: one per model × loader, read against `synthetic` (the training step alone) of the same
model (end table, report, plots), and the verdict: which loader keeps the GPU busy."""
from __future__ import annotations

from typing import Any

from ...reports.format import interval, unfinished
from ...core.loader_window import steady_text
from ...core.stats import Summary
from .config import TrainE2ERecorded, recorded
from .results import cells

# A loader "keeps the GPU busy" when its training images/s reach this share of synthetic's (the same model, medians).
KEEPS_BUSY = 0.95


def _median(s: Summary | None) -> float | None:
    return s.median if s is not None else None


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    typed = cells(doc)
    synth = {c.model: _median(c.summary.train if c.summary else None) for c in typed
             if c.loader == "synthetic" and c.ok}
    out = []
    for c in typed:
        s = c.summary
        train = s.train if s else None
        mid = train.median if train else None
        up = synth.get(c.model)
        st = c.loader_steadiness
        out.append({"model": c.model, "loader": c.loader, "status": c.status, "reason": c.reason,
                    "train": mid, "ci_low": train.ci_low if train else None,
                    "ci_high": train.ci_high if train else None, "ci_level": train.ci_level if train else None,
                    "loader_alone": _median(s.loader if s else None),
                    "busy": _median(s.busy if s else None), "runs": len(c.runs), "runs_ok": c.runs_ok,
                    "loader_startup": _median(s.loader_startup if s else None),
                    "loader_steady": st.steady if st else None, "loader_steady_why": st.why if st else None,
                    "precision": next((r.precision for r in c.runs if r.precision), None),
                    "of_synthetic": mid / up if up and mid is not None else None})
    return out


def busy_what(doc: dict[str, Any], rec: TrainE2ERecorded | None = None) -> str:
    """What a loader keeps busy: the GPU; on a CPU run (every run recorded device cpu, or the run was
    asked for the CPU) the trainer, since there is no GPU to speak of."""
    devices = {r.device for c in cells(doc) for r in c.runs if r.device}
    asked = (rec or recorded(doc)).device
    return "trainer" if devices == {"cpu"} or (not devices and asked == "cpu") else "GPU"


def verdict(doc: dict[str, Any]) -> list[str]:
    """One sentence per model: the loaders within KEEPS_BUSY of synthetic, or the closest one and its share."""
    what = busy_what(doc)
    out = []
    by_model: dict[str, list[dict[str, Any]]] = {}
    for r in rows(doc):
        by_model.setdefault(r["model"], []).append(r)
    for model, rs in by_model.items():
        up = next((r["train"] for r in rs if r["loader"] == "synthetic" and r["train"]), None)
        real = [r for r in rs if r["loader"] != "synthetic" and r["of_synthetic"] is not None]
        if up is None or not real:
            out.append(f"{model}: no verdict (synthetic or every loader failed)")
            continue
        keep = [r for r in real if r["of_synthetic"] >= KEEPS_BUSY]
        if keep:
            names = ", ".join(f"{r['loader']} ({r['of_synthetic']:.0%})" for r in sorted(keep, key=lambda r: -r["train"]))
            out.append(f"{model}: {names} keep{'s' if len(keep) == 1 else ''} the {what} busy (≥ {KEEPS_BUSY:.0%} of "
                       f"synthetic's {up:,.1f} training images/s)")
        else:
            best = max(real, key=lambda r: r["train"])
            out.append(f"{model}: no loader keeps the {what} busy; the closest, {best['loader']}, trains at "
                       f"{best['of_synthetic']:.0%} of synthetic's {up:,.1f} images/s (busy {best['busy']:.0%})")
    return out


def all_ok(doc: dict[str, Any]) -> bool:
    return bool(doc["results"]) and all(c.ok for c in cells(doc))


def _n(x: Any) -> str:
    return "—" if x is None else f"{x:,.1f}"


def table_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    rec = recorded(doc)
    if rec.has_window_rule:
        return window_table_rows(doc, rec)
    head = ["Model", "Loader", "training images/s (median)", "interval", "of synthetic", f"{busy_what(doc, rec)} busy",
            "loader alone images/s", "runs"]
    body = []
    for r in rows(doc):
        if r["status"] != "ok":
            body.append([r["model"], r["loader"], unfinished(r["status"], r["reason"], r["runs_ok"], rec.runs), "", "", "", "", str(r["runs"])])
            continue
        body.append([r["model"], r["loader"], _n(r["train"]), interval(r["ci_level"], r["ci_low"], r["ci_high"]),
                     "—" if r["of_synthetic"] is None else f"{r['of_synthetic']:.0%}",
                     "—" if r["busy"] is None else f"{r['busy']:.0%}",
                     "(none: on device)" if r["loader"] == "synthetic" else _n(r["loader_alone"]), str(r["runs"])])
    return head, body


def window_table_rows(doc: dict[str, Any], rec: TrainE2ERecorded) -> tuple[list[str], list[list[str]]]:
    """Under the window rule: the loader alone's steady figure beside training images/s, its start-up apart and
    its window's steadiness."""
    head = ["Model", "Loader", "training images/s (median)", "interval", "loader alone images/s (steady)",
            "loader start-up s", "loader steady", "of synthetic", f"{busy_what(doc, rec)} busy", "runs"]
    body = []
    for r in rows(doc):
        if r["status"] != "ok":
            body.append([r["model"], r["loader"], unfinished(r["status"], r["reason"], r["runs_ok"], rec.runs), "", "", "", "", "", "", str(r["runs"])])
            continue
        synth = r["loader"] == "synthetic"
        body.append([r["model"], r["loader"], _n(r["train"]), interval(r["ci_level"], r["ci_low"], r["ci_high"]),
                     "(none: on device)" if synth else _n(r["loader_alone"]),
                     "" if synth else ("—" if r["loader_startup"] is None else f"{r['loader_startup']:.2f}"),
                     "" if synth else steady_text(r["loader_steady"]),
                     "—" if r["of_synthetic"] is None else f"{r['of_synthetic']:.0%}",
                     "—" if r["busy"] is None else f"{r['busy']:.0%}", str(r["runs"])])
    return head, body


def print_table(console, doc: dict[str, Any], final) -> None:
    from rich.table import Table

    head, body = table_rows(doc)
    t = Table(title=f"Training fed by each loader vs synthetic on-device data — {final}")
    for h in head:
        t.add_column(h, justify="left" if h in ("Model", "Loader") else "right")
    if recorded(doc).has_window_rule:
        body = [[*r[:6], "[yellow]NOT STEADY[/yellow]" if r[6] == "NOT STEADY" else r[6], *r[7:]] for r in body]
    for r in body:
        t.add_row(*r)
    console.print(t)
    for line in verdict(doc):
        console.print(line)
