"""Runs datasize: one fresh trial process per format × encoding × max side, the artifact saved after each."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

from ...datarun import TrialRun, run_trial, save
from .config import DatasizeConfig

SIZE_KEYS = ("images", "jpeg_images", "payload_bytes", "file_bytes", "files", "payload_bytes_per_image",
             "file_bytes_per_image", "imagenet_equivalent_gb", "write_seconds", "write_workers", "compress_probability",
             "jpeg_quality", "write_mode")


def find(doc: dict[str, Any], fmt: str, enc: str, side: int) -> dict[str, Any] | None:
    return next((c for c in doc["results"] if (c["format"], c["encoding"], c["side"]) == (fmt, enc, side)), None)


def run(cfg: DatasizeConfig, store, doc: dict[str, Any], note: Callable[[str], None]) -> None:
    # A resumed run keeps what finished and runs the rest (a failed unit again).
    doc["results"] = [c for c in doc["results"] if c.get("status") == "ok"]
    for fmt, enc, side in cfg.units():
        if find(doc, fmt, enc, side) is not None:
            continue
        with tempfile.TemporaryDirectory(prefix="kit-datasize-") as tmp:
            argv = ["datasize", "--corpus", cfg.corpus, "--out", str(Path(tmp) / "ds"), "--format", fmt,
                    "--encoding", enc, "--side", str(side), "--workers", str(cfg.workers)]
            if cfg.limit:
                argv += ["--limit", str(cfg.limit)]
            tr: TrialRun = run_trial(cfg.python, argv, cfg.timeout_s)
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
