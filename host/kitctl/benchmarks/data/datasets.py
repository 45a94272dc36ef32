"""The datasets a loader run reads (dataload's and train-e2e's): one folder per corpus × format × encoding ×
side, written once, checked against its corpus before every reuse."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ...core.fileio import parse_json, read_regular
from .corpus import _sha256, corpus_identity, read_corpus_manifest
from .trial import Where, write_dataset


def dataset_dir(data_dir: str, images: int, fmt: str, enc: str, side: int, corpus_id: str) -> Path:
    """<data_dir>/<format>-<encoding>-<side>-n<images>-c<corpus identity>: written once from one corpus, reused by
    every data benchmark that reads that corpus (another corpus, even of the same count, gets its own)."""
    return Path(data_dir) / f"{fmt}-{enc}-{side}-n{images}-c{corpus_id}"


def verify_dataset(d: Path, corpus_id: str | None, hashes: bool = False) -> str | None:
    """Why the dataset folder `d` cannot be read as the corpus's (None: it can): its dataset.json must be whole,
    name the corpus identity `corpus_id`, and list its files, each there at its recorded size (`hashes`: and
    SHA-256). `corpus_id` None: any corpus's. Every reason names the folder."""
    info_path = d / "dataset.json"
    try:
        info = parse_json(read_regular(info_path).decode("utf-8"))
    except (ValueError, OSError) as exc:  # NotRegularFile (a FIFO would hang a plain read) is an OSError
        return f"{info_path}: not a readable dataset record ({' '.join(str(exc).split())[:300]})"
    if not isinstance(info, dict):
        return f"{info_path}: not a dataset record"
    written_from = (info.get("corpus") or {}).get("identity") if isinstance(info.get("corpus"), dict) else None
    if corpus_id is not None and written_from != corpus_id:
        return (f"{d} was written from another corpus (identity {written_from or 'unrecorded'}, this corpus "
                f"{corpus_id}); remove it to have it written again")
    files = info.get("file_list")
    if not isinstance(files, list) or not files:
        return f"{d}: its dataset.json lists no files to check; remove it to have it written again"
    for f in files:
        path = d / str(f.get("path"))
        try:
            size = path.stat().st_size if path.is_file() else None
        except OSError:
            size = None
        if size != f.get("bytes"):
            return (f"{d}: {f.get('path')} is {'missing' if size is None else f'{size:,} bytes'}, its record says "
                    f"{f.get('bytes')} (a half-written or changed dataset); remove {d} to have it written again")
        if hashes and _sha256(path) != f.get("sha256"):
            return f"{d}: {f.get('path')} does not match its recorded SHA-256 (changed since written)"
    return None


def prepare_datasets(where: Where, benchmark: str, corpus: str, data_dir: str, limit: int | None, timeout_s: float,
                     datasets: list[tuple[str, str, int]], doc: dict[str, Any],
                     note: Callable[[str], None]) -> dict[tuple, str | None]:
    """Write the (format, encoding, side) datasets of this corpus not written yet (`trial.py datasize --keep`, in
    the writer's image with the docker runtime); a dataset already there is checked against the corpus's identity
    and its files' sizes before it is reused. Every dataset used is recorded in doc["datasets"] with the corpus
    identity it belongs to; returns why each is unusable, or None."""
    manifest = read_corpus_manifest(corpus)
    corpus_id = corpus_identity(manifest)
    n = min(manifest["images"], limit) if limit else manifest["images"]
    problems: dict[tuple, str | None] = {}
    doc.setdefault("datasets", [])
    recorded = {r.get("path") for r in doc["datasets"]}
    for fmt, enc, side in datasets:
        d = dataset_dir(data_dir, n, fmt, enc, side, corpus_id)
        base = {"path": str(d), "format": fmt, "encoding": enc, "side": side, "corpus_identity": corpus_id,
                "corpus_seed": manifest.get("seed"), "corpus_images": manifest["images"]}
        if (d / "dataset.json").is_file():
            why = verify_dataset(d, corpus_id)
            problems[(fmt, enc, side)] = why
            if str(d) not in recorded:
                doc["datasets"].append({**base, "reused": True, "status": "ok" if why is None else "refused",
                                        "error": why})
            note(f"dataset {d.name}: " + (f"REFUSED ({why})" if why else "reused (corpus identity and file sizes "
                                                                          "checked)"))
            continue
        tr = write_dataset(where, benchmark, corpus, d, fmt, enc, side, limit, timeout_s, keep=True)
        why = None if tr.status == "ok" else f"writing the dataset failed: {tr.error}"
        if why is None:
            why = verify_dataset(d, corpus_id)
        problems[(fmt, enc, side)] = why
        doc["datasets"].append({**base, "reused": False, **tr.to_json(),
                                "size": {k: (tr.result or {}).get(k) for k in ("images", "payload_bytes", "file_bytes",
                                                                               "write_seconds")},
                                "versions": (tr.result or {}).get("versions")})
        note(f"dataset {d.name}: {tr.status}" + (f" ({why})" if why else f" in {tr.elapsed_s:.1f} s"))
    return problems
