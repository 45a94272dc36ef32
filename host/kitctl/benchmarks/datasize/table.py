"""datasize's rows: one per format × encoding × side, read from an artifact (end table, report)."""
from __future__ import annotations

from typing import Any

from ...datarun import FFCV_PUBLISHED_GB


def rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for c in doc["results"]:
        s = c.get("size") or {}
        gb = s.get("imagenet_equivalent_gb") or {}
        out.append({"format": c["format"], "encoding": c["encoding"], "side": c["side"], "status": c["status"],
                    "images": s.get("images"), "payload_b": s.get("payload_bytes_per_image"),
                    "file_b": s.get("file_bytes_per_image"), "gb_payload": gb.get("payload"),
                    "gb_file": gb.get("file"), "ffcv_published_gb": FFCV_PUBLISHED_GB.get((c["encoding"], c["side"]))
                    if c["format"] == "ffcv" else None, "error": c.get("error")})
    return out


def all_ok(doc: dict[str, Any]) -> bool:
    return bool(doc["results"]) and all(c["status"] == "ok" for c in doc["results"])


def _n(x: Any, nd: int = 0) -> str:
    return "—" if x is None else f"{x:,.{nd}f}"


def table_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["Format", "Encoding", "Max side", "images", "payload B/img", "file B/img", "ImageNet GB (payload)",
            "ImageNet GB (file)", "FFCV published GB"]
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
