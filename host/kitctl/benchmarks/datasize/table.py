"""datasize's rows: one per format × encoding × side, read from an artifact (end table, report)."""
from __future__ import annotations

from typing import Any

from ...core.recorded import view
from ...core.typed import to_json
from ..data.caveats import FFCV_PUBLISHED_GB
from .config import IMAGENET_IMAGES, DatasizeRecorded
from .results import cells

# ffcv's DatasetWriter page: its default page_size, 4 × MIN_PAGE_SIZE (2 MiB), which trials/dataload/writers.py keeps.
# The file is the header and per-image metadata padded to a page, then whole pages (each writer fills its own and
# writes its last one whole, part empty), then the allocation table.
FFCV_PAGE_BYTES = 8 * 2**20

# How "ImageNet GB (file)" is extrapolated from a sample of n images, per format (the report prints the rule).
FILE_RULES = {
    "ffcv": "payload and allocation table (the bytes after the file's last whole 8 MiB page) per image × "
            "1,281,167, plus the padding in its pages once, up to (W + 1) × 8 MiB for W writers (each writer's "
            "last, part-filled page and the header's page: they do not grow with the images), and per image beyond "
            "that (page tails too small for the next image); ffcv's per-image metadata (21 B) sits in the header's "
            "page and is counted once (≈ 0.03 GB short at ImageNet's size)",
    "webdataset": "file bytes per image × 1,281,167 (tar's 512-byte headers and padding come with each image)",
    "folder": "file bytes per image × 1,281,167 (one file per image)",
}


def imagenet_file_gb(fmt: str, s: dict[str, Any], imagenet: int = IMAGENET_IMAGES) -> float | None:
    """The dataset's files at ImageNet's size, from the sample's measured bytes (FILE_RULES); None where the
    artifact lacks what the rule needs. A sample's file bytes per image × ImageNet is wrong for ffcv: at 2,000
    images written by 16 workers each writer's last 8 MiB page dominates the file (71,327 B/image for a
    5,954 B/image payload), and those pages do not multiply with the images."""
    n, payload, file_ = s.get("images"), s.get("payload_bytes"), s.get("file_bytes")
    if not n or payload is None or file_ is None:
        return None
    if fmt != "ffcv":
        return file_ / n * imagenet / 1e9
    writers = s.get("write_workers")
    if not writers:
        return None
    table = file_ % FFCV_PAGE_BYTES  # after the header's page and the data pages (whole pages): 24 B per image
    padding = max(0, file_ - table - payload)
    fixed = min(padding, (writers + 1) * FFCV_PAGE_BYTES)
    return ((payload + table + padding - fixed) / n * imagenet + fixed) / 1e9


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    imagenet = view(DatasizeRecorded, doc).imagenet_images
    for c in cells(doc):
        s = c.size
        gb = (s.imagenet_equivalent_gb if s else None) or {}
        # payload scales per image in every format; the file's overhead by the format's rule, not the
        # artifact's own file figure (file bytes per image × ImageNet: kept in the artifact as recorded)
        out.append({"format": c.format, "encoding": c.encoding, "side": c.side, "status": c.status,
                    "images": s.images if s else None, "payload_b": s.payload_bytes_per_image if s else None,
                    "file_b": s.file_bytes_per_image if s else None, "gb_payload": gb.get("payload"),
                    "gb_file": imagenet_file_gb(c.format, to_json(s), imagenet) if s else None,
                    "ffcv_published_gb": FFCV_PUBLISHED_GB.get((c.encoding, c.side))
                    if c.format == "ffcv" else None, "error": c.error})
    return out


def all_ok(doc: dict[str, Any]) -> bool:
    return bool(doc["results"]) and all(c.ok for c in cells(doc))


def _n(x: Any, nd: int = 0) -> str:
    return "—" if x is None else f"{x:,.{nd}f}"


def table_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["Format", "Encoding", "Max side", "images", "payload B/img", "file B/img", "ImageNet GB (payload)",
            "ImageNet GB (file, extrapolated)", "FFCV published GB"]
    body = [[r["format"], r["encoding"], str(r["side"]), _n(r["images"]), _n(r["payload_b"]), _n(r["file_b"]),
             _n(r["gb_payload"], 2), _n(r["gb_file"], 2), _n(r["ffcv_published_gb"], 2)]
            if r["status"] == "ok" else [r["format"], r["encoding"], str(r["side"]), f"FAILED: {r['error']}", "", "",
                                         "", "", ""] for r in rows(doc)]
    return head, body


def print_table(console, doc: dict[str, Any], final) -> None:
    from rich.table import Table

    head, body = table_rows(doc)
    t = Table(title=f"Dataset size per image and ImageNet-equivalent (× 1,281,167) — {final}")
    for h in head:
        t.add_column(h, justify="left" if h in ("Format", "Encoding") else "right")
    for r in body:
        t.add_row(*r)
    console.print(t)
