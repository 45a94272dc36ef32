"""A report's "What is measured" and "Machine" tables of one result: the question, protocol and rules the figures
rest on, and the host, GPU, runtime and software versions that gave them (kitctl's results and the reference
runner's)."""
from __future__ import annotations

import os
import re
from datetime import datetime
from typing import Any

from .. import benchmarks
from . import reference
from .format import cell_label, fmt_int, join, num, table
from .sources import KITCTL, Source
from ..core.tables import engine_label

_MODEL_NAMES = {"resnet50": "ResNet-50"}


def _budget_slack(cell: dict) -> float | None:
    """The MiB a cell's trials kept between their allocator's cap and the budget they were told, as their
    results record it (trials from before that slack record nothing)."""
    for t in cell.get("trials") or []:
        slack = ((t.get("result") or {}).get("settings") or {}).get("budget_slack_mib")
        if isinstance(slack, (int, float)):
            return float(slack)
    return None


def cudnn_text(v: Any) -> str:
    """91900 → "9.19.0"; 8907 → "8.9.7"; strings pass through."""
    if isinstance(v, int) and not isinstance(v, bool):
        if v >= 10000:
            return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
        if v >= 1000:
            return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"
    return str(v)


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
            slack = _budget_slack(c)
            if slack:  # the trial caps its allocator this far under what it was told (kittrial.FRAMEWORK_SLACK_MIB)
                text += (f", which the trial caps {num(slack)} MiB under: "
                         f"{num(c['framework_budget_mib'] - slack)} MiB")
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
