"""datasize's part of `kitctl report`: the size table in FFCV's shape (ImageNet-equivalent GB per encoding
× max side, per format) with FFCV's published figures beside it."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.recorded import view
from ...reports.format import table
from ..data.caveats import FFCV_PUBLISHED_GB, cell_caveats, partial_caveat
from .config import DatasizeRecorded
from .results import cells
from .table import FILE_RULES, rows, table_rows

if TYPE_CHECKING:
    from ...reports.sources import Source


def result_table(src: Source) -> list[str]:
    head, body = table_rows(src.doc)
    lines = table(head, body, right=set(range(2, len(head))))
    fmts = [f for f in dict.fromkeys(r["format"] for r in rows(src.doc)) if f in FILE_RULES]
    writers = sorted({c.size.write_workers for c in cells(src.doc) if c.size} - {None})
    w = f" (W = {', '.join(map(str, writers))} here)" if "ffcv" in fmts and writers else ""
    lines += ["", "_ImageNet GB (file, extrapolated): " + "; ".join(f"{f}: {FILE_RULES[f]}" for f in fmts) + w
              + ". The measured bytes per image (payload, file) are the sample's own: a small sample's file bytes "
                "per image hold its writers' padding._"]
    # FFCV's shape: rows = max side, columns = encodings, one block per format (payload GB).
    rs = [r for r in rows(src.doc) if r["status"] == "ok"]
    encs = list(dict.fromkeys(r["encoding"] for r in rs))
    for fmt in dict.fromkeys(r["format"] for r in rs):
        by = {(r["encoding"], r["side"]): r["gb_payload"] for r in rs if r["format"] == fmt}
        sides = sorted({s for _, s in by})
        lines += ["", f"**{fmt}**: ImageNet-equivalent GB (payload), measured"
                  + (" / FFCV published" if fmt == "ffcv" else ""), ""]
        body2 = []
        for s in sides:
            row = [str(s)]
            for e in encs:
                v = by.get((e, s))
                cell = "—" if v is None else f"{v:,.2f}"
                pub = FFCV_PUBLISHED_GB.get((e, s)) if fmt == "ffcv" else None
                row.append(cell + (f" / {pub:,.2f}" if pub is not None else ""))
            body2.append(row)
        lines += table(["Max side", *encs], body2, right=set(range(1, len(encs) + 1)))
    return lines


def ratios(sources: list[Any]) -> list[Any]:
    return []


def measured(doc: dict[str, Any]) -> list[list[str]]:
    c = view(DatasizeRecorded, doc)
    return [["Question", "bytes per image of each loader's dataset format, per encoding × max side"],
            ["Formats", ", ".join(c.formats)],
            ["Encodings", ", ".join(c.encodings) + f" (mix90: each image JPEG q90 with probability "
                                                   f"{c.mix_compress_probability}, else raw — FFCV's proportion mode)"],
            ["Max sides", ", ".join(map(str, c.sides)) + " px (downscaled with area interpolation, never upscaled)"],
            ["Images", f"corpus `{c.corpus}`" + (f", first {c.limit:,}" if c.limit else ", all")],
            ["Sizes", c.sizes],
            ["ImageNet equivalent", f"payload: payload bytes per image × {c.imagenet_images:,}"],
            *[[f"ImageNet file, {fmt}", FILE_RULES[fmt]] for fmt in c.formats if fmt in FILE_RULES]]


def _label(c: dict[str, Any]) -> str:
    return f"{c['format']} {c['encoding']}@{c['side']}"


def caveats(src: Source) -> list[str]:
    return cell_caveats(src.doc, _label, None)


def interrupted(src: Source) -> str:
    c = view(DatasizeRecorded, src.doc)
    return partial_caveat(src, _label, len(c.formats) * len(c.encodings) * len(c.sides),
                          "format × encoding × side datasets", None)
