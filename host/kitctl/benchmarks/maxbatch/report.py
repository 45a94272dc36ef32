"""Max-batch's part of `kitctl report`, `results list` and the overview: the "Result" table of one
artifact, its ratios, its rows of "What is measured", its caveats (reached through the hooks on
`Benchmark`, never by name). Also what the reference runner's max-batch files render through."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.stats import median
from ...core.tables import Ratio, engine_label
from ...reports import reference
from ...reports.format import cell_label, fmt_int, join, mib, table
from .cells import shared_device_proof, side_by_side
from .results import MaxbatchCell, cell_of, cells as typed_cells
from .table import CAPACITY_STATUSES, MEMORY_FAILURES, Row, cell_row, failures_below_pass, peak_heading, \
    peak_inversions, ratio_pairs, trial_points

if TYPE_CHECKING:  # the report shell's type; importing it here would make reports and benchmarks a cycle
    from ...reports.sources import Source

QUESTION = "the largest training batch that completes one real step (forward, backward, optimizer update)"


def load_rows(src: Source, doc: dict[str, Any]) -> None:
    typed = typed_cells(doc)
    src.rows = [cell_row(c) for c in typed]
    src.points = {c.key: trial_points(c) for c in typed}


def _kit_cells(src: Source) -> list[MaxbatchCell]:
    """A kitctl artifact's cells, typed; none for a reference-runner file."""
    return typed_cells(src.doc) if src.is_kitctl else []


def row_value(r: Row) -> str:
    if r.has_figure:
        return r.figure_text
    return "none" if r.search_status in ("invalid_non_memory_failure", "no_passing_batch") else "—"


def cells(src: Source) -> list[tuple[str, str, str, tuple[float, bool] | None]]:
    """Each row's max batch as the overview shows it; a censored one is a lower bound."""
    return [(r.engine, r.precision, row_value(r),
             (float(r.max_batch), r.search_status == "censored_at_max_batch") if r.has_figure else None)  # type: ignore[arg-type]
            for r in src.rows]


def result_table(src: Source) -> list[str]:
    rows = []
    for r in src.rows:
        nxt = f"{r.next_batch:,}" + (f" ({r.next_status})" if r.next_status else "") if r.next_batch else "—"
        rows.append([engine_label(r.engine), r.precision, row_value(r) if r.max_batch else "—",
                     mib(r.peak_mib) if r.has_figure else "—", nxt, r.result])
    if not rows:
        return ["_No engine × precision has started yet._"]
    heading = peak_heading(src.gpu_name is not None)
    out = table(["Engine", "Precision", "Max batch", heading, "Next batch", "Result"], rows,
                 right={2, 3, 4})
    srcs = sorted({r.peak_source for r in src.rows if r.peak_source})
    if src.is_kitctl:
        gate = "B" if src.budget_mib is not None else "the memory limit"
        foot = (f"Max batch: the largest batch whose candidate passed (the capacity rule below, memory "
                f"under {gate}); next batch: the verified failure above it. ")
    else:
        foot = "Max batch and next batch as the reference runner recorded them. "
        if any(r.has_figure and r.reference_claim for r in src.rows):
            foot += ("\"(reference claim)\": the reference runner's own figure; its next failure is not a "
                     "classified memory failure, so kitctl's rule would not call it a capacity (see Caveats). ")
    if srcs:
        foot += f"{heading}: " + "; ".join(srcs) + "."
    return out + ["", foot.strip()]


def ratios(sources: list[Source]) -> list[Ratio]:
    return ratio_pairs([r for s in sources for r in s.rows])


def meta_count(src: Source) -> str:
    cs = typed_cells(src.doc)
    cands = sum(len(c.trials) for c in cs)
    calib = sum(1 for c in cs if c.calibration)
    # Speculative candidates (--gpus, more GPUs than cells) were measured but the answer does not use them.
    off = sum(1 for c in cs for t in c.trials if t.on_path is False)
    # Cancelled once the search could no longer use them: killed, no measurement, not counted above.
    gone = sum(len(c.cancelled) for c in cs)
    return (f"{cands} candidates" + (f" ({off} speculative, off the search's path)" if off else "")
            + (f" + {gone} speculative cancelled unfinished" if gone else "")
            + (f" + {calib} calibration" if calib else ""))


def measured_steps(src: Source) -> list[list[str]]:
    return [["Steps per candidate", src.config.own.steps]]


def measured_rules(src: Source, fresh: str) -> list[list[str]]:
    d, cfg, own = src.doc, src.config, src.config.own
    gate = ("device delta ≤ B" if src.budget_mib is not None else
            "no host OOM kill under --memory-limit" if cfg.memory_limit_mib else "no memory failure")
    slots = (d.get("slots") or {}).get("slots")
    if slots and slots > 1 and src.budget_mib is not None:
        # --slots on a GPU: each candidate held against B by its own per-process memory (+ the cell's offset).
        gate = "its own per-process memory + the cell's calibrated offset ≤ B"
    rows = [["Capacity rule", f"a candidate passes ⇔ exit 0, status `ok`, finite losses, {gate}; "
             f"each candidate is {fresh} ({d['runtime']['name']} runtime)"]]
    strategy = own.strategy
    if strategy == "protocol":
        rule = (f"`protocol`: start at {fmt_int(own.start_batch)}; double until the first failure or "
                f"--max-batch {fmt_int(own.max_batch)}; bisect to resolution 1; verify that max + 1 "
                f"fails; a timeout/crash/error is retried once, twice stops the engine")
    else:
        rule = f"`{strategy}` (start {fmt_int(own.start_batch)}, --max-batch {fmt_int(own.max_batch)})"
    rows.append(["Search rule", rule])
    cs = typed_cells(d)
    if slots and slots > 1:
        walls = ", ".join(f"{c.engine} {c.precision} {c.slots_wall_s:,.0f} s" for c in cs
                          if isinstance(c.slots_wall_s, (int, float)))
        rows.append(["Slots", f"up to {slots} candidates of a search at once on the device (--slots "
                     f"{d['slots'].get('requested')}); the answer is the one-slot search's"
                     + (f"; search wall time, first candidate to answer: {walls}" if walls else "")])
    times = [x for x in (candidate_time(c) for c in cs) if x]
    if times:
        rows.append(["Candidate time", "; ".join(times)])
    return rows


# A trial's phases (trials/common/kittrial.py), in the order they run, and how the report names them.
PHASES = (("startup_s", "start-up"), ("import_s", "import"), ("device_s", "device"), ("build_s", "build"),
          ("steps_s", "steps"))


def candidate_time(cell: MaxbatchCell | dict[str, Any]) -> str | None:
    """Where a cell's candidates spent their time: the median wall time per candidate (the host's, process or
    container start to exit) and, where the trials timed their phases, the median of each and what lies outside
    them (process creation and teardown; the phases an engine does not split out). None: no phases recorded."""
    cell = cell_of(cell)
    # each candidate's phases: the trial's own KIT-RESULT object, read as recorded
    timed = [(t, (t.result or {}).get("phases")) for t in cell.trials]
    timed = [(t, ph) for t, ph in timed if isinstance(ph, dict) and isinstance(t.elapsed_s, (int, float))]
    if not timed:
        return None
    # a phase every candidate timed (an OOM ends a candidate before its later phases: those are left out)
    keys = [(k, label) for k, label in PHASES if all(isinstance(ph.get(k), (int, float)) for _, ph in timed)]
    parts = [f"{label} {median([ph[k] for _, ph in timed]):,.1f}" for k, label in keys]
    outside = [t.elapsed_s - sum(ph[k] for k, _ in keys) for t, ph in timed]
    parts.append(f"outside them {max(0.0, median(outside)):,.1f}")
    wall = median([t.elapsed_s for t, _ in timed])
    # the host cores a candidate kept busy (its CPU seconds over its wall time): what side-by-side slots share
    cores = [c["cores"] for c in ((t.result or {}).get("cpu") for t, _ in timed)
             if isinstance(c, dict) and isinstance(c.get("cores"), (int, float))]
    busy = f"; CPU {median(cores):,.1f} cores busy (median)" if cores else ""
    # --prestart: each process started and imported its framework before its candidate (not in the wall time)
    early = [p for p in ((t.result or {}).get("prestart") for t, _ in timed) if isinstance(p, dict)]
    ahead = ""
    if early:
        got = [(k, label) for k, label in (("startup_s", "start-up"), ("import_s", "import"))
               if all(isinstance(p.get(k), (int, float)) for p in early)]
        forked = sum(1 for p in early if p.get("forked") is True)
        how = ", ".join(x for x in (f"{forked} forked by a fork server (one import per slot)" if forked else "",
                                      f"{len(early) - forked} prestarted" if len(early) > forked else "") if x)
        ahead = (f"; {how}, ahead of the candidate (medians, s: "
                 + ", ".join(f"{label} {median([p[k] for p in early]):,.1f}" for k, label in got) + ")")
    return (f"{engine_label(cell.engine)} {cell.precision}: {wall:,.1f} s per candidate "
            f"({len(timed)} candidates; medians, s: {', '.join(parts)}){busy}{ahead}")


def caveats_results(src: Source) -> list[str]:
    """Censored, invalid and unpassed searches, the reference's claims, retried failures."""
    out: list[str] = []
    for r in src.rows:
        label = cell_label(r.engine, r.precision)
        if r.search_status == "censored_at_max_batch":
            out.append(f"**Censored search** — {label} passed at the largest batch allowed (--max-batch "
                       f"{r.max_batch:,}) without a failure: {r.max_batch:,} is a lower bound, not a capacity.")
        elif r.has_figure and r.reference_claim:
            continue  # one caveat for all of them, below
        elif r.search_status == "invalid_non_memory_failure":
            out.append(f"**Non-memory failure** — {label}: the search ended on a failure that is not a memory "
                       f"failure: {r.result.removeprefix('invalid: ')}; no capacity is reported for it.")
        elif r.search_status == "no_passing_batch":
            out.append(f"**No passing batch** — {label}: not even the smallest candidate passed.")
    claims = [(cell_label(r.engine, r.precision), r) for r in src.rows if r.has_figure and r.reference_claim]
    if claims:
        out.append(reference.claim_caveat(claims))
    for c in _kit_cells(src):
        if c.search_status in CAPACITY_STATUSES:
            other = [t for t in c.trials if t.status not in MEMORY_FAILURES and not t.ok]
            if other:
                what = join([f"{t.status} at {t.batch:,}" for t in other])
                out.append(f"**Retried failures** — {cell_label(c.engine, c.precision)}: {len(other)} "
                           f"candidate(s) failed without a memory status ({what}) and were retried.")
        if (note := rematerialization_note(c)) is not None:
            out.append(note)
        if (note := slots_cpu_note(c, src.doc.get("slots"))) is not None:
            out.append(note)
    return out


def slots_cpu_note(cell: MaxbatchCell, fit: dict[str, Any] | None) -> str | None:
    """--slots: what the slots shared, read from the cores each candidate kept busy (result.cpu). Side by side,
    m cores each (median) times the slots near the host's cores: they waited for the CPU. Well under it, with a
    deadline passed beside others that the batch's retry alone kept (shared_device_proof): the device was what they
    shared. With no candidate measured side by side, the calibration's cores (it runs alone) times the slots says
    whether they could ask for more than the host has."""
    if not isinstance(fit, dict) or not isinstance(fit.get("slots"), int) or fit["slots"] < 2 or not fit.get("cores"):
        return None
    label, n, host = cell_label(cell.engine, cell.precision), fit["slots"], fit["cores"]
    together = side_by_side(cell)
    beside = [c["cores"] for t in together if isinstance(c := (t.result or {}).get("cpu"), dict)
              and isinstance(c.get("cores"), (int, float))]
    if beside:
        m = median(beside)
        busy = (f"side by side its candidates kept {m:,.1f} cores busy each (median of {len(beside)}), about "
                f"{m * n:,.0f} of the host's {host} with {n} slots")
        if m * n >= 0.9 * host:
            return (f"**Slots share the host's CPUs** — {label}: {busy}: they waited for the CPU, and took longer "
                    f"than alone. Fewer --slots, or more cores, shortens them.")
        if (proof := shared_device_proof(cell)) is None:
            return None
        first, retry = proof
        later = sum(1 for t in together if t.slot.started_unix_s >= retry.slot.ended_unix_s)  # type: ignore[union-attr]
        then = ("from then on the cell ran one candidate at a time" if not later else
                f"{later} candidates still ran side by side after it (a kit from before one-at-a-time)")
        return (f"**Slots share the device** — {label}: batch {first.batch:,} passed its deadline beside other "
                f"candidates ({first.elapsed_s or 0:,.0f} s) and ended alone in {retry.elapsed_s or 0:,.0f} s, while "
                f"{busy}: the host had cores to spare, so the time was lost on the device; {then}. --slots 1 suits "
                f"this engine on this card.")
    cpu = ((cell.calibration.result or {}) if cell.calibration is not None else {}).get("cpu")
    if not isinstance(cpu, dict) or not isinstance(cpu.get("cores"), (int, float)) or cpu["cores"] * n <= host:
        return None
    return (f"**Slots may share the host's CPUs** — {label}: its calibration candidate, alone, kept "
            f"{cpu['cores']:,.1f} cores busy; {n} slots side by side would ask for {cpu['cores'] * n:,.0f} of the "
            f"host's {host} (no candidate recorded its cores side by side).")


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f}"  # as XLA prints them (binary GiB, two decimals)


def rematerialization_note(cell: MaxbatchCell) -> str | None:
    """A capacity whose passing candidate at max batch XLA compiled with rematerialisation (its
    trial's `xla_rematerialization`, from XLA's own log line): the step recomputed activations to
    fit XLA's memory limit, which an eager engine does not do, so the figure is not like for like."""
    if cell.search_status not in CAPACITY_STATUSES or not cell.max_batch:
        return None
    at_max = [t for t in cell.trials if t.batch == cell.max_batch and t.ok]
    # the trial's own KIT-RESULT object (and XLA's log line in it), read as recorded
    remat = next((r for t in at_max if isinstance(r := (t.result or {}).get("xla_rematerialization"),
                                                     dict) and r.get("rematerialised")), None)
    if remat is None:
        return None
    limit = remat.get("limit_bytes")
    reach = ("" if limit is None else f"; its limit {_gib(limit)} GiB was "
             + ("reached" if remat.get("fitted") else "not reached (the candidate passed all the same)"))
    return (f"**XLA rematerialised** — {cell_label(cell.engine, cell.precision)} at max batch "
            f"{cell.max_batch:,}: XLA recomputes activations to fit its memory limit, "
            f"{_gib(remat['original_bytes'])} → {_gib(remat['reduced_to_bytes'])} GiB{reach} "
            f"(XLA's log, per trial: `xla_rematerialization`).")


def caveats_protocol(src: Source) -> list[str]:
    """One search per cell; non-monotone pass/fail and peaks along the candidates."""
    out = ["**One search** — each engine × precision was searched once and every candidate ran once; "
           "the boundary was not repeated."]
    for (engine, precision), pts in src.points.items():
        label = cell_label(engine, precision)
        for fail, ok in failures_below_pass(pts):
            out.append(f"**Non-monotone pass/fail** — {label}: batch {fail.batch:,} failed ({fail.status}) "
                       f"while the larger batch {ok.batch:,} passed; a bisection assumes every batch below a "
                       f"pass passes, so the max batch may not be the largest that fits.")
        inv = peak_inversions(pts)
        if inv:
            what = join([f"batch {a.batch:,} peaked at {a.peak_mib:,.0f} MiB, batch {b.batch:,} at "
                          f"{b.peak_mib:,.0f} MiB" for a, b in inv])
            out.append(f"**Note: peak memory is not monotone in the batch** — {label}: {what} — typically "
                       f"allocator and convolution-algorithm choices that change with the batch.")
    return out


def headline(src: Source) -> str:
    parts = []
    for r in src.rows:
        if r.has_figure:
            v = r.figure_text
        elif r.search_status == "invalid_non_memory_failure":
            v = "invalid"
        elif r.search_status == "no_passing_batch":
            v = "no pass"
        else:
            v = "unfinished"
        parts.append(f"{r.engine} {r.precision}: {v}")
    return "; ".join(parts)


def progress(src: Source, cell: MaxbatchCell | dict[str, Any]) -> str:
    """An unfinished search: its candidates so far and the bracket they make."""
    trials = cell_of(cell).trials
    path = [t for t in trials if t.on_search_path]  # the bracket is the search's own
    ok = [t.batch for t in path if t.ok]
    mem = [t.batch for t in path if t.status in MEMORY_FAILURES]
    bits = [f"{len(trials)} candidates so far"]
    if ok:
        bits.append(f"largest pass {max(ok):,}")
    if mem:
        bits.append(f"smallest memory failure {min(mem):,}")
    return ", ".join(bits)
