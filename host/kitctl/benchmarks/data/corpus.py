"""A corpus of images (`kitctl data make`): its manifest read and checked, its content identity, its files verified."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ...core.fileio import parse_json, read_regular
from ...errors import Fail


MANIFEST_MAX_BYTES = 512 * 2**20  # a corpus of millions of images has a manifest of a few hundred MB at most


def read_corpus_manifest(corpus: str | Path) -> dict[str, Any]:
    """The corpus's manifest.json, checked to be one (Fail, one line naming the file, if not)."""
    path = Path(corpus) / "manifest.json"
    try:
        if not path.is_file():
            raise Fail(f"--corpus {corpus}: not a corpus (no manifest.json); make one with `kitctl data make`")
        if path.stat().st_size > MANIFEST_MAX_BYTES:
            raise Fail(f"{path}: {path.stat().st_size:,} bytes is no corpus manifest")
        m = parse_json(read_regular(path, MANIFEST_MAX_BYTES).decode("utf-8"))
    except (ValueError, OSError) as exc:  # truncated, not UTF-8, nested too deeply, unreadable, not a regular file
        raise Fail(f"{path}: not a readable corpus manifest ({' '.join(str(exc).split())[:120]}); "
                   "make the corpus again with `kitctl data make`") from None
    files = m.get("files") if isinstance(m, dict) else None
    if not (isinstance(m, dict) and m.get("kind") == "kitctl-image-corpus" and isinstance(m.get("images"), int)
            and isinstance(files, list) and len(files) == m["images"]
            and all(isinstance(f, dict) and isinstance(f.get("file"), str) and isinstance(f.get("bytes"), int)
                    for f in files)):
        raise Fail(f"{path}: not a kitctl corpus manifest (kind, images and one file entry per image); "
                   "make the corpus again with `kitctl data make`")
    for f in files:  # a manifest names files inside its corpus only: nothing outside it is opened
        name = f["file"]
        if not name or name.startswith("/") or "\\" in name or any(part in ("", ".", "..") for part in name.split("/")):
            raise Fail(f"{path}: file {name[:80]!r} is not a path inside the corpus; "
                       "make the corpus again with `kitctl data make`")
    return m


def corpus_identity(manifest: dict[str, Any]) -> str:
    """The corpus's content identity (trials/dataload/corpus.py: identity, the same function): a hash of its
    seed, count, classes, bytes and every file's name, label, size and hash, not of when it was made. A dataset
    is keyed by it and records it, so a dataset is only ever read for the corpus it was written from."""
    files = [[f.get("file"), f.get("label"), f.get("bytes"), *([f["sha256"]] if "sha256" in f else [])]
             for f in manifest.get("files") or []]
    key = {k: manifest.get(k) for k in ("kind", "corpus_version", "seed", "images", "classes", "bytes")}
    text = json.dumps({**key, "files": files}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def corpus_images(corpus: str, limit: int | None) -> int:
    n = read_corpus_manifest(corpus)["images"]
    return min(n, limit) if limit else n


def corpus_key(corpus: str) -> str:
    return corpus_identity(read_corpus_manifest(corpus))


def verify_corpus(corpus: Path) -> str | None:
    """Why the corpus at `corpus` is not what its manifest says (None: it is): every image there at its recorded
    size and SHA-256 (a manifest from before per-file hashes: sizes only)."""
    manifest = read_corpus_manifest(corpus)
    for f in manifest["files"]:
        path = corpus / f["file"]
        size = path.stat().st_size if path.is_file() else None
        if size != f["bytes"]:
            return (f"{corpus}: {f['file']} is {'missing' if size is None else f'{size:,} bytes'}, its manifest "
                    f"says {f['bytes']:,}")
        if f.get("sha256") and _sha256(path) != f["sha256"]:
            return f"{corpus}: {f['file']} does not match its manifest's SHA-256 (changed since the corpus was made)"
    return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
