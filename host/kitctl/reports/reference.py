"""The reference runner's max-batch JSON, normalised into the rows kitctl's own artifacts give.

The reference runner (`benchmark_id` `gpu-resnet50-max-batch`, `schema_version` 1) writes
`results.<engine>` (older runs, one precision in `configuration.precision`) or
`results.<precision>.<engine>` (newer runs); each engine holds `max_batch` (0 = none),
`next_batch_trial` and `max_trial` (trial objects), `peak_vram_mib_at_max`, `search_status`
(newer runs) and `all_trials[]` with `batch`, `ok`, `reason` (`ok`, `oom`,
`vram_cap_exceeded`, `timeout`, `exit_<code>`), `peak_vram_mib` (the device's used memory),
`peak_delta_mib` (used − idle before the trial; newer runs), `vram_cap_mib`.
`machine.gpu` has `name`, `driver_version`, `memory_total_mib`; `machine.versions` is flat.
`metrics.max_train_batch` (`opennn_batch_pool_1`, `pytorch_best`, `tensorflow_xla`) and
`metrics.ratio` (`opennn_vs_<key>`) are flat in older runs, per precision in newer ones.

The older runner ("V1") never classifies an out-of-memory exit: a failed candidate is `exit_<code>`
(or `vram_cap_exceeded`/`timeout`), and it writes no `search_status`. Its `max_batch` is still the
figure its report states, so a row shows it as the reference's claim (`Row.reference_claim`) with
the status `unclassified_next_failure`, never as a capacity under kitctl's rule; kitctl's own
artifacts keep the strict rule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.engines import ENGINES
from ..core.recorded import view
from ..benchmarks.maxbatch.table import CAPACITY_STATUSES, UNCLASSIFIED_NEXT, Row, TrialPoint, result_text

BENCHMARK_ID = "gpu-resnet50-max-batch"
# The kitctl benchmark whose figures a reference file holds (its rows are that benchmark's rows): the
# one benchmark name the reports know, as core/engines.py knows which benchmarks an engine runs.
BENCHMARK = "maxbatch"
PRECISIONS = ("fp32", "bf16")
MEMORY_REASONS = frozenset({"oom", "vram_cap_exceeded"})
# The reference runner's engine names → kitctl's.
ENGINE_NAMES = {
    "pytorch_eager": "pytorch-eager",
    "pytorch_compile": "pytorch-compile",
    "tensorflow": "tensorflow-xla",
    "tensorflow_xla": "tensorflow-xla",
    "opennn_pool1": "opennn-pool1",
    "opennn_default": "opennn-default",
}
_STATUS = {"censored_at_max_batch_limit": "censored_at_max_batch"}


class ReferenceFormatError(ValueError):
    pass


@dataclass(frozen=True)
class StatedFigure:
    """One number of the reference file's `metrics`, as it states it."""

    precision: str | None  # None in the flat (older) layout
    metric: str  # max_train_batch | ratio
    key: str  # opennn_batch_pool_1, pytorch_best, opennn_vs_pytorch_best, …
    value: float

    @property
    def value_text(self) -> str:
        v = self.value
        return f"{v:,.0f}" if float(v).is_integer() and self.metric == "max_train_batch" else f"{v:g}"


@dataclass(frozen=True)
class ReferenceConfig:
    """The reference file's `configuration`, read-only: each key as written, a missing one the default
    its readers print (read through `kitctl.core.recorded.view`, the one raw reader)."""

    precision: Any = None  # the older flat layout's one precision
    max_batch_limit: Any = None
    vram_reserve_mib: Any = None
    input_shape: Any = None
    classes: Any = "?"
    model: Any = "?"
    loss: Any = "?"
    optimizer: Any = "?"
    dataset: Any = None


def config(doc: dict[str, Any]) -> ReferenceConfig:
    return view(ReferenceConfig, doc)


def is_reference(doc: Any) -> bool:
    return isinstance(doc, dict) and "benchmark_id" in doc and "kind" not in doc


def kit_engine(name: str) -> str:
    if name in ENGINE_NAMES:
        return ENGINE_NAMES[name]
    dashed = name.replace("_", "-")
    return dashed if dashed in ENGINES else name


def cells(doc: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(kitctl engine, precision, reference engine name, entry) in file order; raises
    ReferenceFormatError with the first problem."""
    if doc.get("schema_version") != 1:
        raise ReferenceFormatError(f"reference schema_version {doc.get('schema_version')!r} is not supported (1 is)")
    if doc.get("benchmark_id") != BENCHMARK_ID:
        raise ReferenceFormatError(f"reference benchmark_id {doc.get('benchmark_id')!r} is not supported "
                                   f"(only {BENCHMARK_ID})")
    results = doc.get("results")
    if not isinstance(results, dict) or not results:
        raise ReferenceFormatError("reference results is missing or empty")
    # Engine names are never "fp32"/"bf16": keys that are all precisions mean the nested layout.
    nested = all(k in PRECISIONS and isinstance(v, dict) for k, v in results.items())
    out = []
    if nested:
        pairs = [(p, name, e) for p, engines in results.items() for name, e in engines.items()]
    else:
        p = config(doc).precision or "fp32"
        pairs = [(p, name, e) for name, e in results.items()]
    for p, name, e in pairs:
        where = f"results.{p}.{name}" if nested else f"results.{name}"
        if not isinstance(e, dict):
            raise ReferenceFormatError(f"reference {where} is not an object")
        mb = e.get("max_batch")
        if mb is not None and (not isinstance(mb, int) or isinstance(mb, bool) or mb < 0):
            raise ReferenceFormatError(f"reference {where}.max_batch is not a batch size")
        trials = e.get("all_trials")
        if not isinstance(trials, list):
            raise ReferenceFormatError(f"reference {where}.all_trials is missing")
        for i, t in enumerate(trials):
            if not (isinstance(t, dict) and isinstance(t.get("batch"), int) and isinstance(t.get("ok"), bool)):
                raise ReferenceFormatError(f"reference {where}.all_trials[{i}] lacks batch/ok")
        nt = e.get("next_batch_trial")
        if nt is not None and not (isinstance(nt, dict) and isinstance(nt.get("batch"), int)):
            raise ReferenceFormatError(f"reference {where}.next_batch_trial lacks batch")
        out.append((kit_engine(name), p, name, e))
    return out


def _uses_delta(e: dict[str, Any]) -> bool:
    trials = e.get("all_trials") or []
    return bool(trials) and all(t.get("peak_delta_mib") is not None for t in trials)


def peak_source(e: dict[str, Any]) -> str:
    return "device delta (reference runner)" if _uses_delta(e) else "device used (nvidia-smi, reference runner)"


def _trial_peak(t: dict[str, Any] | None, delta: bool) -> float | None:
    if not t:
        return None
    v = t.get("peak_delta_mib") if delta else t.get("peak_vram_mib")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def search_status(e: dict[str, Any], max_batch_limit: int | None) -> str:
    s = e.get("search_status")
    if isinstance(s, str) and s:
        return _STATUS.get(s, s)
    mb = e.get("max_batch") or 0
    nt = e.get("next_batch_trial")
    if nt is not None and not nt.get("ok") and nt.get("reason") in MEMORY_REASONS and mb:
        return "bounded_by_memory_failure"
    if nt is None and mb and (max_batch_limit is None or mb >= max_batch_limit):
        return "censored_at_max_batch"
    if not mb:
        return "no_passing_batch"
    if nt is not None and not nt.get("ok"):
        return UNCLASSIFIED_NEXT  # a runner without a status word: it could not tell
    return "invalid_non_memory_failure"


def rows(doc: dict[str, Any]) -> list[Row]:
    limit = config(doc).max_batch_limit
    out = []
    for engine, precision, _, e in cells(doc):
        delta = _uses_delta(e)
        mb = e.get("max_batch") or None
        peak = _trial_peak(e.get("max_trial"), delta) if e.get("max_trial") else None
        if peak is None and not delta and isinstance(e.get("peak_vram_mib_at_max"), (int, float)):
            peak = float(e["peak_vram_mib_at_max"])
        if peak is None and mb:
            at = [t for t in e["all_trials"] if t["batch"] == mb and t["ok"]]
            peak = _trial_peak(at[-1], delta) if at else None
        nt = e.get("next_batch_trial")
        nxt = nt["batch"] if nt else None
        nstatus = (nt.get("reason") or ("ok" if nt.get("ok") else "fail")) if nt else None
        status = search_status(e, limit)
        reason = (f"{nstatus} at {nxt:,}" if nt and not nt.get("ok") else None)
        # The reference's own max batch is shown whatever its next failure was (its claim).
        claim = bool(mb) and status not in CAPACITY_STATUSES
        out.append(Row(engine, precision, mb, peak, peak_source(e) if peak is not None else "", nxt, nstatus,
                       result_text(status, nstatus, nxt, reason), status, claim))
    return out


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def stated_figures(doc: dict[str, Any]) -> list[StatedFigure]:
    """`metrics.max_train_batch` and `metrics.ratio` exactly as the file states them (flat or per
    precision); anything that is not a number is left out, never a crash."""
    metrics = doc.get("metrics")
    if not isinstance(metrics, dict):
        return []
    out: list[StatedFigure] = []
    for metric in ("max_train_batch", "ratio"):
        block = metrics.get(metric)
        if not isinstance(block, dict):
            continue
        for k, v in block.items():
            if k in PRECISIONS and isinstance(v, dict):
                out += [StatedFigure(k, metric, str(kk), n) for kk, vv in v.items() if (n := _number(vv)) is not None]
            elif (n := _number(v)) is not None:
                out.append(StatedFigure(None, metric, str(k), n))
    return out


def claim_caveat(claims: list[tuple[str, Row]]) -> str:
    """One caveat for every reference row shown as the reference's claim: (cell label, row)."""
    items, whys = [], []
    for label, r in claims:
        nxt = f"{r.next_status} at {r.next_batch:,}" if r.next_batch and r.next_status else "no next batch"
        items.append(f"{label} {r.max_batch:,} (next: {nxt})")
        if r.search_status == UNCLASSIFIED_NEXT and (r.next_status or "").startswith("exit_"):
            why = ("`exit_<code>` is any non-zero exit: the reference runner does not classify it, so an "
                   "out-of-memory exit cannot be told from a crash")
        elif r.search_status == UNCLASSIFIED_NEXT:
            why = f"`{r.next_status}` is not a memory failure"
        else:
            why = f"the reference runner itself marks such a search `{r.search_status}`"
        if why not in whys:
            whys.append(why)
    return (f"**Reference's own claim** — {'; '.join(items)}: the max batch the reference runner recorded, shown as "
            f"its claim, not as a capacity: the batch after it did not fail with a classified memory failure "
            f"({'; '.join(whys)}). kitctl's own artifacts need a verified memory failure at max + 1.")


def trial_points(entry: dict[str, Any]) -> list[TrialPoint]:
    delta = _uses_delta(entry)
    src = peak_source(entry)
    return [TrialPoint(t["batch"], bool(t["ok"]), str(t.get("reason") or ("ok" if t["ok"] else "fail")),
                       (not t["ok"]) and t.get("reason") in MEMORY_REASONS, _trial_peak(t, delta), src)
            for t in entry.get("all_trials", [])]


def cap_mib(doc: dict[str, Any]) -> float | None:
    """The reference runner's VRAM cap (card total − reserve), as its trials recorded it."""
    for _, _, _, e in cells(doc):
        for t in e.get("all_trials", []):
            if isinstance(t.get("vram_cap_mib"), (int, float)):
                return float(t["vram_cap_mib"])
    gpu = (doc.get("machine") or {}).get("gpu") or {}
    reserve = config(doc).vram_reserve_mib
    if isinstance(gpu.get("memory_total_mib"), (int, float)) and isinstance(reserve, (int, float)):
        return float(gpu["memory_total_mib"] - reserve)
    return None
