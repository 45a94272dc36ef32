"""The data benchmarks' flag checks: lists of names and counts, the corpus, workers, a writable data folder."""
from __future__ import annotations

import os
from pathlib import Path

from ...errors import Fail
from .corpus import corpus_identity, read_corpus_manifest
from .datasets import dataset_dir


def parse_names(flag: str, text: str, known: tuple[str, ...]) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    bad = [n for n in names if n not in known]
    if not names or bad:
        raise Fail(f"{flag}: unknown {', '.join(bad) or '(empty)'} (known: {', '.join(known)})")
    return names


def parse_ints(flag: str, text: str, low: int, all_value: int | None = None) -> tuple[int, ...]:
    out = []
    for part in (x.strip() for x in str(text).split(",") if x.strip()):
        if part == "all" and all_value is not None:
            out.append(all_value)
            continue
        try:
            v = int(part)
        except ValueError:
            raise Fail(f"{flag}: {part!r} is not an integer{' or all' if all_value else ''}") from None
        if v < low:
            raise Fail(f"{flag}: {v} is below {low}")
        out.append(v)
    if not out:
        raise Fail(f"{flag}: empty")
    return tuple(dict.fromkeys(out))


def check_corpus(corpus: str) -> Path:
    p = Path(corpus).expanduser().resolve()
    if not (p / "manifest.json").is_file():
        raise Fail(f"--corpus {corpus}: not a corpus (no manifest.json); make one with `kitctl data make`")
    read_corpus_manifest(p)  # a truncated or foreign manifest is one line now, not a traceback later
    return p


# --workers above this many per core is refused (the corpus maker's cap too): more processes than that only add
# memory (~100 MB each) and fork cost, never speed, and a typo (100000) would fork until the OOM killer steps in.
MAX_WORKERS_PER_CORE = 4


def check_workers(flag: str, values: tuple[int, ...]) -> tuple[int, ...]:
    cap = MAX_WORKERS_PER_CORE * (os.cpu_count() or 1)
    bad = [w for w in values if w > cap]
    if bad:
        raise Fail(f"{flag} {bad[0]} is more than {cap} ({MAX_WORKERS_PER_CORE} per core of this host's "
                   f"{os.cpu_count()}); more workers add memory, not speed")
    return values


def check_data_dir(data_dir: str, corpus: str | Path, limit: int | None,
                   datasets: list[tuple[str, str, int]], flag: str = "--data-dir") -> None:
    """A dataset still to be written needs a writable data dir: refused now, in one line, rather than after the
    run has started (a data dir holding every dataset already may be read-only)."""
    manifest = read_corpus_manifest(corpus)
    n = min(manifest["images"], limit) if limit else manifest["images"]
    cid = corpus_identity(manifest)
    missing = [d for d in (dataset_dir(data_dir, n, f, e, s, cid) for f, e, s in datasets)
               if not (d / "dataset.json").is_file()]
    if not missing:
        return
    p = Path(data_dir)
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir() or not os.access(p, os.W_OK | os.X_OK):
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise Fail(f"{flag} {data_dir}: {p} is not a writable folder, and {missing[0].name}{more} must be written "
                   "there first")
