"""`kitctl compare OLD NEW`: per engine × precision, what changed and whether it is beyond noise.

Max batch: the search resolves the boundary to one sample, so any difference is real; it is
flagged as an improvement/regression when it reaches the threshold. A censored value (passed at
--max-batch) is only a lower bound: a change is stated only where the bound makes it certain.
Throughput: the change in median images/s is beyond noise when the confidence intervals do not
overlap; a regression needs both (no overlap, and a drop of at least the threshold). Without an
interval (one run) the threshold alone decides, and the row says so.
Results that do not measure the same thing (another device, GPU model, VRAM limit or budget,
input geometry or model; for throughput also another dataset or batch) are not comparable: every
row says so and no change is a regression, unless `--force` compares them anyway (the
differences are still stated). The reference runner's max batches are compared as its claim
(`Row.reference_claim`), and the figures its `metrics` states are listed beside the table.
Exit codes (kitctl compare): 0 no regression, 1 a regression beyond --threshold, 2 bad files or
flags, 3 not comparable (without --force).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import re
from typing import Any

from . import reference
from ..core.artifact import ArtifactError
from .sources import KITCTL, Source
from ..core.tables import engine_label, intervals_overlap
from ..benchmarks.maxbatch.table import Row
from ..benchmarks.throughput.table import ThroughputRow


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
    # What makes OLD and NEW measure different things; non-empty means not comparable unless forced.
    incomparable: list[str] = field(default_factory=list)
    forced: bool = False
    stated: list[str] = field(default_factory=list)  # the reference file's own metrics, one line per file

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]

    @property
    def not_comparable(self) -> bool:
        return bool(self.incomparable) and not self.forced


def _pct(old: float, new: float) -> float:
    return (new - old) / old * 100.0


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
    if o.median <= 0:  # a change relative to nothing is no percentage (and no regression)
        return None, "not comparable", False, f"OLD median is {o.median:g} images/s"
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


def _device(s: Source) -> str:
    if s.kind != KITCTL:
        return "cuda"  # the reference runner measures GPUs only
    return str(s.doc["configuration"].get("device") or "cuda")


def _geometry(s: Source) -> str | None:
    """"32x32x3" for both producers (kitctl's `input` text, the reference's `input_shape`)."""
    if s.kind == KITCTL:
        m = re.match(r"\s*(\d+x\d+x\d+)", str(s.doc["configuration"].get("input") or ""))
        return m.group(1) if m else None
    shape = (s.doc.get("configuration") or {}).get("input_shape")
    if isinstance(shape, list) and shape and all(isinstance(x, int) for x in shape):
        return "x".join(str(x) for x in shape)
    return None


def _dataset(s: Source) -> Any:
    return s.doc["configuration"].get("dataset") if s.kind == KITCTL else s.doc.get("dataset")


def _incomparable(old: Source, new: Source) -> list[str]:
    """How OLD and NEW measure different things: a change between them is no regression."""
    out = []
    od, nd = _device(old), _device(new)
    if od != nd:
        out.append(f"device ({od} vs {nd})")
    elif old.gpu_name is not None and new.gpu_name is not None and old.gpu_name != new.gpu_name:
        out.append(f"GPU model ({old.gpu_name} vs {new.gpu_name})")
    if old.benchmark == "maxbatch" and od == nd:
        if od == "cuda" and old.limit_mib != new.limit_mib:
            out.append(f"VRAM limit L ({_opt_mib(old.limit_mib)} vs {_opt_mib(new.limit_mib)})")
        elif od == "cuda" and old.budget_mib != new.budget_mib:
            out.append(f"VRAM budget B = L − R ({_opt_mib(old.budget_mib)} vs {_opt_mib(new.budget_mib)})")
        if od == "cpu":
            om, nm = (s.doc["configuration"].get("memory_limit_mib") for s in (old, new))
            if om != nm:
                out.append(f"--memory-limit ({_opt_mib(om)} vs {_opt_mib(nm)})")
    og, ng = _geometry(old), _geometry(new)
    if og and ng and og != ng:
        out.append(f"input geometry ({og} vs {ng})")
    if old.kind == KITCTL and new.kind == KITCTL:
        oc, nc = old.doc["configuration"], new.doc["configuration"]
        if oc.get("model") != nc.get("model"):
            out.append(f"model ({oc.get('model')} vs {nc.get('model')})")
        if old.benchmark == "throughput":
            for key in ("dataset", "batch"):
                if oc.get(key) != nc.get(key):
                    out.append(f"{key} ({oc.get(key)} vs {nc.get(key)})")
    return out


def _context(old: Source, new: Source) -> list[str]:
    """Differences that do not stop the comparison but a reader should know."""
    diffs = []
    if old.kind != new.kind:
        diffs.append(f"producer ({_kind(old)} vs {_kind(new)})")
    if old.benchmark == "throughput" and old.limit_mib != new.limit_mib and _device(old) == _device(new) == "cuda":
        diffs.append(f"VRAM limit L ({_opt_mib(old.limit_mib)} vs {_opt_mib(new.limit_mib)})")
    if old.benchmark == "maxbatch" and _dataset(old) != _dataset(new):
        diffs.append(f"dataset ({_dataset(old)} vs {_dataset(new)}; same input geometry)")
    if old.kind == KITCTL and new.kind == KITCTL:
        oc, nc = old.doc["configuration"], new.doc["configuration"]
        for key, what in (("cudnn_benchmark", "cuDNN autotuning"),):
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


def _opt_mib(x: Any) -> str:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return f"{x:,.0f} MiB"
    return "—" if x is None else repr(x)


def _stated(which: str, s: Source) -> str | None:
    """"OLD (reference runner) states: …": every number of its `metrics`, as written."""
    if s.kind == KITCTL:
        return None
    figs = reference.stated_figures(s.doc)
    if not figs:
        return None
    parts = [f"{f.metric}.{f.key}{' (' + f.precision + ')' if f.precision else ''} {f.value_text}" for f in figs]
    return f"{which} `{s.name}` (reference runner) states: " + " · ".join(parts)


def compare(old: Source, new: Source, threshold_pct: float = 5.0, force: bool = False) -> Comparison:
    if old.benchmark != new.benchmark:
        raise ArtifactError(f"cannot compare a {old.benchmark} result ({old.name}) with a {new.benchmark} "
                            f"result ({new.name})")
    cmp = Comparison(old.benchmark, threshold_pct, context=_context(old, new),
                     incomparable=_incomparable(old, new), forced=force,
                     stated=[x for x in (_stated("OLD", old), _stated("NEW", new)) if x])
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
        if cmp.not_comparable and o is not None and n is not None:
            flag, reg, note = "not comparable", False, "the results measure different things (see above)"
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
    if cmp.incomparable:
        lines += [not_comparable_text(cmp), ""]
    if cmp.context:
        lines += [f"The two results also differ in: {'; '.join(cmp.context)}.", ""]
    lines += [*(f"{x}." for x in cmp.stated), *([""] if cmp.stated else [])]
    lines += [f"| Engine | Precision | OLD {unit} | NEW {unit} | Change | Flag | Note |",
              "| --- | --- | ---: | ---: | ---: | --- | --- |"]
    for c in cmp.changes:
        lines.append(f"| {engine_label(c.engine)} | {c.precision} | {c.old} | {c.new} | {pct_text(c.pct)} | "
                     f"{'**' + c.flag + '**' if c.regression else c.flag} | {c.note} |")
    lines += ["", verdict(cmp)]
    return "\n".join(lines) + "\n"


def not_comparable_text(cmp: Comparison) -> str:
    why = "; ".join(cmp.incomparable)
    if cmp.forced:
        return f"Compared with --force although the results measure different things: {why}."
    return (f"Not comparable: the results measure different things: {why}. No change between them is a "
            f"regression; --force compares them anyway.")


def verdict(cmp: Comparison) -> str:
    if cmp.not_comparable:
        return "Not comparable (exit 3): " + "; ".join(cmp.incomparable) + "."
    regs = cmp.regressions
    if not regs:
        return f"No regression beyond {cmp.threshold_pct:g}%."
    return (f"{len(regs)} regression{'s' if len(regs) != 1 else ''} beyond {cmp.threshold_pct:g}%: "
            + "; ".join(f"{engine_label(c.engine)} {c.precision} {c.old} → {c.new} ({pct_text(c.pct)})" for c in regs))
