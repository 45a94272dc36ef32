"""Runs datasize: one fresh trial process (or container of the format's writer image) per format × encoding × max
side, the artifact saved after each."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

from ..data.session import save
from ..data.trial import TrialRun, Where, write_dataset
from .config import DatasizeConfig

SIZE_KEYS = ("images", "jpeg_images", "payload_bytes", "file_bytes", "files", "payload_bytes_per_image",
             "file_bytes_per_image", "imagenet_equivalent_gb", "write_seconds", "write_workers", "compress_probability",
             "jpeg_quality", "write_mode")


def find(doc: dict[str, Any], fmt: str, enc: str, side: int) -> dict[str, Any] | None:
    return next((c for c in doc["results"] if (c["format"], c["encoding"], c["side"]) == (fmt, enc, side)), None)


def run(cfg: DatasizeConfig, store, doc: dict[str, Any], note: Callable[[str], None]) -> None:
    # A resumed run keeps what finished and runs the rest (a failed unit again).
    doc["results"] = [c for c in doc["results"] if c.get("status") == "ok"]
    where = Where(cfg.runtime, cfg.python, cfg.image_tag, doc["run_id"])
    for fmt, enc, side in cfg.units():
        if find(doc, fmt, enc, side) is not None:
            continue
        with tempfile.TemporaryDirectory(prefix="kit-datasize-") as tmp:
            # measured, then deleted by the trial (a docker run's files are the caller's: the folder goes too)
            tr: TrialRun = write_dataset(where, "datasize", cfg.corpus, Path(tmp) / "ds", fmt, enc, side, cfg.limit,
                                         cfg.timeout_s, keep=False, workers=cfg.workers)
        cell: dict[str, Any] = {"format": fmt, "encoding": enc, "side": side, **tr.to_json(), "size": None,
                                "versions": (tr.result or {}).get("versions")}
        if tr.status == "ok" and tr.result:
            cell["size"] = {k: tr.result.get(k) for k in SIZE_KEYS}
            gb = cell["size"]["imagenet_equivalent_gb"]
            note(f"{fmt} {enc} @{side}: {tr.result['payload_bytes_per_image']:,.0f} B/image payload, "
                 f"{tr.result['file_bytes_per_image']:,.0f} file; ImageNet ≈ {gb['payload']:.2f} GB")
        else:
            note(f"{fmt} {enc} @{side}: FAILED ({tr.status}: {tr.error})")
        doc["results"].append(cell)
        save(store, doc)
