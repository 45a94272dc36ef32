"""train-e2e's part of `kitctl report`: training images/s per model × loader against synthetic, the GPU busy
fraction, the loader's own images/s, and which loader keeps the GPU busy."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..data.caveats import cell_caveats, partial_caveat, scatter_note
from ...core.typed import to_json
from ...reports.format import table
from . import results
from .config import TrainE2ERecorded, recorded
from .results import TrainE2ECell
from .table import KEEPS_BUSY, busy_what, table_rows, verdict

if TYPE_CHECKING:
    from ...reports.sources import Source


def result_table(src: Source) -> list[str]:
    head, body = table_rows(src.doc)
    return [*table(head, body, right=set(range(2, len(head)))), "", f"**Which loader keeps the {busy_what(src.doc)} busy**", "",
            *[f"- {line}" for line in verdict(src.doc)]]


def ratios(sources: list[Any]) -> list[Any]:
    return []


def gpu_users(src: Any) -> list[str]:
    """What ran on a GPU: training, in the runs whose trial recorded a CUDA device (its name; "cpu" otherwise),
    and pytorch-nvjpeg's decode beside it."""
    on_gpu = [c for c in results.cells(src.doc) if any(r.device not in (None, "cpu") for r in c.runs)]
    out = ["training"] if on_gpu else []
    return out + [f"{ld} (decode)" for ld in dict.fromkeys(c.loader for c in on_gpu if c.loader == "pytorch-nvjpeg")]


def measured(doc: dict[str, Any]) -> list[list[str]]:
    c = recorded(doc)
    return [["Question", "training images/s of ResNet fed by each loader, against the same training on synthetic "
                         "on-device data: which loader keeps the GPU busy"],
            ["Pipeline", c.pipeline],
            ["Synthetic", c.synthetic_meaning],
            ["Models", ", ".join(c.models)],
            ["Precision", {"auto": "bf16 autocast on CUDA, fp32 on CPU"}.get(c.precision, c.precision)],
            ["Loaders", ", ".join(c.loaders)],
            ["Data", f"{c.encoding} at max side {c.side} px, page cache warm; corpus `{c.corpus}`"
                     + (f", first {c.limit:,} images" if c.limit else "")],
            ["Speed rule", _window_speed_rule(c) if c.has_window_rule else
                           f"batch {c.batch}, {c.workers} loader workers; {c.warmup} warm-up steps, then "
                           f"as many batches as the loader can have read ahead dropped (2 × workers + 6), then "
                           f"{c.steps} timed steps: training images/s = images ÷ timed wall time (device "
                           f"synchronised at the end); then {c.steps} batches through the loader alone = the "
                           f"loader's own images/s (after what was read ahead); a loader's batches come through "
                           f"a prefetch thread, two ahead, pinned on CUDA (as DataLoader(pin_memory=True)); "
                           f"{c.runs} run{'s' if c.runs != 1 else ''} per cell, each a fresh process; median and a "
                           f"distribution-free interval of the median"],
            ["GPU busy", "CUDA: events around each step (copy, normalise, forward, backward, Adam) on the stream; "
                         "busy = Σ step spans ÷ (first start … last end), the gaps are the GPU waiting for data "
                         "(pytorch-nvjpeg decodes on the same GPU: its kernels that land inside a span count as "
                         "busy; its training images/s against synthetic is the figure to read). CPU: 1 − time "
                         "waiting for the next batch ÷ window"],
            ["Verdict rule", f"a loader keeps the GPU busy when its median training images/s reach "
                             f"{KEEPS_BUSY:.0%} of synthetic's (same model)"],
            ["Timeout", f"{c.timeout_s:,.0f} s per run"]]


def _window_speed_rule(c: TrainE2ERecorded) -> str:
    runs = f"{c.runs} run{'s' if c.runs != 1 else ''} per cell"
    return (f"batch {c.batch}, {c.workers} loader workers. First the loader alone, before any training: "
            f"dataload's measurement (source ram): the warm-up epoch's time to its first batch is the loader's "
            f"start-up (the loader start-up s column); the window: {c.window_rule}; the loader's images/s = the "
            f"window's images ÷ its wall time, steady when the window's halves agree within "
            f"{c.steady_tolerance:.0%}. Then training: {c.warmup} warm-up steps, then as many batches as the "
            f"loader can have read ahead dropped (2 × workers + 6), then {c.steps} timed steps: training "
            f"images/s = images ÷ timed wall time (device synchronised at the end); a loader's batches come through "
            f"a prefetch thread, two ahead, pinned on CUDA (as DataLoader(pin_memory=True)); {runs}, each a fresh "
            f"process; median and a distribution-free interval of the median")


def _label(c: TrainE2ECell) -> str:
    return f"{c.model} fed by {c.loader}"


def interrupted(src: Any) -> str:
    c = recorded(src.doc)
    return partial_caveat(src, _label, len(c.models) * len(c.loaders), "model × loader cells", c.runs,
                          cells=results.cells(src.doc))


def caveats(src: Any) -> list[str]:
    """A failed cell and one with fewer runs than asked (named, with why); a window that crossed an epoch start
    (a small --limit) holds the loader's restart bubble, which a real ImageNet epoch (5,005 steps of 256) has
    once: named per cell."""
    typed = results.cells(src.doc)
    out = cell_caveats(typed, _label, recorded(src.doc).runs) + diagnoses(src.doc)
    unsteady = [f"{_label(c)} ({c.loader_steadiness.why})" for c in typed
                if c.ok and c.loader_steadiness and c.loader_steadiness.steady is False]
    if unsteady:
        out.append(f"**Loader alone not steady** — {'; '.join(unsteady)}: its figure is kept, but it moves with the "
                   "window; read it as a range (a longer --window-seconds or more --runs).")
    tolerance = recorded(src.doc).steady_tolerance
    for c in typed:
        if c.ok and c.loader_steadiness and c.loader_steadiness.steady is False and tolerance:
            alone = [r.loader_alone for r in c.runs if r.ok and r.loader_alone is not None]
            note = scatter_note(f"{_label(c)}, the loader alone",
                                [(a.window.halves_change if a.window else None, a.epochs) for a in alone], tolerance)
            out += [note] if note else []
    hit = []
    for c in typed:
        n = sum((r.epoch_starts_in_window or 0) + (r.loader_epoch_starts or 0) for r in c.runs)
        if n:
            hit.append(f"{c.model} {c.loader} ({n})")
    if not hit:
        return out
    return out + [f"**Epoch starts inside timed windows** — {', '.join(hit)}: a loader restarts its read-ahead at each "
            "epoch (a bubble an ImageNet epoch has once per 5,005 steps); these figures understate the loader. "
            "A larger --limit keeps the windows inside one epoch."]


def diagnoses(doc: dict[str, Any]) -> list[str]:
    """Per run, where its loss first went non-finite, and a GPU loader's decode check (its GPU decode against a CPU
    decode; the hazard probe of pytorch/vision#9606 for a plain caller-stream decode_jpeg and for the loader's own
    path): what a failed or suspect GPU-decode run needs to be read."""
    out = []
    for c in results.cells(doc):
        for r in c.runs:
            name = f"{c.model} {c.loader} run {r.run}"
            where = r.first_nonfinite_loss
            if where is not None:
                out.append(f"**Loss went non-finite** — {name}: first at {where.phase} step {where.step} "
                           f"of {_or_what(where.of)} ({_or_what(where.value)})")
            check = r.decode_check
            if check is None or not to_json(check):  # none, or an empty one
                continue
            if check.error:
                out.append(f"**GPU decode check** — {name}: did not run to the end: {check.error}")
                continue
            text = (f"**GPU decode check** — {name}: GPU vs CPU decode of {check.images} images, max |Δ| "
                    f"{check.max_abs_diff}, mean {_num(check.mean_abs_diff)}")
            probe = check.probe
            if probe is not None and to_json(probe):
                n = probe.iterations
                caller = probe.caller_stream.corrupted if probe.caller_stream else None
                own = probe.loader.corrupted if probe.loader else None
                text += ("; freed memory overwritten (pytorch/vision#9606 probe) in "
                         f"{caller}/{n} iterations with decode_jpeg on the caller's stream, {own}/{n} with the "
                         "loader's")
            out.append(text)
    return out


def _or_what(x: Any) -> Any:
    """A recorded detail, or ? where the run did not record it."""
    return "?" if x is None else x


def _num(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) else "—"


def headline(src: Any) -> str:
    return "; ".join(verdict(src.doc))
