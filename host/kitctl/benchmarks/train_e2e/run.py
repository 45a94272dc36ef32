"""Runs train-e2e: the dataset written once (the same folders dataload writes and reuses), then per model × loader
`runs` fresh trial processes or containers (`trial.py train`), `synthetic` first; the artifact saved after each."""
from __future__ import annotations

from typing import Any, Callable

from ...core.typed import from_json, to_json, updated
from ..data.loaders import LOADER_FORMAT as FORMAT_OF
from ..data.corpus import corpus_images, corpus_key
from ..data.datasets import dataset_dir, prepare_datasets
from ..data.recorded import kept_runs, measured
from ...core.stats import Summary
from ...core.steadiness import Steadiness
from ..data.results import Window
from ..data.session import save
from ..data.trial import Where, run_on_dataset
from .config import TrainE2EConfig
from .results import TrainE2ECell, TrainE2ERun, TrainE2ESummary, cells


def summaries(runs: tuple[TrainE2ERun, ...], level: float) -> TrainE2ESummary:
    """Median and interval of each per-run figure the table reads (the loader's own rate: real loaders only)."""
    loader = [r.loader_images_per_second for r in runs if isinstance(r.loader_images_per_second, (int, float))]
    startup = [r.loader_startup_seconds for r in runs if isinstance(r.loader_startup_seconds, (int, float))]
    # under the window rule: the loader's start-up, apart from its steady figure (absent where no run had one)
    return TrainE2ESummary(train=Summary.of([r.train_images_per_second for r in runs], level),
                           busy=Summary.of([r.busy_fraction for r in runs], level),
                           loader=Summary.of(loader, level) if loader else None,
                           loader_startup=Summary.of(startup, level) if startup else None,
                           recorded_keys=("train", "busy", "loader"))


def loader_steadiness(runs: tuple[TrainE2ERun, ...], summary: Summary | None, tolerance: float) -> Steadiness:
    """The loader-alone window's steadiness over a cell's runs, by throughput's rule (cell_steadiness)."""
    from ...core.steadiness import cell_steadiness

    judged = [{"run": r.run, "steady": r.loader_alone.window.steady
               if r.loader_alone is not None and isinstance(r.loader_alone.window, Window) else None} for r in runs]
    return from_json(Steadiness, cell_steadiness(judged, to_json(summary), tolerance))


def run(cfg: TrainE2EConfig, store, doc: dict[str, Any], note: Callable[[str], None]) -> None:
    where = Where.of(cfg, doc)
    problems = prepare_datasets(where, "train-e2e", cfg.corpus, cfg.data_dir, cfg.limit, cfg.timeout_s, cfg.datasets(),
                                doc, note)
    save(store, doc)
    n = corpus_images(cfg.corpus, cfg.limit)
    corpus_id = corpus_key(cfg.corpus)
    need = cfg.images_to_last_timed_step()
    if need > n and any(ld != "synthetic" for ld in cfg.loaders):
        note(f"note: the timed steps end {need:,} images into the loader's epoch and the corpus holds {n:,}: each "
             f"loader's window will cross an epoch start and hold its restart (≥ {need:,} images keep it inside one)")
    recorded = cells(doc)  # a resumed run's cells, read once: each is written back in its place
    at: dict[tuple, int] = {}
    for i, c in enumerate(recorded):
        at.setdefault(c.key, i)
    for key in cfg.cells():
        model, loader = key
        if key in at:
            idx, cell = at[key], recorded[at[key]]
        else:
            idx, cell = len(doc["results"]), TrainE2ECell.pending(model, loader)
            doc["results"].append(to_json(cell))
        # A resumed cell keeps its passing runs (a failed or edited one is run again) and its figures are derived
        # from them again, whatever its recorded summary says (data/recorded.py).
        cell = updated(cell, runs=kept_runs(cell.runs), status="pending", reason="")
        argv = ["train", "--loader", loader, "--model", model, "--precision", cfg.precision, "--device", cfg.device,
                "--workers", str(cfg.workers), "--batch", str(cfg.batch), "--warmup", str(cfg.warmup),
                "--steps", str(cfg.steps), *(cfg.window.flags() if cfg.window else [])]
        why, ds = None, None
        if loader != "synthetic":
            fmt = FORMAT_OF[loader]
            why = problems.get((fmt, cfg.encoding, cfg.side))
            ds = dataset_dir(cfg.data_dir, n, fmt, cfg.encoding, cfg.side, corpus_id)
        while why is None and len(cell.runs) < cfg.runs:
            i = len(cell.runs) + 1
            tr = run_on_dataset(where, "train-e2e", cfg.image(loader), argv, ds, cfg.timeout_s)
            r = TrainE2ERun.of_trial(i, tr)
            cell = updated(cell, runs=(*cell.runs, r))
            doc["results"][idx] = to_json(cell)
            if r.train_images_per_second is None:
                why = f"run {i}/{cfg.runs} failed — {r.status}: {r.error}"
            else:
                own = r.loader_images_per_second
                note(f"{model} {loader} run {i}/{cfg.runs}: {r.train_images_per_second:,.1f} training "
                     f"images/s, busy {r.busy_fraction:.0%}" + (f", loader alone {own:,.1f} images/s" if own else ""))
            save(store, doc)
        if why is not None and not measured(cell.runs, cfg.runs):
            cell = updated(cell, status="failed", reason=why, summary=None)
            note(f"{model} {loader}: FAILED, {why}")
        else:
            cell = updated(cell, status="ok", summary=summaries(cell.runs, cfg.ci_level))
            if cfg.window is not None and cell.summary.loader is not None:
                cell = updated(cell, loader_steadiness=loader_steadiness(cell.runs, cell.summary.loader,
                                                                         cfg.window.tolerance))
        doc["results"][idx] = to_json(cell)
        save(store, doc)
