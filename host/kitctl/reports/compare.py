"""`kitctl compare OLD NEW`: per engine × precision, what changed and whether it is beyond noise.

Each benchmark's rule is its own (`Benchmark.compare`, a `Comparer`, in
`kitctl/benchmarks/<name>/compare.py`): max batch flags any change of the resolved boundary that
reaches the threshold (a censored value is only a lower bound); throughput asks the confidence
intervals of the medians not to overlap as well (one run: the threshold alone, and says so), and
dataload applies that rule per loader × data · source · workers.
Results that do not measure the same thing (another device, GPU model, VRAM limit or budget,
input geometry or model; for throughput also another dataset or batch) are not comparable: every
row says so and no change is a regression, unless `--force` compares them anyway (the
differences are still stated). The reference runner's max batches are compared as its claim
(`Row.reference_claim`), and the figures its `metrics` states are listed beside the table.
Exit codes (kitctl compare): 0 no regression, 1 a regression beyond --threshold, 2 bad files or
flags, 3 not comparable (without --force).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from .. import benchmarks
from . import reference
from ..core.artifact import ArtifactError
from ..core.recorded import view
from .sources import KITCTL, Source
from ..core.tables import engine_label, intervals_overlap


# A row's change: (OLD row or None, NEW row or None, threshold %) -> (pct, flag, regression, note).
ChangeRule = Callable[[Any, Any, float], "tuple[float | None, str, bool, str]"]


def _no_diffs(old: Source, new: Source) -> list[str]:
    return []


@dataclass(frozen=True)
class Comparer:
    """What `kitctl compare` needs of a benchmark (its `Benchmark.compare`): the rows it compares per
    engine × precision, the rule that flags a change, and the setup differences that make two of its
    results measure different things."""

    rows: Callable[[Source], list[Any]]  # rows with .engine and .precision
    change: ChangeRule
    text: Callable[[Any], str]  # a row as a cell (None: "not run")
    unit: str  # the Markdown table's columns: "OLD <unit>"
    unit_short: str  # the terminal table's title
    # Differences that make OLD and NEW incomparable, listed after the device/GPU ones (its budget)…
    budget_diffs: Callable[[Source, Source], list[str]] = _no_diffs
    # …and, between two kitctl artifacts, after the model's (its data, its batch).
    data_diffs: Callable[[Source, Source], list[str]] = _no_diffs
    # Differences a reader should know that do not stop the comparison (after the producer's).
    context: Callable[[Source, Source], list[str]] = _no_diffs


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


def pct_change(old: float, new: float) -> float:
    return (new - old) / old * 100.0


def median_text(t: Any) -> str:
    """A median-with-interval row (.median, .ci_low, .ci_high, .runs) as a cell."""
    if t is None:
        return "not run"
    if t.median is None:
        return "no result"
    if t.ci_low is not None and t.ci_high is not None:
        return f"{t.median:,.0f} [{t.ci_low:,.0f}–{t.ci_high:,.0f}]"
    return f"{t.median:,.0f} ({t.runs} run{'s' if t.runs != 1 else ''})"


def median_change(o: Any, n: Any, thr: float) -> tuple[float | None, str, bool, str]:
    """Throughput's and dataload's rule: beyond noise when the intervals of the medians do not overlap; a
    regression needs that and a drop of at least the threshold; one run (no interval): the threshold alone."""
    if o is None:
        return None, "only in NEW", False, ""
    if n is None:
        return None, "only in OLD", False, "not measured in NEW"
    if o.median is None or n.median is None:
        return None, "not comparable", False, "no median in " + ("OLD" if o.median is None else "NEW")
    if o.median <= 0:  # a change relative to nothing is no percentage (and no regression)
        return None, "not comparable", False, f"OLD median is {o.median:g} images/s"
    pct = pct_change(o.median, n.median)
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


def setup_diffs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """"key (OLD vs NEW)" for each setting both results recorded and that differs (numbers with separators)."""
    def txt(x: Any) -> str:
        return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else str(x)

    return [f"{k} ({txt(old[k])} vs {txt(new[k])})" for k in old
            if old[k] is not None and new.get(k) is not None and old[k] != new[k]]


def run_versions(doc: dict[str, Any]) -> dict[str, str]:
    """A data benchmark's package versions, as its runs recorded them (results[].runs[].versions)."""
    out: dict[str, str] = {}
    for c in doc["results"]:
        for r in c["runs"]:
            for k, v in (r.get("versions") or {}).items():
                if v:
                    out.setdefault(k, v)
    return out


def data_context(old: Source, new: Source) -> list[str]:
    """A data benchmark's runtime or package versions differ: still the same measurement, worth knowing."""
    ort, nrt = (view(_Runtime, s.doc).runtime for s in (old, new))
    ov, nv = run_versions(old.doc), run_versions(new.doc)
    return ([f"runtime ({ort} vs {nrt})"] if ort != nrt else []) + \
        [f"{k} ({ov[k]} vs {nv[k]})" for k in ov if k in nv and ov[k] != nv[k]]


def device_of(s: Source) -> str:
    if s.kind != KITCTL:
        return "cuda"  # the reference runner measures GPUs only
    return str(s.config.device or "cuda")


def _geometry(s: Source) -> str | None:
    """"32x32x3" for both producers (kitctl's `input` text, the reference's `input_shape`)."""
    if s.kind == KITCTL:
        m = re.match(r"\s*(\d+x\d+x\d+)", str(s.config.input or ""))
        return m.group(1) if m else None
    shape = reference.config(s.doc).input_shape
    if isinstance(shape, list) and shape and all(isinstance(x, int) for x in shape):
        return "x".join(str(x) for x in shape)
    return None


def dataset_of(s: Source) -> Any:
    return s.config.dataset if s.kind == KITCTL else s.doc.get("dataset")


def _incomparable(old: Source, new: Source) -> list[str]:
    """How OLD and NEW measure different things: a change between them is no regression."""
    out = []
    comparer = _comparer(old)
    od, nd = device_of(old), device_of(new)
    if od != nd:
        out.append(f"device ({od} vs {nd})")
    elif old.gpu_name is not None and new.gpu_name is not None and old.gpu_name != new.gpu_name:
        out.append(f"GPU model ({old.gpu_name} vs {new.gpu_name})")
    out += comparer.budget_diffs(old, new)
    og, ng = _geometry(old), _geometry(new)
    if og and ng and og != ng:
        out.append(f"input geometry ({og} vs {ng})")
    if old.kind == KITCTL and new.kind == KITCTL:
        oc, nc = old.config, new.config
        if oc.model != nc.model:
            out.append(f"model ({oc.model} vs {nc.model})")
        out += comparer.data_diffs(old, new)
    return out


def _context(old: Source, new: Source) -> list[str]:
    """Differences that do not stop the comparison but a reader should know."""
    diffs = []
    if old.kind != new.kind:
        diffs.append(f"producer ({_kind(old)} vs {_kind(new)})")
    diffs += _comparer(old).context(old, new)
    if old.kind == KITCTL and new.kind == KITCTL:
        oc, nc = old.config.cudnn_benchmark, new.config.cudnn_benchmark
        if oc != nc:
            diffs.append(f"cuDNN autotuning ({oc} vs {nc})")
        for name in dict.fromkeys([*old.doc["engines"], *new.doc["engines"]]):
            ov = (old.doc["engines"].get(name) or {}).get("versions") or {}
            nv = (new.doc["engines"].get(name) or {}).get("versions") or {}
            fw = ov.get("framework") or nv.get("framework")
            if fw and ov.get(fw) and nv.get(fw) and ov.get(fw) != nv.get(fw):
                diffs.append(f"{engine_label(name)} {fw} ({ov[fw]} vs {nv[fw]})")
    if old.kind == KITCTL and new.kind == KITCTL:
        diffs += _provenance_diffs(old, new)
    if old.state != new.state and "reference" not in (old.state, new.state):
        diffs.append(f"state ({old.state} vs {new.state})")
    return diffs


@dataclass(frozen=True)
class _Runtime:
    runtime: Any = "local"  # a data benchmark's runtime (older artifacts: local)


# Settings that leave the measurement the same kind but may move its figures: the search strategy (the
# boundary it resolves is the same by construction, the candidates it tried are not), the seed, and
# the corpus a data benchmark read (its path; its seed where recorded). Named in this order.
@dataclass(frozen=True)
class _Context:
    strategy: Any = None
    seed: Any = None
    corpus: Any = None
    corpus_seed: Any = None


def _provenance_diffs(old: Source, new: Source) -> list[str]:
    """The kit's commit (and whether its tree was edited) and the settings above, where they differ."""
    oc, nc = view(_Context, old.doc), view(_Context, new.doc)
    pairs = [(f.name, getattr(oc, f.name), getattr(nc, f.name)) for f in fields(_Context)]
    out = [f"{k} ({o} vs {n})" for k, o, n in pairs if o is not None and n is not None and o != n]

    def commit(doc: dict[str, Any]) -> str | None:
        kit = doc.get("kit") or {}
        c = kit.get("git_commit")
        if not isinstance(c, str):
            return None
        return c[:10] + (" (edited)" if kit.get("git_dirty") else "")

    oc_, nc_ = commit(old.doc), commit(new.doc)
    if (oc_ or nc_) and oc_ != nc_:
        out.append(f"kit commit ({oc_ or 'not recorded'} vs {nc_ or 'not recorded'})")
    return out


def _unfinished(row: Any) -> bool:
    """A row of a cell its run had not finished (a partial artifact's): a lower figure than a finished
    one's is no regression and a higher one no improvement."""
    return row is not None and getattr(row, "state", "done") not in ("done", None)


def _kind(s: Source) -> str:
    return "kitctl" if s.kind == KITCTL else "reference runner"


def _comparer(s: Source) -> Comparer:
    return benchmarks.get(s.benchmark).compare  # type: ignore[union-attr]


def opt_mib(x: Any) -> str:
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
    bench = benchmarks.get(old.benchmark)
    if bench is None or bench.compare is None:
        raise ArtifactError(f"kitctl compare does not compare {old.benchmark} results yet "
                            f"({old.name}, {new.name}): read them side by side with `kitctl report`")
    cmp = Comparison(old.benchmark, threshold_pct, context=_context(old, new),
                     incomparable=_incomparable(old, new), forced=force,
                     stated=[x for x in (_stated("OLD", old), _stated("NEW", new)) if x])
    comparer = _comparer(old)
    o_rows = {(r.engine, r.precision): r for r in comparer.rows(old)}
    n_rows = {(r.engine, r.precision): r for r in comparer.rows(new)}
    fn, text = comparer.change, comparer.text
    if o_rows and n_rows and not set(o_rows) & set(n_rows):
        cells = bench.cell_heads  # e.g. Engine × Precision
        cmp.incomparable.append(f"no {' × '.join(cells).lower()} cell in common "
                                f"(OLD: {_cells(o_rows)}; NEW: {_cells(n_rows)})")
    for key in dict.fromkeys([*o_rows, *n_rows]):
        o, n = o_rows.get(key), n_rows.get(key)
        change, flag, reg, note = fn(o, n, threshold_pct)
        if flag in ("improvement", "regression") and (_unfinished(o) or _unfinished(n)):
            which = " and ".join(w for w, r in (("OLD", o), ("NEW", n)) if _unfinished(r))
            flag, reg, note = "not comparable", False, f"{which} unfinished (partial artifact)"
        if cmp.not_comparable and o is not None and n is not None:
            flag, reg, note = "not comparable", False, "the results measure different things (see above)"
        cmp.changes.append(Change(key[0], key[1], text(o), text(n), change, flag, reg, note))
    return cmp


def _cells(rows: dict[tuple[str, str], Any], most: int = 4) -> str:
    names = [f"{engine_label(e)} {p}" for e, p in rows]
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def pct_text(p: float | None) -> str:
    if p is None:
        return "—"
    return "0%" if p == 0 else f"{p:+.1f}%".replace("-", "−")


def render_markdown(cmp: Comparison, old: Source, new: Source) -> str:
    unit = benchmarks.get(cmp.benchmark).compare.unit  # type: ignore[union-attr]
    lines = [f"# kitctl compare — {cmp.benchmark}", "",
             f"OLD `{old.name}` ({old.machine_short}) → NEW `{new.name}` ({new.machine_short}); "
             f"threshold {cmp.threshold_pct:g}%", ""]
    if cmp.incomparable:
        lines += [not_comparable_text(cmp), ""]
    if cmp.context:
        lines += [f"The two results also differ in: {'; '.join(cmp.context)}.", ""]
    lines += [*(f"{x}." for x in cmp.stated), *([""] if cmp.stated else [])]
    first, second = benchmarks.get(cmp.benchmark).cell_heads  # type: ignore[union-attr]
    lines += [f"| {first} | {second} | OLD {unit} | NEW {unit} | Change | Flag | Note |",
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
