"""The kit against itself: a loader's dataload figure beside its train-e2e "loader alone" figure for the same data,
source, workers and batch on the same kind of machine. Both time the same pipeline over whole epochs after a
warm-up epoch under the window rule, so they should agree; a pair that differs by more than AGREE_WITHIN is named
with both figures (a report shows it, and tests/test_data_agreement.py checks the committed results).

Only runs under the window rule are paired: before it each figure held its loader's start-up, which a 10,000-image
epoch and a 40,000-image one weigh differently."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.recorded import view
from ...core.typed import Record, from_json
from ...core.stats import Summary

AGREE_WITHIN = 0.10
SOURCE = "ram"  # train-e2e reads its datasets from the page cache: dataload's "ram" source


@dataclass(frozen=True)
class Figure:
    """One side of a pair: the median images/s of a cell, its runs, and the artifact it comes from."""
    images_per_second: float
    runs: int
    name: str  # the artifact (file name or run id)


@dataclass(frozen=True)
class Pair:
    loader: str
    encoding: str
    side: int
    workers: int
    batch: int
    machine: str
    dataload: Figure
    loader_alone: Figure

    @property
    def difference(self) -> float:
        """train-e2e's loader alone relative to dataload: (e2e − dataload) ÷ dataload."""
        return self.loader_alone.images_per_second / self.dataload.images_per_second - 1.0

    @property
    def agree(self) -> bool:
        return abs(self.difference) <= AGREE_WITHIN


@dataclass(frozen=True)
class _Recorded:
    """The keys of a data artifact's configuration the pairing reads (as recorded; absent: None)."""
    window_images: Any = None
    batch: Any = None
    encoding: Any = None
    side: Any = None
    workers: Any = None
    limit: Any = None
    cpus: Any = None  # dataload --cpus: runs held to some CPUs (train-e2e's loader alone never is)


# What the pairing reads of the two benchmarks' cells (their records are dataload/results.py's DataloadCell and
# train_e2e/results.py's TrainE2ECell; data/ imports no benchmark): the rest of a cell is kept aside, unread.
@dataclass(frozen=True, kw_only=True)
class _LoadCell(Record):
    loader: Any = None
    encoding: Any = None
    side: Any = None
    source: Any = None
    workers: Any = None
    status: Any = None
    summary: Summary | None = None


@dataclass(frozen=True, kw_only=True)
class _AloneSummary(Record):
    loader: Summary | None = None


@dataclass(frozen=True, kw_only=True)
class _AloneCell(Record):
    loader: Any = None
    status: Any = None
    summary: _AloneSummary | None = None


def machine(doc: dict[str, Any]) -> str:
    """The kind of machine a run was on: its GPU's name (a fresh machine of one kind has another UUID), CPU count
    and host name."""
    host = doc.get("host") or {}
    gpu = (host.get("gpu") or {}).get("name") or "no GPU"
    return f"{gpu}, {host.get('cpu_count')} CPUs, host {host.get('hostname')}"


def corpus(doc: dict[str, Any]) -> tuple[Any, Any] | None:
    """The data a run read: its datasets' corpus identity and the images it read of it (the corpus's count, or
    --limit's when smaller), when they all name one corpus (None where its datasets disagree or record none). Other
    counts are other data: 20,000 and 40,000 images give a loader other epochs."""
    found = {(d.get("corpus_identity"), d.get("corpus_images")) for d in doc.get("datasets") or []
             if isinstance(d, dict) and d.get("corpus_identity")}
    if len(found) != 1:
        return None
    identity, images = found.pop()
    limit = view(_Recorded, doc).limit
    if isinstance(limit, int) and isinstance(images, int):
        images = min(images, limit)
    return identity, images


def _windowed(doc: dict[str, Any], benchmark: str) -> _Recorded | None:
    """The recorded configuration of a `benchmark` artifact measured under the window rule (else None)."""
    if doc.get("benchmark") != benchmark:
        return None
    rec = view(_Recorded, doc)
    return rec if rec.window_images is not None else None


def _median(summary: Any) -> tuple[float, int] | None:
    if isinstance(summary, Summary) and isinstance(summary.median, (int, float)) and summary.median > 0:
        return float(summary.median), int(summary.n or 0)
    return None


def dataload_cells(doc: dict[str, Any]) -> dict[tuple, tuple[float, int]]:
    """(loader, encoding, side, workers, batch) → (median, runs) of a windowed dataload artifact's RAM cells."""
    rec = _windowed(doc, "dataload")
    if rec is None or rec.cpus:  # held to some CPUs: not the pipeline train-e2e's loader alone times
        return {}
    out = {}
    for c in (from_json(_LoadCell, c) for c in doc.get("results") or []):
        m = _median(c.summary)
        if c.source == SOURCE and c.status == "ok" and m:
            out[(c.loader, c.encoding, c.side, c.workers, rec.batch)] = m
    return out


def loader_alone_cells(doc: dict[str, Any]) -> dict[tuple, tuple[float, int]]:
    """The same key → (median, runs) of a windowed train-e2e artifact's loader-alone figures."""
    rec = _windowed(doc, "train-e2e")
    if rec is None:
        return {}
    out = {}
    for c in (from_json(_AloneCell, c) for c in doc.get("results") or []):
        m = _median(c.summary.loader if isinstance(c.summary, _AloneSummary) else None)
        if c.loader != "synthetic" and c.status == "ok" and m:
            out[(c.loader, rec.encoding, rec.side, rec.workers, rec.batch)] = m
    return out


def pairs(docs: list[tuple[str, dict[str, Any]]]) -> list[Pair]:
    """Every (dataload cell, train-e2e loader alone) pair of the named documents with the same loader, encoding,
    side, workers and batch, read from the same corpus, on the same kind of machine."""
    out = []
    alone_of = [(ename, machine(e), corpus(e), loader_alone_cells(e)) for ename, e in docs]
    for dname, d in docs:
        load, where, data = dataload_cells(d), machine(d), corpus(d)
        for ename, e_machine, e_data, alone_cells in alone_of:
            if where != e_machine or data != e_data:
                continue
            for key, (alone, n_alone) in alone_cells.items():
                if key in load:
                    med, n = load[key]
                    out.append(Pair(*key, where, Figure(med, n, dname), Figure(alone, n_alone, ename)))
    return out


def report_lines(docs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """A report's section on the pairs (nothing where there are none)."""
    found = pairs(docs)
    if not found:
        return []
    lines = ["The kit against itself — dataload beside train-e2e's loader alone (same corpus and data, RAM source, "
             f"workers and batch, same kind of machine; they should agree within {AGREE_WITHIN:.0%}):", "",
             "| Loader | Data | Workers | dataload images/s | loader alone images/s | difference | |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for p in found:
        lines.append(f"| {p.loader} | {p.encoding}@{p.side} | {p.workers} | {p.dataload.images_per_second:,.0f} "
                     f"({p.dataload.runs} runs, `{p.dataload.name}`) | {p.loader_alone.images_per_second:,.0f} "
                     f"({p.loader_alone.runs} runs, `{p.loader_alone.name}`) | {p.difference:+.1%} | "
                     f"{'agree' if p.agree else f'DIFFER by more than {AGREE_WITHIN:.0%}'} |")
    return [*lines, ""]
