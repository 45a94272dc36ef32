"""Runs dataload: each dataset written once into data_dir (reused when its dataset.json matches), then per
loader × encoding × side × source × workers, `runs` fresh trial processes; the artifact saved after each."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from ...core.stats import summarize
from ..data.corpus import corpus_images, corpus_key
from ..data.datasets import dataset_dir, prepare_datasets
from ..data.loaders import GPU_LOADERS
from ..data.recorded import kept_runs, measured
from ..data.session import save
from ..data.trial import Where, run_on_dataset
from .config import FORMAT_OF, DataloadConfig
from .table import source_label


def find(doc: dict[str, Any], key: tuple) -> dict[str, Any] | None:
    return next((c for c in doc["results"]
                 if (c["loader"], c["encoding"], c["side"], c["source"], c["workers"]) == key), None)


def prepare(cfg: DataloadConfig, where: Where, doc: dict[str, Any],
            note: Callable[[str], None]) -> dict[tuple, str | None]:
    """Write the datasets the cells need; returns why each (format, encoding, side) is unusable, or None."""
    return prepare_datasets(where, "dataload", cfg.corpus, cfg.data_dir, cfg.limit, cfg.timeout_s,
                            list(cfg.datasets()), doc, note)


def run_figures(tr) -> dict[str, Any]:
    r = tr.result or {}
    ok = tr.status == "ok" and isinstance(r.get("images_per_second"), (int, float))
    return {"images_per_second": r.get("images_per_second") if ok else None, "images": r.get("images"),
            "window_seconds": r.get("window_seconds"), "warmup_seconds": r.get("warmup_seconds"),
            "epochs": r.get("epochs"), "impl": r.get("impl"), "batch_shape": r.get("batch_shape"),
            "cpu_count": r.get("cpu_count"), "versions": r.get("versions"), **window_figures(r)}


def window_figures(r: dict[str, Any]) -> dict[str, Any]:
    """What a run under the window rule adds: its start-up and build apart from the steady figure, the warm-up
    epoch, the window (rule, images, seconds, halves) and what each figure is; steady and halves_change at the
    top, as throughput's runs carry them. A trial before the rule recorded none of these: nothing is added."""
    w = r.get("window")
    if not isinstance(w, dict):
        return {}
    return {"startup_seconds": r.get("startup_seconds"), "build_seconds": r.get("build_seconds"),
            "warmup_epoch": r.get("warmup_epoch"), "window": w, "figures": r.get("figures"),
            "window_rule": w.get("rule"), "steady": w.get("steady") if isinstance(w.get("steady"), bool) else None,
            "halves_change": w.get("halves_change")}


def cell_window(runs: list[dict[str, Any]], summary: dict[str, Any], cfg: DataloadConfig) -> dict[str, Any]:
    """A cell under the window rule: the median start-up (apart from the steady figure) and the steadiness
    verdict, by throughput's rule (every run's halves within the tolerance, the interval within 10 % of the
    median)."""
    from ...core.steadiness import cell_steadiness

    startup = [r["startup_seconds"] for r in runs if isinstance(r.get("startup_seconds"), (int, float))]
    return {"startup": summarize(startup, cfg.ci_level) if startup else None,
            "steadiness": cell_steadiness(runs, summary, cfg.window.tolerance)}


# A capped cold epoch may read its payload this much faster than the cap (the throttle's first time slice
# lets a burst through) before the kit says the cap did not hold.
CAP_TOLERANCE = 1.10


def payload_rate(tr) -> float | None:
    """MB/s of the dataset's payload over the fastest timed epoch: a lower bound on what was read from storage
    (a loader reads at least the encoded images; file headers, padding and read-ahead come on top)."""
    r = tr.result or {}
    payload = (r.get("dataset") or {}).get("payload_bytes")
    rates = [payload / e["seconds"] / 1e6 for e in r.get("epochs") or [] if payload and e.get("seconds")]
    return max(rates) if rates else None


def run(cfg: DataloadConfig, store, doc: dict[str, Any], note: Callable[[str], None]) -> None:
    cap = cfg.read_cap()
    where = Where.of(cfg, doc, cap)
    problems = prepare(cfg, where, doc, note)
    save(store, doc)
    n = corpus_images(cfg.corpus, cfg.limit)
    corpus_id = corpus_key(cfg.corpus)
    for key in cfg.cells():
        loader, enc, side, source, workers = key
        cell = find(doc, key)
        if cell is None:
            cell = {"loader": loader, "encoding": enc, "side": side, "source": source, "workers": workers,
                    "status": "pending", "reason": "", "runs": [], "summary": None}
            doc["results"].append(cell)
        # A resumed cell keeps its passing runs (a failed or edited one is run again) and its figure is derived
        # from them again, whatever its recorded summary says (data/recorded.py).
        cell["runs"] = kept_runs(cell["runs"], "images_per_second")
        cell["status"], cell["reason"] = "pending", ""
        fmt = FORMAT_OF[loader]
        label = source_label(doc, source)
        why = problems.get((fmt, enc, side))
        while why is None and len(cell["runs"]) < cfg.runs:
            i = len(cell["runs"]) + 1
            ds = dataset_dir(cfg.data_dir, n, fmt, enc, side, corpus_id)
            flags = ["--workers", str(workers), "--source", source, "--batch", str(cfg.batch), *cfg.trial_flags()]
            tr = run_on_dataset(where, "dataload", cfg.image(loader), ["dataload", "--loader", loader, *flags], ds,
                                cfg.timeout_s, gpu=loader in GPU_LOADERS)
            figs = run_figures(tr)
            if cap is not None and source == "cold" and figs["images_per_second"] is not None:
                figs["payload_mb_per_s"] = rate = payload_rate(tr)
                if rate is None or rate > cap.mb_per_s * CAP_TOLERANCE:
                    # Faster than the device may deliver: the reads did not go through the cap (no io/blkio
                    # controller, another device, the page cache): not slow storage, so not this cell's figure.
                    figs["images_per_second"] = None
                    tr = replace(tr, status="error", error=(
                        f"the read cap did not hold: the payload came at {rate or 0:,.1f} MB/s, above the "
                        f"{cap.mb_per_s:g} MB/s cap on {cap.device}"))
            cell["runs"].append({"run": i, **tr.to_json(), **figs})
            if figs["images_per_second"] is None:
                why = f"run {i}/{cfg.runs} failed — {tr.status}: {tr.error}"
            else:
                note(f"{loader} {enc}@{side} {label} w={workers} run {i}/{cfg.runs}: "
                     f"{figs['images_per_second']:,.0f} images/s")
            save(store, doc)
        if why is not None and not measured(cell["runs"], "images_per_second", cfg.runs):
            cell.update(status="failed", reason=why, summary=None)
            note(f"{loader} {enc}@{side} {label} w={workers}: FAILED, {why}")
        else:
            cell.update(status="ok", summary=summarize([r["images_per_second"] for r in cell["runs"]], cfg.ci_level))
            if cfg.window is not None:
                cell.update(cell_window(cell["runs"], cell["summary"], cfg))
        save(store, doc)
