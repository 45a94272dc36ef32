"""Runs datasize: one fresh trial process (or container of the format's writer image) per format × encoding × max
side, the artifact saved after each."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

from ...core.typed import to_json
from ..data.session import save
from ..data.trial import TrialRun, Where, write_dataset
from .config import DatasizeConfig
from .results import DatasetSize, DatasizeCell, cells


def run(cfg: DatasizeConfig, store, doc: dict[str, Any], note: Callable[[str], None]) -> None:
    # A resumed run keeps what finished (as recorded) and runs the rest (a failed unit again).
    recorded = cells(doc)
    doc["results"] = [c for c, typed in zip(doc["results"], recorded) if typed.ok]
    done = {typed.key for typed in recorded if typed.ok}
    where = Where(cfg.runtime, cfg.python, cfg.image_tag, doc["run_id"])
    for fmt, enc, side in cfg.units():
        if (fmt, enc, side) in done:
            continue
        with tempfile.TemporaryDirectory(prefix="kit-datasize-") as tmp:
            # measured, then deleted by the trial (a docker run's files are the caller's: the folder goes too)
            tr: TrialRun = write_dataset(where, "datasize", cfg.corpus, Path(tmp) / "ds", fmt, enc, side, cfg.limit,
                                         cfg.timeout_s, keep=False, workers=cfg.workers)
        size = DatasetSize.of_result(tr.result) if tr.status == "ok" and tr.result else None
        cell = DatasizeCell(fmt, enc, side, tr.status, tr.exit_code, tr.elapsed_s, tr.error, tr.stderr_tail, size,
                            (tr.result or {}).get("versions"))
        if size is not None:
            gb = size.imagenet_equivalent_gb or {}
            note(f"{fmt} {enc} @{side}: {size.payload_bytes_per_image:,.0f} B/image payload, "
                 f"{size.file_bytes_per_image:,.0f} file; ImageNet ≈ {gb.get('payload', float('nan')):.2f} GB")
        else:
            note(f"{fmt} {enc} @{side}: FAILED ({tr.status}: {tr.error})")
        doc["results"].append(to_json(cell))
        save(store, doc)
