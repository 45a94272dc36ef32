"""Runs train-e2e: the dataset written once (the same folders dataload writes and reuses), then per model × loader
`runs` fresh trial processes or containers (`trial.py train`), `synthetic` first; the artifact saved after each."""
from __future__ import annotations

from typing import Any, Callable

from ...core.stats import summarize
from ..data.loaders import LOADER_FORMAT as FORMAT_OF
from ..data.corpus import corpus_images, corpus_key
from ..data.datasets import dataset_dir, prepare_datasets
from ..data.recorded import kept_runs, measured
from ..data.session import save
from ..data.trial import Where, run_on_dataset
from .config import TrainE2EConfig

FIGURES = ("train_images_per_second", "loader_images_per_second", "busy_fraction", "data_wait_fraction",
           "window_seconds", "warmup_seconds", "images", "steps", "data_wait_seconds", "loader_images",
           "loader_seconds", "final_loss", "loss_after_warmup", "precision", "device", "parameters", "impl",
           "layout", "busy_basis", "resident_before", "drained_batches", "epoch_starts_in_window",
           "loader_epoch_starts", "cpu_count", "versions", "step_losses", "first_nonfinite_loss", "decode_check",
           "loader_alone", "loader_startup_seconds")


def find(doc: dict[str, Any], key: tuple[str, str]) -> dict[str, Any] | None:
    return next((c for c in doc["results"] if (c["model"], c["loader"]) == key), None)


def run_figures(tr) -> dict[str, Any]:
    r = tr.result or {}
    ok = tr.status == "ok" and isinstance(r.get("train_images_per_second"), (int, float))
    out = {k: r.get(k) for k in FIGURES}
    if not ok:
        out["train_images_per_second"] = None
    return out


def summaries(runs: list[dict[str, Any]], level: float) -> dict[str, Any]:
    """Median and interval of each per-run figure the table reads (the loader's own rate: real loaders only)."""
    out = {"train": summarize([r["train_images_per_second"] for r in runs], level),
           "busy": summarize([r["busy_fraction"] for r in runs], level)}
    loader = [r["loader_images_per_second"] for r in runs if isinstance(r.get("loader_images_per_second"), (int, float))]
    out["loader"] = summarize(loader, level) if loader else None
    startup = [r["loader_startup_seconds"] for r in runs if isinstance(r.get("loader_startup_seconds"), (int, float))]
    if startup:  # under the window rule: the loader's start-up, apart from its steady figure
        out["loader_startup"] = summarize(startup, level)
    return out


def loader_steadiness(runs: list[dict[str, Any]], summary: dict[str, Any] | None, tolerance: float) -> dict[str, Any]:
    """The loader-alone window's steadiness over a cell's runs, by throughput's rule (cell_steadiness)."""
    from ...core.steadiness import cell_steadiness

    judged = [{"run": r["run"], "steady": ((r.get("loader_alone") or {}).get("window") or {}).get("steady")}
              for r in runs]
    return cell_steadiness(judged, summary, tolerance)


def run(cfg: TrainE2EConfig, store, doc: dict[str, Any], note: Callable[[str], None]) -> None:
    where = Where.of(cfg, doc)
    problems = prepare_datasets(where, "train-e2e", cfg.corpus, cfg.data_dir, cfg.limit, cfg.timeout_s, cfg.datasets(),
                                doc, note)
    save(store, doc)
    n = corpus_images(cfg.corpus, cfg.limit)
    corpus_id = corpus_key(cfg.corpus)
    for key in cfg.cells():
        model, loader = key
        cell = find(doc, key)
        if cell is None:
            cell = {"model": model, "loader": loader, "status": "pending", "reason": "", "runs": [], "summary": None}
            doc["results"].append(cell)
        # A resumed cell keeps its passing runs (a failed or edited one is run again) and its figures are derived
        # from them again, whatever its recorded summary says (data/recorded.py).
        cell["runs"] = kept_runs(cell["runs"], "train_images_per_second")
        cell["status"], cell["reason"] = "pending", ""
        argv = ["train", "--loader", loader, "--model", model, "--precision", cfg.precision, "--device", cfg.device,
                "--workers", str(cfg.workers), "--batch", str(cfg.batch), "--warmup", str(cfg.warmup),
                "--steps", str(cfg.steps), *(cfg.window.flags() if cfg.window else [])]
        why, ds = None, None
        if loader != "synthetic":
            fmt = FORMAT_OF[loader]
            why = problems.get((fmt, cfg.encoding, cfg.side))
            ds = dataset_dir(cfg.data_dir, n, fmt, cfg.encoding, cfg.side, corpus_id)
        while why is None and len(cell["runs"]) < cfg.runs:
            i = len(cell["runs"]) + 1
            tr = run_on_dataset(where, "train-e2e", cfg.image(loader), argv, ds, cfg.timeout_s)
            figs = run_figures(tr)
            cell["runs"].append({"run": i, **tr.to_json(), **figs})
            if figs["train_images_per_second"] is None:
                why = f"run {i}/{cfg.runs} failed — {tr.status}: {tr.error}"
            else:
                own = figs["loader_images_per_second"]
                note(f"{model} {loader} run {i}/{cfg.runs}: {figs['train_images_per_second']:,.1f} training "
                     f"images/s, busy {figs['busy_fraction']:.0%}" + (f", loader alone {own:,.1f} images/s" if own else ""))
            save(store, doc)
        if why is not None and not measured(cell["runs"], "train_images_per_second", cfg.runs):
            cell.update(status="failed", reason=why, summary=None)
            note(f"{model} {loader}: FAILED, {why}")
        else:
            cell.update(status="ok", summary=summaries(cell["runs"], cfg.ci_level))
            if cfg.window is not None and cell["summary"]["loader"] is not None:
                cell["loader_steadiness"] = loader_steadiness(cell["runs"], cell["summary"]["loader"],
                                                              cfg.window.tolerance)
        save(store, doc)
