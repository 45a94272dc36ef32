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
from typing import Callable

from .. import benchmarks
from . import reference
from .format import cell_label, heading, join, num, table
from .measured import _MODEL_NAMES, _kit_cells, _tf32_engines, machine, measured
from .plots import PlotFile
from .sources import KITCTL, Source
from ..core.tables import Ratio, engine_label


def _when(iso: str | None) -> str:
    if not iso:
        return "—"
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return iso


def span_s(a: str | None, b: str | None) -> float | None:
    """Seconds from ISO time a to b (an artifact's created_utc to finished_utc); None if either is missing or
    unreadable, or b is before a."""
    try:
        s = (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return s if s >= 0 else None


def _duration(a: str | None, b: str | None) -> str | None:
    span = span_s(a, b)
    if span is None:
        return None
    s = int(span)
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
    # dataload and train-e2e measure one pipeline two ways: where both are given, each pair side by side
    from ..benchmarks.data.agreement import report_lines

    lines += report_lines([(s.name, s.doc) for s in sources if s.kind == KITCTL])
    from ..benchmarks.maxbatch import catalogue  # max-batch runs under several limits: max batch against VRAM

    lines += catalogue.report_lines(sources)
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
