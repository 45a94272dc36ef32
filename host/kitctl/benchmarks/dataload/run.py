"""Runs dataload: each dataset written once into data_dir (reused when its dataset.json matches), then per
loader × encoding × side × source × workers, `runs` fresh trial processes; the artifact saved after each."""
from __future__ import annotations

from typing import Any, Callable

from ...core.typed import from_json, to_json, updated
from ..data.corpus import corpus_images, corpus_key
from ..data.datasets import dataset_dir, prepare_datasets
from ..data.loaders import GPU_LOADERS
from ..data.recorded import kept_runs, measured
from ...core.stats import Summary
from ...core.steadiness import Steadiness
from ..data.session import save
from ..data.trial import Where, run_on_dataset
from .config import FORMAT_OF, DataloadConfig
from .results import DataloadCell, DataloadRun, cells
from .table import source_label


def prepare(cfg: DataloadConfig, where: Where, doc: dict[str, Any],
            note: Callable[[str], None]) -> dict[tuple, str | None]:
    """Write the datasets the cells need; returns why each (format, encoding, side) is unusable, or None."""
    return prepare_datasets(where, "dataload", cfg.corpus, cfg.data_dir, cfg.limit, cfg.timeout_s,
                            list(cfg.datasets()), doc, note)


def cell_window(runs: tuple[DataloadRun, ...], summary: Summary, cfg: DataloadConfig) -> dict[str, Any]:
    """A cell under the window rule: the median start-up (apart from the steady figure) and the steadiness
    verdict, by throughput's rule (every run's halves within the tolerance, the interval within 10 % of the
    median)."""
    from ...core.steadiness import cell_steadiness

    startup = [r.startup_seconds for r in runs if isinstance(r.startup_seconds, (int, float))]
    judged = [{"run": r.run, "steady": r.steady} for r in runs]  # what cell_steadiness reads of a run
    return {"startup": Summary.of(startup, cfg.ci_level) if startup else None,
            "steadiness": from_json(Steadiness, cell_steadiness(judged, to_json(summary), cfg.window.tolerance))}


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
    recorded = cells(doc)  # a resumed run's cells, read once: each is written back in its place
    at: dict[tuple, int] = {}
    for i, c in enumerate(recorded):
        at.setdefault(c.key, i)
    for key in cfg.cells():
        loader, enc, side, source, workers = key
        if key in at:
            idx, cell = at[key], recorded[at[key]]
        else:
            idx, cell = len(doc["results"]), DataloadCell.pending(*key)
            doc["results"].append(to_json(cell))
        # A resumed cell keeps its passing runs (a failed or edited one is run again) and its figure is derived
        # from them again, whatever its recorded summary says (data/recorded.py).
        cell = updated(cell, runs=kept_runs(cell.runs), status="pending", reason="")
        fmt = FORMAT_OF[loader]
        label = source_label(cfg, source)
        why = problems.get((fmt, enc, side))
        while why is None and len(cell.runs) < cfg.runs:
            i = len(cell.runs) + 1
            ds = dataset_dir(cfg.data_dir, n, fmt, enc, side, corpus_id)
            flags = ["--workers", str(workers), "--source", source, "--batch", str(cfg.batch), *cfg.trial_flags()]
            pinned = cfg.cpus_for(workers)
            tr = run_on_dataset(where, "dataload", cfg.image(loader), ["dataload", "--loader", loader, *flags], ds,
                                cfg.timeout_s, gpu=loader in GPU_LOADERS, cpus=pinned)
            r = DataloadRun.of_trial(i, tr)
            if pinned:
                r = updated(r, cpus=pinned)
            if cap is not None and source == "cold" and r.images_per_second is not None:
                rate = payload_rate(tr)
                r = updated(r, payload_mb_per_s=rate)
                if rate is None or rate > cap.mb_per_s * CAP_TOLERANCE:
                    # Faster than the device may deliver: the reads did not go through the cap (no io/blkio
                    # controller, another device, the page cache): not slow storage, so not this cell's figure.
                    r = updated(r, status="error", error=(
                        f"the read cap did not hold: the payload came at {rate or 0:,.1f} MB/s, above the "
                        f"{cap.mb_per_s:g} MB/s cap on {cap.device}"), images_per_second=None)
            cell = updated(cell, runs=(*cell.runs, r))
            doc["results"][idx] = to_json(cell)
            if r.images_per_second is None:
                why = f"run {i}/{cfg.runs} failed — {r.status}: {r.error}"
            else:
                note(f"{loader} {enc}@{side} {label} w={workers} run {i}/{cfg.runs}: "
                     f"{r.images_per_second:,.0f} images/s")
            save(store, doc)
        if why is not None and not measured(cell.runs, cfg.runs):
            cell = updated(cell, status="failed", reason=why, summary=None)
            note(f"{loader} {enc}@{side} {label} w={workers}: FAILED, {why}")
        else:
            cell = updated(cell, status="ok", summary=Summary.of([r.images_per_second for r in cell.runs],
                                                                  cfg.ci_level))
            if cfg.window is not None:
                cell = updated(cell, **cell_window(cell.runs, cell.summary, cfg))
        doc["results"][idx] = to_json(cell)
        save(store, doc)
