"""What the data benchmarks' reports say about their cells (dataload, train-e2e, datasize), and FFCV's published
figures they are set beside."""
from __future__ import annotations

from typing import Any, Callable


# Published by FFCV for ImageNet's 1,281,167 training images (GB), as docs/data.md quotes them; the
# cells it does not quote stay empty rather than guessed.
FFCV_PUBLISHED_GB = {("jpeg90", 256): 22.01, ("jpeg90", 512): 65.47, ("raw", 256): 169.79, ("mix90", 256): 58.36}
FFCV_PUBLISHED_LOAD = {("ffcv", "jpeg90", 512, "ram"): 31_278, ("ffcv", "raw", 256, "ram"): 172_801,
                       ("ffcv", "jpeg90", 512, "cold"): 16_631, ("ffcv", "raw", 512, "cold"): 1_956,
                       ("ffcv", "raw", 256, "cold"): 6_870}
FFCV_MACHINE = "AWS p3dn.24xlarge, 96 vCPU, all cores; cold = EBS"


# -- what the data benchmarks' reports say about their cells (dataload, train-e2e, datasize) ----------------------
def cell_caveats(doc: dict[str, Any], label: Callable[[dict[str, Any]], str], runs_asked: int | None) -> list[str]:
    """A caveat per failed cell (its reason: the row has no figure) and per finished cell whose figure rests on
    fewer passing runs than the run asked for (`runs_asked`; None: one unit per cell, as datasize's)."""
    out = []
    for c in doc["results"]:
        if c.get("status") == "failed" or (c.get("status") not in ("ok", "pending", None) and c.get("error")):
            why = c.get("reason") or c.get("error") or c.get("status")
            out.append(f"**Failed cell** — {label(c)}: {why}. No figure in its row; a run that did not end cleanly "
                       "is never counted, even one that printed a result first.")
        elif c.get("status") == "ok" and runs_asked:
            n = sum(1 for r in c.get("runs") or [] if r.get("status") == "ok")
            if n < runs_asked:
                out.append(f"**Fewer runs than asked** — {label(c)}: its figure is the median of {n} of the "
                           f"{runs_asked} runs asked for.")
    return out


def partial_caveat(src: Any, label: Callable[[dict[str, Any]], str], planned: int, noun: str,
                   runs_asked: int | None) -> str:
    """An interrupted data run's caveat (the engines' one reads engine × precision cells): what finished, what
    did not and how far, and how to continue it."""
    d = src.doc
    by = f" by {d['interrupted_by']}" if d.get("interrupted_by") else ""
    done = [c for c in d["results"] if c.get("status") != "pending"]
    unfinished = []
    for c in d["results"]:
        if c in done:
            continue
        n = sum(1 for r in c.get("runs") or [] if r.get("status") == "ok")
        unfinished.append(label(c) + (f" ({n} of {runs_asked} runs)" if runs_asked else ""))
    run = f"kitctl run {src.benchmark} --resume"
    resume = f"`{run} {src.name}`" if src.name.endswith(".partial.json") else f"`{run}` on its `.partial.json`"
    text = f"**Partial result** — the artifact is `{src.state}`{by}: {len(done)} of {planned} {noun} finished"
    if unfinished:
        text += f"; unfinished: {'; '.join(unfinished)}"
    return text + f". An unfinished cell has no figure; continue with {resume}."
