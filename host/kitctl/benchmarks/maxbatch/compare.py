"""Max-batch's part of `kitctl compare`: the search resolves the boundary to one sample, so any
difference is real; it is flagged as an improvement/regression when it reaches the threshold. A
censored value (passed at --max-batch) is only a lower bound: a change is stated only where the
bound makes it certain. The reference runner's max batches are compared as its claim."""
from __future__ import annotations

from ...reports.compare import Comparer, device_of, dataset_of, opt_mib, pct_change
from ...reports.sources import Source
from .table import Row


def _mb_text(r: Row | None) -> str:
    if r is None:
        return "not run"
    if r.has_figure:
        return r.figure_text
    if r.search_status in ("invalid_non_memory_failure", "no_passing_batch"):
        return "none (" + ("invalid" if r.search_status == "invalid_non_memory_failure" else "no pass") + ")"
    return f"unfinished ({r.result})"


def _maxbatch_change(o: Row | None, n: Row | None, thr: float) -> tuple[float | None, str, bool, str]:
    if o is None:
        return None, "only in NEW", False, ""
    if n is None:
        return None, "only in OLD", False, "not measured in NEW"
    pct, flag, reg, note = _maxbatch_flag(o, n, thr)
    claims = [w for w, r in (("OLD", o), ("NEW", n)) if r.has_figure and r.reference_claim]
    if claims:  # compared as the reference's figure, and said so
        extra = f"{' and '.join(claims)}: the reference runner's claim (next failure unclassified)"
        note = f"{note}; {extra}" if note else extra
    return pct, flag, reg, note


def _maxbatch_flag(o: Row, n: Row, thr: float) -> tuple[float | None, str, bool, str]:
    o_cap, n_cap = o.has_figure, n.has_figure
    n_done = n.search_status is not None
    o_done = o.search_status is not None or o.reference_claim
    if o_cap and not n_cap:
        if not n_done:
            return None, "not comparable", False, "NEW is unfinished (partial artifact)"
        return -100.0, "regression", True, f"NEW has no capacity: {n.result}"
    if not o_cap:
        if not o_done:  # an interrupted search has no capacity yet: a finished one is no improvement on it
            return None, "not comparable", False, "OLD is unfinished (partial artifact)"
        if n_cap:
            return None, "improvement", False, f"OLD had no capacity: {o.result}"
        return None, "not comparable", False, "no capacity in either"
    ov, nv = float(o.max_batch), float(n.max_batch)  # type: ignore[arg-type]
    pct = pct_change(ov, nv)
    o_lb = o.search_status == "censored_at_max_batch"
    n_lb = n.search_status == "censored_at_max_batch"
    if o_lb and n_lb:
        return pct, "not comparable", False, "both are lower bounds (censored at --max-batch)"
    if o_lb and nv >= ov:
        return pct, "not comparable", False, "OLD is a lower bound (censored at --max-batch)"
    if n_lb and nv < ov:
        return pct, "not comparable", False, "NEW is a lower bound (censored at --max-batch)"
    note = "lower bound" if (o_lb or n_lb) else ""
    if nv == ov:
        return 0.0, "same", False, note
    if pct <= -thr:
        return pct, "regression", True, note
    if pct >= thr:
        return pct, "improvement", False, note
    return pct, "changed", False, (note + "; " if note else "") + f"below the {thr:g}% threshold"


def _budget_diffs(old: Source, new: Source) -> list[str]:
    """A max batch depends on the memory it may use: the VRAM limit L and budget B, or --memory-limit."""
    out: list[str] = []
    od, nd = device_of(old), device_of(new)
    if od == nd:
        if od == "cuda" and old.limit_mib != new.limit_mib:
            out.append(f"VRAM limit L ({opt_mib(old.limit_mib)} vs {opt_mib(new.limit_mib)})")
        elif od == "cuda" and old.budget_mib != new.budget_mib:
            out.append(f"VRAM budget B = L − R ({opt_mib(old.budget_mib)} vs {opt_mib(new.budget_mib)})")
        if od == "cpu":
            om, nm = old.config.memory_limit_mib, new.config.memory_limit_mib
            if om != nm:
                out.append(f"--memory-limit ({opt_mib(om)} vs {opt_mib(nm)})")
    return out


def _context(old: Source, new: Source) -> list[str]:
    """Another dataset of the same geometry does not change the memory a step needs."""
    if dataset_of(old) != dataset_of(new):
        return [f"dataset ({dataset_of(old)} vs {dataset_of(new)}; same input geometry)"]
    return []


COMPARER = Comparer(rows=lambda s: s.rows, change=_maxbatch_change, text=_mb_text, unit="max batch",
                    unit_short="max batch", budget_diffs=_budget_diffs, context=_context)
