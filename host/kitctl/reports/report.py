"""`kitctl report`: Markdown a team can paste into a pull request or a blog post.

`render(sources, plots, link_dir)` is a pure function of the result files (no clock, no
absolute paths): the same artifacts give the same bytes, so reports can be diffed and tested
against golden files. One file gives one report; several give an overview (every engine ×
precision side by side, the reference runner's numbers beside kitctl's) and then one section
per file.
"""
from __future__ import annotations

import os
import re
import shlex
import urllib.parse
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from .. import benchmarks
from . import reference
from .format import cell_label, fmt_int, heading, join, num, table
from .plots import PlotFile
from .sources import KITCTL, Source
from ..core.tables import Ratio, engine_label

_MODEL_NAMES = {"resnet50": "ResNet-50"}


def cudnn_text(v: Any) -> str:
    """91900 → "9.19.0"; 8907 → "8.9.7"; strings pass through."""
    if isinstance(v, int) and not isinstance(v, bool):
        if v >= 10000:
            return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
        if v >= 1000:
            return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"
    return str(v)


def _when(iso: str | None) -> str:
    if not iso:
        return "—"
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return iso


def _duration(a: str | None, b: str | None) -> str | None:
    try:
        s = int((datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds())  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if s < 0:
        return None
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h} h {m} min" if h else f"{m} min {sec} s" if m else f"{sec} s"


def _argv_text(argv: list[str]) -> str:
    if not argv:
        return "(not recorded)"
    return shlex.join(["kitctl", *argv[1:]])


# ---- the report -----------------------------------------------------------------------------

def title(src: Source) -> str:
    if src.kind == KITCTL:
        cfg = src.config
        what = benchmarks.get(src.benchmark).title
        if cfg.model is None:  # the data benchmarks: no model, their own data
            return f"{what} · {src.machine_short}"
        model = _MODEL_NAMES.get(cfg.model, cfg.model)
        size = re.match(r"\s*(\d+)x(\d+)x", str(cfg.input or ""))
        geometry = f" {size.group(1)}×{size.group(2)}" if size and size.group(1) != "32" else ""  # 32: as ever
        return f"{what} — {model}, {cfg.dataset} data{geometry} · {src.machine_short}"
    return f"Reference max batch — {src.doc.get('dataset', '?')} · {src.machine_short}"


def render(sources: list[Source], plots: list[PlotFile] | None = None, link_dir: Path | None = None) -> str:
    """The whole report. `link_dir`: the folder the Markdown file will live in (plots are
    linked relative to it); None means the current directory."""
    plots = plots or []
    base = Path(link_dir) if link_dir is not None else Path(".")
    lines: list[str] = []
    if len(sources) == 1:
        lines += _source_section(sources[0], 1, plots, base, None)
    else:
        lines += [f"# kitctl report — {len(sources)} results", ""]
        lines += _overview(sources, plots, base)
        for n, src in enumerate(sources, 1):
            lines += _source_section(src, 2, plots, base, n)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def _link(p: PlotFile, base: Path) -> str:
    """The plot's path relative to the report, URL-encoded: a Markdown link target ends at a space
    or a parenthesis, so "my plots/x.png" must be written "my%20plots/x.png" to render."""
    rel = os.path.relpath(os.path.abspath(p.path), os.path.abspath(base))
    return urllib.parse.quote(Path(rel).as_posix(), safe="/")


def _plot_lines(files: list[PlotFile], base: Path) -> list[str]:
    out = []
    for p in files:
        out += [f"![{p.title}]({_link(p, base)})", ""]
    return out


# A side-by-side overview wider than this, and mostly dashes (a run per engine), lists each cell's figures instead.
MAX_OVERVIEW_COLUMNS = 8


def _overview(sources: list[Source], plots: list[PlotFile], base: Path) -> list[str]:
    h = heading(2)
    lines = [h("Overview"), ""]
    lines += table(["#", "Result file", "Kind", "Benchmark", "GPU", "Date", "State"],
                    [[f"[{n}]", f"`{s.name}`", "kitctl" if s.kind == KITCTL else "reference runner", s.benchmark,
                      s.machine_short, _when(s.created), s.state] for n, s in enumerate(sources, 1)])
    lines.append("")
    for bench in benchmarks.all():
        group = [(n, s) for n, s in enumerate(sources, 1) if s.benchmark == bench.name]
        if len(group) < 2:
            continue
        keys: list[tuple[str, str]] = []
        vals: dict[tuple[int, str, str], str] = {}
        nums: dict[tuple[int, str, str], tuple[float, bool]] = {}  # value, is a lower bound
        for n, s in group:
            for engine, precision, text, figure in bench.cells(s):
                keys.append((engine, precision))
                vals[(n, engine, precision)] = text
                if figure is not None:
                    nums[(n, engine, precision)] = figure
        keys = list(dict.fromkeys(keys))
        if not keys:  # a benchmark without such cells (datasize, train-e2e): no empty table
            continue
        # A result without a single figure here (unfinished, failed) gets no column of dashes: it is named below.
        empty = [n for n, _ in group if all(vals.get((n, e, p), "—") in ("—", "") for e, p in keys)]
        group = [(n, s) for n, s in group if n not in empty]
        if not group:
            continue
        first = group[0][0]

        def ratio(n: int, e: str, p: str) -> str:
            a, b = nums.get((n, e, p)), nums.get((first, e, p))
            if not a or not b or (a[1] and b[1]):
                return "—"
            return ("≥ " if a[1] else "≤ " if b[1] else "") + f"{a[0] / b[0]:.2f}×"

        # A ratio column only where some cell was measured in both results (runs of different data or
        # worker counts share no cell: a column of dashes says nothing).
        filled = sum(1 for n, _ in group for e, p in keys if vals.get((n, e, p), "—") not in ("—", ""))
        later = [n for n, _ in group[1:] if any(ratio(n, e, p) != "—" for e, p in keys)]
        if 2 + len(group) + len(later) > MAX_OVERVIEW_COLUMNS and filled < 0.5 * len(group) * len(keys):
            # Mostly one engine per result (a run per engine): a column per result would be mostly dashes.
            # One row per cell instead, each figure with the result it comes from.
            lines += [f"{bench.report_unit.capitalize()}, per result:", ""]
            lines += table([*bench.cell_heads, f"{bench.report_unit} [result]"],
                           [[engine_label(e), p, "; ".join(f"{vals[(n, e, p)]} [{n}]" for n, _ in group
                                                           if vals.get((n, e, p), "—") not in ("—", ""))
                             or "—"] for e, p in keys])
            lines.append("")
            if empty:
                lines += [f"_{', '.join(f'[{n}]' for n in empty)}: no {bench.report_unit} to put beside these "
                          "(see each result's own section)._", ""]
            lines += _cross_ratios(group, bench)
            continue
        against = f" (ratios against [{first}])" if later else ""
        lines += [f"Side by side, {bench.report_unit}{against}:", ""]
        lines += table([*bench.cell_heads, *[f"[{n}] {s.machine_short}" for n, s in group],
                         *[f"[{n}] ÷ [{first}]" for n in later]],
                        [[engine_label(e), p, *[vals.get((n, e, p), "—") for n, _ in group],
                          *[ratio(n, e, p) for n in later]] for e, p in keys],
                        right=set(range(2, 2 + len(group) + len(later))))
        lines.append("")
        if empty:
            lines += [f"_{', '.join(f'[{n}]' for n in empty)}: no {bench.report_unit} to put beside these "
                      "(see each result's own section)._", ""]
        lines += _cross_ratios(group, bench)
    overview_plots = [p for p in plots if p.source is None]
    if overview_plots:
        lines += _plot_lines(overview_plots, base)
    return lines


def _cross_ratios(group: list[tuple[int, Source]], bench: benchmarks.Benchmark) -> list[str]:
    """Engines measured in separate runs on the same card, VRAM limit and data (e.g. one run per
    engine) compared as one run's end table would compare them ("PyTorch best vs OpenNN"). Left
    out where an engine × precision appears in more than one of those results (which to take?)."""
    parts: dict[tuple[str, str | None], list[tuple[int, Source]]] = {}
    for n, s in group:
        parts.setdefault((s.machine_short, s.recorded_dataset), []).append((n, s))
    out: list[str] = []
    for members in parts.values():
        if len(members) < 2:
            continue
        cells = [(e, p) for _, s in members for e, p, _, _ in bench.cells(s)]
        if len(cells) != len(set(cells)):
            continue
        found = bench.report_ratios([s for _, s in members])
        if found:
            refs = ", ".join(f"[{n}]" for n, _ in members)
            out += [f"Across {refs} (same GPU, VRAM limit and data; each engine from its own run):", ""]
            out += _ratio_table(found, bench.cell_heads[1]) + [""]
    return out


def _source_section(src: Source, level: int, plots: list[PlotFile], base: Path, n: int | None) -> list[str]:
    h, hh = heading(level), heading(level + 1)
    lines = [h((f"[{n}] " if n else "") + title(src)), ""]
    lines += [_meta_line(src), ""]
    note = src.doc.get("note")
    if isinstance(note, str) and note:
        lines += [f"> **Note:** {note}", ""]
    bench = benchmarks.get(src.benchmark)
    lines += [hh("Result"), ""] + bench.report_result(src) + [""]
    ratios = bench.report_ratios([src])
    if ratios:
        lines += [hh("Headline ratios"), ""] + _ratio_table(ratios, bench.cell_heads[1]) + [""]
    elif bench.no_ratios is None:
        lines += [hh("Headline ratios"), "",
                  f"_Fewer than two engines with a {bench.ratio_what} per precision: no ratios._", ""]
    elif bench.no_ratios:
        lines += [hh("Headline ratios"), "", bench.no_ratios, ""]
    if src.kind != KITCTL:
        lines += _stated_figures(src, hh)
    lines += [hh("Caveats"), ""]
    cav = caveats(src)
    lines += [f"- {c}" for c in cav] if cav else ["_None detected._"]
    lines.append("")
    mine = [p for p in plots if p.source == src.name]
    if mine:
        lines += [hh("Plots"), ""] + _plot_lines(mine, base)
    lines += [hh("What is measured"), ""] + table(["Item", "Value"], measured(src)) + [""]
    lines += [hh("Machine and software"), ""] + table(["Item", "Value"], machine(src)) + [""]
    lines += [hh("Reproduce"), ""] + reproduce(src) + [""]
    return lines


def _stated_figures(src: Source, hh: Callable[[str], str]) -> list[str]:
    """The reference file's own `metrics`, verbatim: its headline max batches and its ratios."""
    figs = reference.stated_figures(src.doc)
    if not figs:
        return []
    rows = [[f.precision or "/".join(sorted({p for _, p, _, _ in reference.cells(src.doc)})), f"`{f.metric}.{f.key}`",
             f.value_text] for f in figs]
    return [hh("Figures the reference file states"), ""] + table(["Precision", "Metric", "Value"], rows,
                                                                   right={2}) + \
        ["", "As written in its `metrics` (its ratios are OpenNN ÷ the other; kitctl's ratios above put the "
             "larger first).", ""]


def _meta_line(src: Source) -> str:
    d = src.doc
    if src.kind == KITCTL:
        parts = [f"`{src.name}`", f"run `{d['run_id']}`", src.state + (f" ({d['interrupted_by']})"
                                                                       if src.state != "complete" and d.get("interrupted_by") else "")]
        end = d.get("finished_utc") or d.get("updated_utc")
        dur = _duration(d.get("created_utc"), end)
        if dur and d.get("resumes"):  # the span includes the pauses between a run and its resumes
            dur += f" from the first start to the end, across {1 + len(d['resumes'])} invocations"
        parts.append(_when(d.get("created_utc")) + (f", {dur}" if dur else ""))
        count = benchmarks.get(src.benchmark).meta_count(src)
        if count is not None:
            parts.append(count)
        return " · ".join(parts)
    cells = reference.cells(d)
    return " · ".join([f"`{src.name}`", f"reference runner `{d.get('benchmark_id')}`",
                       f"run `{d.get('run_id', '?')}`", _when(src.created),
                       f"{sum(len(e.get('all_trials', [])) for *_, e in cells)} candidates"])


def _ratio_table(ratios: list[Ratio], key_head: str = "Precision") -> list[str]:
    return table([key_head, "Comparison", "Ratio"], [[r.precision, f"{r.a} vs {r.b}", r.value_text]
                                                     for r in ratios], right={2})


# ---- caveats --------------------------------------------------------------------------------

def _kit_cells(src: Source) -> list[dict[str, Any]]:
    """The engine × precision cells (a benchmark whose results have another shape: none)."""
    return src.kit_results if benchmarks.get(src.benchmark).engine_cells else []


def _tf32_engines(src: Source) -> list[str]:
    out = []
    for c in _kit_cells(src):
        if c["precision"] != "fp32":
            continue
        recs = [t.get("result") for t in c.get("trials", [])] + [(c.get("calibration") or {}).get("result")]
        recs += [r.get("result") for r in c.get("runs") or []]
        if any(isinstance(r, dict) and (r.get("settings") or {}).get("tf32") is True for r in recs):
            out.append(engine_label(c["engine"]))
    return list(dict.fromkeys(out))


def caveats(src: Source) -> list[str]:
    """Every caveat that applies to this result, in a fixed order."""
    out: list[str] = []
    d = src.doc
    bench = benchmarks.get(src.benchmark)
    if src.kind == KITCTL and src.state != "complete":
        out.append(bench.partial_caveat(src) if bench.partial_caveat else _partial_caveat(src))
    elif src.kind == KITCTL and d.get("resumes"):
        by = f" ({d['interrupted_by']})" if d.get("interrupted_by") else ""
        out.append(f"**Resumed** — the run was interrupted{by} and resumed {len(d['resumes'])}×: the candidates "
                   f"finished before the interruption were kept, not repeated (see Reproduce).")
    out += bench.caveats_results(src)
    if src.emulated and src.limit_mib is not None:
        card = (f"this {src.gpu_name}'s {num(src.card_total_mib)} MiB" if src.gpu_name is not None
                else "the card's memory (the artifact records no GPU)")
        out.append(f"**Emulated smaller card** — the VRAM limit L = {num(src.limit_mib)} MiB is below "
                   f"{card}: the gate held the device delta under B = {num(src.budget_mib)} MiB, but a physical card of that size may differ (driver "
                   f"reservations, kernel and allocator choices): read it as \"fits in L on this software "
                   f"stack\", not as a measurement on that card.")
    tf32 = _tf32_engines(src)
    if tf32:
        out.append(f"**TF32 in fp32** — {join(tf32)} allowed TF32 tensor-core math for fp32 matmuls and "
                   f"convolutions: not strict IEEE fp32, and the kernels (and their workspaces) may differ from a "
                   f"strict-fp32 run.")
    out += bench.caveats_protocol(src)
    if src.kind == KITCTL:
        rates = [t["peaks"].get("sample_rate_hz") for c in _kit_cells(src) for t in c.get("trials", [])]
        rates = [r for r in rates if isinstance(r, (int, float))]
        if rates and min(rates) < 500:
            out.append(f"**Slow VRAM sampler** — the NVML sampler reached only {min(rates):,.0f} samples/s "
                       f"on some candidate (target ≥ 500): a short spike above B may have been missed.")
        if src.config.device == "cpu":
            out.append("**CPU run** — no GPU: the memory limit is the candidate's host memory "
                       "(--memory-limit), not VRAM.")
    else:
        cells = reference.cells(d)
        if not all(reference.peak_source(e).startswith("device delta") for *_, e in cells):
            out.append("**Reference peaks are device-wide** — the reference runner's `peak_vram_mib` is the "
                       "device's whole used memory from nvidia-smi (other processes included), sampled by "
                       "polling; kitctl's peaks are the device delta over the idle baseline, sampled through "
                       "NVML at ≥ 500/s.")
    return out


def _partial_caveat(src: Source) -> str:
    d = src.doc
    bench = benchmarks.get(src.benchmark)
    by = f" by {d['interrupted_by']}" if d.get("interrupted_by") else ""
    done = [c for c in d["results"] if c.get("state") == "done"]
    planned = len(src.config.engines) * len(src.config.precisions)
    unfinished = []
    for c in d["results"]:
        if c.get("state") == "done":
            continue
        progress = bench.progress(src, c)
        unfinished.append(cell_label(c["engine"], c["precision"]) + (f" ({progress})" if progress else ""))
    run = f"kitctl run {src.benchmark} --resume"
    resume = f"`{run} {src.name}`" if src.name.endswith(".partial.json") else f"`{run}` on its `.partial.json`"
    text = (f"**Partial result** — the artifact is `{src.state}`{by}: {len(done)} of {planned} {bench.cell_noun} "
            f"finished")
    if unfinished:
        text += f"; unfinished: {'; '.join(unfinished)}"
    return text + f". Nothing in an unfinished row is a {bench.unfinished_figure}; continue with {resume}."


# ---- what is measured, machine, reproduce ---------------------------------------------------

def _results_of(src: Source) -> list[dict[str, Any]]:
    recs = []
    for c in _kit_cells(src):
        for t in [c.get("calibration")] + list(c.get("trials", [])):
            if t and isinstance(t.get("result"), dict):
                recs.append((c, t["result"]))
    return recs


def measured(src: Source) -> list[list[str]]:
    own = benchmarks.get(src.benchmark).report_measured
    if src.kind == KITCTL and own is not None:  # a benchmark that says itself what it measures
        return own(src.doc)
    return _measured_kitctl(src) if src.kind == KITCTL else _measured_reference(src)


def _measured_kitctl(src: Source) -> list[list[str]]:
    d, cfg = src.doc, src.config
    bench = benchmarks.get(src.benchmark)
    rows: list[list[str]] = []
    recs = _results_of(src)
    rows.append(["Question", bench.question])
    data = cfg.dataset
    if data == "synthetic":
        gens = {((r.get("settings") or {}).get("data") or {}).get("generator") for _, r in recs} - {None}
        data += f" (seeded, seed {cfg.seed}" + (f", {sorted(gens)[0]}" if len(gens) == 1 else "") + ")"
    elif cfg.data_dir:
        data += f" (`{cfg.data_dir}`)"
    rows.append(["Dataset geometry", f"{data}; {cfg.input}"])
    params = {}
    impls = {}
    for c, r in recs:
        if isinstance(r.get("parameters"), int):
            params.setdefault(engine_label(c["engine"]), r["parameters"])
        impl = (r.get("settings") or {}).get("model_impl")
        if impl:
            impls.setdefault(engine_label(c["engine"]), impl)
    model = _MODEL_NAMES.get(cfg.model, cfg.model)
    net = f"{model} (`{cfg.model}`)"
    if len(set(params.values())) == 1:
        net += f", {next(iter(params.values())):,} parameters"
    elif params:
        net += ", parameters: " + ", ".join(f"{k} {v:,}" for k, v in params.items())
    if impls:
        net += "; " + "; ".join(f"{k}: {v}" for k, v in impls.items())
    rows.append(["Network", net])
    rows.append(["Loss / optimizer", f"{cfg.loss} / {cfg.optimizer}"])
    rows += bench.measured_steps(src)
    prec = ", ".join(cfg.precisions)
    tf32 = _tf32_engines(src)
    if tf32:
        prec += f" (TF32 allowed in fp32: {join(tf32)})"
    rows.append(["Precision", prec])
    fresh = "a fresh container" if d["runtime"]["name"] == "docker" else "a fresh subprocess"
    rows += bench.measured_rules(src, fresh)
    b = d.get("budget")
    if b:
        emu = (f", emulating a smaller card on {num(src.card_total_mib)} MiB" if b.get("emulated_smaller_card")
               else "")
        rows.append(["VRAM rule", f"L = {num(b['limit_mib'])} MiB ({b['limit_source']}{emu}), R = "
                     f"{num(b['reserve_mib'])} MiB, B = L − R = {num(b['budget_mib'])} MiB; a host thread samples NVML and kills a candidate "
                     f"the moment its device delta (used − idle baseline) exceeds B"])
    elif cfg.memory_limit_mib:
        rows.append(["Memory rule", f"--memory-limit {cfg.memory_limit_mib:,} MiB of host memory per candidate"])
    for c in _kit_cells(src):
        o = c.get("overhead")
        if not o:
            continue
        text = (f"{num(o.get('overhead_mib'), 1)} MiB = device delta {num(o.get('device_delta_peak_mib'), 1)} − "
                f"framework peak {num(o.get('framework_peak_mib'), 1)} at batch {fmt_int(o.get('batch'))}")
        if c.get("framework_budget_mib") is not None:
            cap = (d["engines"].get(c["engine"]) or {}).get("framework_cap", "")
            text += f"; framework told B − overhead = {num(c['framework_budget_mib'])} MiB" + (f" ({cap})" if cap else "")
        rows.append([f"Calibrated overhead, {cell_label(c['engine'], c['precision'])}", text])
    rates = [t["peaks"].get("sample_rate_hz") for c in _kit_cells(src)
             for t in [c.get("calibration")] + list(c.get("trials", [])) if t]
    rates = [r for r in rates if isinstance(r, (int, float))]
    if rates:
        rows.append(["VRAM sampler", f"NVML, {min(rates):,.0f}–{max(rates):,.0f} samples/s achieved over "
                     f"{len(rates)} trials incl. calibration (target ≥ 500)"])
    rows.append(["cuDNN autotuning", _cudnn_row(src, cfg.cudnn_benchmark)])
    rows.append(["Timeout", f"{num(cfg.timeout_s)} s per candidate"])
    return rows


def _cudnn_row(src: Source, flag: bool) -> str:
    """The run's flag, and the engines whose trials turned autotuning on without it (a throughput fair
    path does: the trial records settings.cudnn_benchmark and why)."""
    if flag:
        return "on (--cudnn-benchmark)"
    results = [r for c in _kit_cells(src) for u in list(c.get("trials") or []) + list(c.get("runs") or [])
               if isinstance(u, dict) and isinstance(r := u.get("result"), dict)
               and isinstance(r.get("settings"), dict) and r["settings"].get("cudnn_benchmark") is True]
    own = sorted({r.get("engine") for r in results if r.get("engine")})
    if not own:
        return "off"
    return (f"off (--cudnn-benchmark not given); on in {join([f'`{e}`' for e in own])}: "
            "its trial turns it on (settings.cudnn_benchmark_source)")


def _measured_reference(src: Source) -> list[list[str]]:
    d = src.doc
    cfg = reference.config(d)
    proto = d.get("protocol") or {}
    rows = [["Question", "the largest training batch that completes a real training step (reference runner)"]]
    shape = cfg.input_shape
    geo = "×".join(str(x) for x in shape) + " inputs" if isinstance(shape, list) else "?"
    rows.append(["Dataset geometry", f"{d.get('dataset', '?')}; {geo}, {cfg.classes} classes"])
    rows.append(["Network", str(cfg.model)])
    rows.append(["Loss / optimizer", f"{cfg.loss} / {cfg.optimizer}"])
    precs = sorted({p for _, p, _, _ in reference.cells(d)})
    rows.append(["Precision", ", ".join(precs)])
    q = proto.get("quality_rule") or {}
    m = proto.get("measurement_rule") or {}
    if q or m:
        rows.append(["Capacity rule", "; ".join(x for x in [
            f"{q.get('metric')} = {q.get('target')} ({q.get('status')})" if q else "",
            str(m.get("warmup") or ""), str(m.get("runs") or "")] if x)])
    rule = str(m.get("aggregation") or "")
    if cfg.max_batch_limit:
        rule += f"{'; ' if rule else ''}max batch limit {cfg.max_batch_limit:,}"
    if rule:
        rows.append(["Search rule", rule])
    if src.budget_mib is not None:
        rows.append(["VRAM rule", f"cap = card total {num(src.card_total_mib)} − reserve "
                     f"{fmt_int(cfg.vram_reserve_mib)} = {src.budget_mib:,.0f} MiB (the trials' `vram_cap_mib`)"])
    srcs = sorted({reference.peak_source(e) for *_, e in reference.cells(d)})
    rows.append(["Peaks", "; ".join(srcs)])
    return rows


def _versions_text(v: dict[str, Any] | None) -> str:
    if not v:
        return "not reported"
    v = dict(v)
    parts = []
    fw = v.pop("framework", None)
    if fw and fw in v:
        parts.append(f"{fw} {v.pop(fw)}")
    if "cuda" in v:
        parts.append(f"CUDA {v.pop('cuda')}")
    if "cudnn" in v:
        parts.append(f"cuDNN {cudnn_text(v.pop('cudnn'))}")
    for k in ("device", "trial_protocol"):
        v.pop(k, None)
    if "python" in v:
        parts.append(f"Python {v.pop('python')}")
    parts += [f"{k} {cudnn_text(x) if 'cudnn' in k else x}" for k, x in v.items()]
    return " · ".join(parts)


def _provenance_text(p: dict[str, Any]) -> str:
    if not p:
        return "not recorded"
    if p.get("runtime") == "docker" or p.get("id"):
        bits = [f"image `{p.get('image', '?')}`"]
        if p.get("id"):
            bits.append(f"id `{str(p['id'])[:19]}`")
        digests = p.get("repo_digests") or []
        bits.append(f"digest `{digests[0]}`" if digests else "no repo digest (local build)")
        return ", ".join(bits)
    if p.get("interpreter") is None and p.get("trial"):  # a native trial program (OpenNN)
        return f"local trial program `{p['trial']}`"
    return f"local interpreter `{p.get('interpreter', '?')}`" + (f", trial `{p['trial']}`" if p.get("trial") else "")


def machine(src: Source) -> list[list[str]]:
    return _machine_kitctl(src) if src.kind == KITCTL else _machine_reference(src)


def _machine_kitctl(src: Source) -> list[list[str]]:
    d = src.doc
    host = d.get("host") or {}
    g = host.get("gpu")
    rows: list[list[str]] = []
    if g:
        rows.append(["GPU", f"{g.get('name')} · UUID `{g.get('uuid')}` · PCI {g.get('pci_bus_id', '?')} · "
                     f"MIG {g.get('mig_mode')}"])
        rows.append(["Driver", f"{g.get('driver')}" + (f" (CUDA driver {g['cuda_driver_version']})"
                                                       if g.get("cuda_driver_version") else "")])
        mem = f"{num(g.get('total_mib'))} MiB total"
        if src.emulated and src.limit_mib:
            mem += f"; VRAM limit L = {num(src.limit_mib)} MiB (emulated smaller card)"
        rows.append(["Memory", mem])
        c, mx = g.get("clocks_mhz") or {}, g.get("max_clocks_mhz") or {}
        if c:
            rows.append(["Clocks at start", f"SM {fmt_int(c.get('sm'))} MHz (max {fmt_int(mx.get('sm'))}), memory "
                         f"{fmt_int(c.get('memory'))} MHz; power limit {num(g.get('power_limit_w'))} W; "
                         f"persistence {g.get('persistence_mode', '?')}"])
    users = src.gpu_users
    if g and users is not None:  # a data benchmark: what ran on it, never a CPU loader
        rows.append(["GPU use", f"{join(users)} ran on it; nothing else did" if users else
                     "unused: nothing in this run ran on a GPU (CPU loaders and CPU work only)"])
    elif not g and users:
        rows.append(["GPU", "not recorded (the artifact names none: written before the data benchmarks recorded "
                            f"their GPU, or without NVML); {join(users)} ran on a GPU"])
    elif not g:
        rows.append(["GPU", "none (CPU run)"])
    rows.append(["Host", f"{host.get('hostname')} · {host.get('cpu_count', '?')} CPUs · {host.get('platform')} · "
                 f"controller Python {host.get('python')}"])
    rt = d.get("runtime") or {}
    rtext = rt.get("name", "?")
    if rt.get("name") == "docker":
        rtext += f" (Docker {host.get('docker_version') or '?'}): a fresh container per candidate"
        by_image: dict[str, list[str]] = {}  # the data benchmarks' loader (and writer) images, with their ids
        for what, im in [*(rt.get("images") or {}).items(), *((rt.get("writers") or {}).items())]:
            by_image.setdefault(im, []).append(what)
        for im, whats in by_image.items():
            iid = ((rt.get("image_ids") or {}).get(im) or {}).get("id") or ""
            rtext += f"; `{im}`{f' ({iid[:19]})' if iid else ''}: {', '.join(dict.fromkeys(whats))}"
    else:
        rtext += ": a fresh subprocess per candidate"
    rows.append(["Runtime", rtext])
    for name, e in d.get("engines", {}).items():
        rows.append([e.get("label") or engine_label(name), f"{_provenance_text(e.get('provenance') or {})}; "
                     f"{_versions_text(e.get('versions'))}"])
    k = d.get("kit") or {}
    kit = f"kitctl {k.get('version')}"
    if k.get("git_commit"):
        kit += f" · commit `{k['git_commit'][:12]}`"
        if k.get("git_dirty") is not None:
            kit += " (uncommitted changes)" if k["git_dirty"] else " (clean)"
    else:
        kit += " · git commit not recorded"
    rows.append(["Kit", kit])
    return rows


def _machine_reference(src: Source) -> list[list[str]]:
    d = src.doc
    m = d.get("machine") or {}
    g = m.get("gpu") or {}
    rows = [["GPU", str(g.get("name", "?"))], ["Driver", str(g.get("driver_version", "?"))],
            ["Memory", f"{num(src.card_total_mib)} MiB total"]]
    v = m.get("versions") or {}
    rows.append(["Versions", " · ".join(f"{k} {cudnn_text(x) if 'cudnn' in k else x}" for k, x in v.items())
                 or "not reported"])
    names = {kit: ref for kit, _, ref, _ in reference.cells(d)}
    rows.append(["Engines", ", ".join(f"`{ref}` → {engine_label(kit)}" for kit, ref in names.items())])
    rows.append(["Runner", f"reference runner, commit `{d.get('git_commit', '?')}`"])
    return rows


def reproduce(src: Source) -> list[str]:
    d = src.doc
    if src.kind != KITCTL:
        cmd = (d.get("commands") or {}).get("run")
        return ["```bash", cmd, "```"] if cmd else ["_The reference file records no command._"]
    out = ["```bash", _argv_text(d.get("argv") or []), "```"]
    resumes = d.get("resumes") or []
    if resumes:
        by = f" ({d['interrupted_by']})" if d.get("interrupted_by") else ""
        out += ["", f"The run was interrupted{by} and continued {len(resumes)}× with:", "", "```bash"]
        out += [f"{_argv_text(r.get('argv') or [])}  # {r.get('utc', '?')}" for r in resumes]
        out.append("```")
        # one line per GPU, not per resume: back-to-back resumes on one warm machine share its GPU
        moved: dict[str, dict] = {}
        for r in resumes:
            if isinstance(r.get("gpu"), dict):
                moved.setdefault(str(r["gpu"].get("uuid", "?")), r["gpu"])
        out += [f"\nContinued on another {g.get('name', 'GPU')} ({uuid}, same memory and driver)."
                for uuid, g in moved.items()]
    return out
