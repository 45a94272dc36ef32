"""`kitctl compare OLD NEW`: per engine × precision, what changed and whether it is beyond noise.

Max batch: the search resolves the boundary to one sample, so any difference is real; it is
flagged as an improvement/regression when it reaches the threshold. A censored value (passed at
--max-batch) is only a lower bound: a change is stated only where the bound makes it certain.
Throughput: the change in median images/s is beyond noise when the confidence intervals do not
overlap; a regression needs both (no overlap, and a drop of at least the threshold). Without an
interval (one run) the threshold alone decides, and the row says so.
Exit codes (kitctl compare): 0 no regression, 1 a regression beyond --threshold, 2 bad files.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .artifact import ArtifactError
from .sources import KITCTL, Source
from .summary import Row, ThroughputRow, engine_label, intervals_overlap


@dataclass(frozen=True)
class Change:
    engine: str
    precision: str
    old: str  # as displayed
    new: str
    pct: float | None  # (new − old) / old × 100
    flag: str  # regression | improvement | changed | same | beyond noise | within noise | not comparable | …
    regression: bool
    note: str = ""


@dataclass
class Comparison:
    benchmark: str
    threshold_pct: float
    changes: list[Change] = field(default_factory=list)
    context: list[str] = field(default_factory=list)  # how OLD and NEW differ besides the numbers

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]


def _pct(old: float, new: float) -> float:
    return (new - old) / old * 100.0


def _mb_text(r: Row | None) -> str:
    if r is None:
        return "not run"
    if r.has_capacity:
        return ("≥ " if r.search_status == "censored_at_max_batch" else "") + f"{r.max_batch:,}"
    if r.search_status in ("invalid_non_memory_failure", "no_passing_batch"):
        return "none (" + ("invalid" if r.search_status == "invalid_non_memory_failure" else "no pass") + ")"
    return f"unfinished ({r.result})"


def _maxbatch_change(o: Row | None, n: Row | None, thr: float) -> tuple[float | None, str, bool, str]:
    if o is None:
        return None, "only in NEW", False, ""
    if n is None:
        return None, "only in OLD", False, "not measured in NEW"
    o_cap, n_cap = o.has_capacity, n.has_capacity
    n_done = n.search_status is not None
    if o_cap and not n_cap:
        if not n_done:
            return None, "not comparable", False, "NEW is unfinished (partial artifact)"
        return -100.0, "regression", True, f"NEW has no capacity: {n.result}"
    if not o_cap:
        if n_cap:
            return None, "improvement", False, f"OLD had no capacity: {o.result}"
        return None, "not comparable", False, "no capacity in either"
    ov, nv = float(o.max_batch), float(n.max_batch)  # type: ignore[arg-type]
    pct = _pct(ov, nv)
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


def _tput_text(t: ThroughputRow | None) -> str:
    if t is None:
        return "not run"
    if t.median is None:
        return "no result"
    if t.ci_low is not None and t.ci_high is not None:
        return f"{t.median:,.0f} [{t.ci_low:,.0f}–{t.ci_high:,.0f}]"
    return f"{t.median:,.0f} ({t.runs} run{'s' if t.runs != 1 else ''})"


def _tput_change(o: ThroughputRow | None, n: ThroughputRow | None, thr: float) -> tuple[float | None, str, bool, str]:
    if o is None:
        return None, "only in NEW", False, ""
    if n is None:
        return None, "only in OLD", False, "not measured in NEW"
    if o.median is None or n.median is None:
        return None, "not comparable", False, "no median in " + ("OLD" if o.median is None else "NEW")
    pct = _pct(o.median, n.median)
    overlap = intervals_overlap((o.ci_low, o.ci_high), (n.ci_low, n.ci_high))
    if overlap is None:
        note = "no confidence interval (one run?): threshold only"
        if pct <= -thr:
            return pct, "regression", True, note
        if pct >= thr:
            return pct, "improvement", False, note
        return pct, "within noise", False, note + f"; below the {thr:g}% threshold"
    if overlap:
        return pct, "within noise", False, "confidence intervals overlap"
    if pct <= -thr:
        return pct, "regression", True, "intervals do not overlap"
    if pct >= thr:
        return pct, "improvement", False, "intervals do not overlap"
    return pct, "beyond noise", False, f"intervals do not overlap; below the {thr:g}% threshold"


def _context(old: Source, new: Source) -> list[str]:
    diffs = []
    if old.gpu_name != new.gpu_name:
        diffs.append(f"GPU ({old.gpu_name} vs {new.gpu_name})")
    if old.limit_mib != new.limit_mib:
        diffs.append(f"VRAM limit L ({_opt_mib(old.limit_mib)} vs {_opt_mib(new.limit_mib)})")
    if old.kind != new.kind:
        diffs.append(f"producer ({_kind(old)} vs {_kind(new)})")
    if old.kind == KITCTL and new.kind == KITCTL:
        oc, nc = old.doc["configuration"], new.doc["configuration"]
        for key, what in (("dataset", "dataset"), ("model", "model"), ("cudnn_benchmark", "cuDNN autotuning"),
                          ("batch", "batch")):
            if oc.get(key) != nc.get(key):
                diffs.append(f"{what} ({oc.get(key)} vs {nc.get(key)})")
        for name in dict.fromkeys([*old.doc["engines"], *new.doc["engines"]]):
            ov = (old.doc["engines"].get(name) or {}).get("versions") or {}
            nv = (new.doc["engines"].get(name) or {}).get("versions") or {}
            fw = ov.get("framework") or nv.get("framework")
            if fw and ov.get(fw) and nv.get(fw) and ov.get(fw) != nv.get(fw):
                diffs.append(f"{engine_label(name)} {fw} ({ov[fw]} vs {nv[fw]})")
    if old.state != new.state and "reference" not in (old.state, new.state):
        diffs.append(f"state ({old.state} vs {new.state})")
    return diffs


def _kind(s: Source) -> str:
    return "kitctl" if s.kind == KITCTL else "reference runner"


def _opt_mib(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f} MiB"


def compare(old: Source, new: Source, threshold_pct: float = 5.0) -> Comparison:
    if old.benchmark != new.benchmark:
        raise ArtifactError(f"cannot compare a {old.benchmark} result ({old.name}) with a {new.benchmark} "
                            f"result ({new.name})")
    cmp = Comparison(old.benchmark, threshold_pct, context=_context(old, new))
    if old.benchmark == "maxbatch":
        o_rows = {(r.engine, r.precision): r for r in old.rows}
        n_rows = {(r.engine, r.precision): r for r in new.rows}
        fn, text = _maxbatch_change, _mb_text
    else:
        o_rows = {(r.engine, r.precision): r for r in old.tput}  # type: ignore[misc]
        n_rows = {(r.engine, r.precision): r for r in new.tput}  # type: ignore[misc]
        fn, text = _tput_change, _tput_text  # type: ignore[assignment]
    for key in dict.fromkeys([*o_rows, *n_rows]):
        o, n = o_rows.get(key), n_rows.get(key)
        pct, flag, reg, note = fn(o, n, threshold_pct)  # type: ignore[arg-type]
        cmp.changes.append(Change(key[0], key[1], text(o), text(n), pct, flag, reg, note))  # type: ignore[arg-type]
    return cmp


def pct_text(p: float | None) -> str:
    if p is None:
        return "—"
    return "0%" if p == 0 else f"{p:+.1f}%".replace("-", "−")


def render_markdown(cmp: Comparison, old: Source, new: Source) -> str:
    unit = "max batch" if cmp.benchmark == "maxbatch" else "images/s (median [CI])"
    lines = [f"# kitctl compare — {cmp.benchmark}", "",
             f"OLD `{old.name}` ({old.machine_short}) → NEW `{new.name}` ({new.machine_short}); "
             f"threshold {cmp.threshold_pct:g}%", ""]
    if cmp.context:
        lines += [f"The two results also differ in: {'; '.join(cmp.context)}.", ""]
    lines += [f"| Engine | Precision | OLD {unit} | NEW {unit} | Change | Flag | Note |",
              "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    for c in cmp.changes:
        lines.append(f"| {engine_label(c.engine)} | {c.precision} | {c.old} | {c.new} | {pct_text(c.pct)} | "
                     f"{'**' + c.flag + '**' if c.regression else c.flag} | {c.note} |")
    lines += ["", verdict(cmp)]
    return "\n".join(lines) + "\n"


def verdict(cmp: Comparison) -> str:
    regs = cmp.regressions
    if not regs:
        return f"No regression beyond {cmp.threshold_pct:g}%."
    return (f"{len(regs)} regression{'s' if len(regs) != 1 else ''} beyond {cmp.threshold_pct:g}%: "
            + "; ".join(f"{engine_label(c.engine)} {c.precision} {c.old} → {c.new} ({pct_text(c.pct)})" for c in regs))
