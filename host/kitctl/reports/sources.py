"""Any result file the reports read, normalised: kitctl artifacts (final or partial, max-batch or
throughput) and the reference runner's max-batch JSON. `kitctl report`, `compare` and
`results list` only see a `Source`; a file that is neither is one `ArtifactError` line.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import benchmarks
from ..core import artifact as art
from . import reference
from ..core.artifact import ArtifactError
from ..core.fileio import NotRegularFile, read_regular
from ..core.recorded import RecordedConfig

if TYPE_CHECKING:  # the row types the benchmarks fill in (through Benchmark.load_rows)
    from ..benchmarks.maxbatch.table import Row, TrialPoint
    from ..benchmarks.throughput.table import ThroughputRow

KITCTL, REFERENCE = "kitctl", "reference"


class UnknownKind(ArtifactError):
    """Valid JSON, but neither a kitctl artifact nor a reference-runner file."""


@dataclass
class Source:
    path: Path
    kind: str  # KITCTL | REFERENCE
    doc: dict[str, Any]
    benchmark: str  # a registered benchmark's name (a reference file: reference.BENCHMARK)
    state: str  # complete | interrupted | running | reference
    created: str | None  # ISO 8601 (UTC)
    gpu_name: str | None
    card_total_mib: float | None
    limit_mib: float | None  # L
    budget_mib: float | None  # B (the reference runner: its cap)
    emulated: bool
    # Filled by the benchmark's `load_rows`: max batch's rows and trial points, throughput's rows.
    rows: list[Row] = field(default_factory=list)
    tput: list[ThroughputRow] = field(default_factory=list)
    points: dict[tuple[str, str], list[TrialPoint]] = field(default_factory=dict)
    # A kitctl artifact's recorded "configuration", typed (its benchmark's own keys in `.own`); a
    # reference file's is `reference.config(doc)`.
    config: RecordedConfig = field(default_factory=RecordedConfig)

    @property
    def kit_results(self) -> list[dict[str, Any]]:
        """A kitctl artifact's recorded cells ("results"); none for a reference file."""
        return self.doc["results"] if self.kind == KITCTL else []

    @property
    def recorded_dataset(self) -> Any:
        """The dataset its configuration records (None where it records none)."""
        return self.config.dataset if self.kind == KITCTL else reference.config(self.doc).dataset

    @property
    def is_kitctl(self) -> bool:
        """kitctl's own artifact (else the reference runner's JSON)."""
        return self.kind == KITCTL

    @property
    def gpu_users(self) -> list[str] | None:
        """What of this result ran on a GPU, as its benchmark reads it (Benchmark.gpu_users); None: the benchmark
        follows the engines' rule (host.gpu is what ran)."""
        bench = benchmarks.get(self.benchmark) if self.kind == KITCTL else None
        return None if bench is None or bench.gpu_users is None else bench.gpu_users(self)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def stem(self) -> str:
        n = self.path.name
        for suffix in (art.PARTIAL_SUFFIX, ".json"):
            if n.endswith(suffix):
                return n[: -len(suffix)]
        return n

    @property
    def machine_short(self) -> str:
        """"NVIDIA H200", "NVIDIA H200 @ 16,376 MiB" (emulated limit) or "cpu"; for a benchmark that says what
        ran on a GPU (the data benchmarks): "NVIDIA H200 (unused)" when nothing did, "GPU (not recorded)" when
        something did on a GPU the artifact does not name."""
        users = self.gpu_users
        if self.gpu_name is None:
            if users:
                return "GPU (not recorded)"
            return "CPU" if self.kind == KITCTL else "—"
        if users == []:
            return f"{self.gpu_name} (unused)"
        if self.emulated and self.limit_mib:
            return f"{self.gpu_name} @ {self.limit_mib:,.0f} MiB"
        return self.gpu_name


def _read_json(path: Path) -> Any:
    try:
        text = read_regular(Path(path)).decode("utf-8")
    except NotRegularFile as exc:
        raise ArtifactError(str(exc)) from None
    except IsADirectoryError:
        raise ArtifactError(f"{path} is a directory, not a result file") from None
    except OSError as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ArtifactError(f"{path} is not valid JSON (not UTF-8 text)") from None
    if not text.strip():
        raise ArtifactError(f"{path} is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # Input that ends inside a value: the file was cut short (an unterminated string can only
        # mean end of input, since JSON strings cannot hold raw newlines).
        ended = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        hint = "; truncated?" if ended else ""
        raise ArtifactError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}{hint})") from None
    except RecursionError:
        raise ArtifactError(f"{path} is not valid JSON (nested too deeply)") from None
    except ValueError as exc:  # an integer of more than 4,300 digits (int's conversion limit): not a result
        raise ArtifactError(f"{path} is not valid JSON (a number too long to read: {' '.join(str(exc).split())[:60]})") from None


def _stamp_iso(stamp: Any) -> str | None:
    m = re.fullmatch(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z", str(stamp or ""))
    return f"{m[1]}-{m[2]}-{m[3]}T{m[4]}:{m[5]}:{m[6]}+00:00" if m else None


def _from_kitctl(path: Path, doc: dict[str, Any]) -> Source:
    if doc.get("schema_version") != art.SCHEMA_VERSION:
        raise ArtifactError(f"{path}: kitctl artifact schema_version {doc.get('schema_version')!r} is not "
                            f"supported (this kitctl reads {art.SCHEMA_VERSION})")
    try:
        art.validate(doc)
    except ArtifactError as exc:
        raise ArtifactError(f"{path}: {exc}") from None
    gpu = (doc.get("host") or {}).get("gpu") or None
    budget = doc.get("budget") or None
    src = Source(
        path=path, kind=KITCTL, doc=doc, benchmark=doc["benchmark"], state=doc["state"],
        created=doc.get("created_utc"), gpu_name=gpu.get("name") if gpu else None,
        card_total_mib=gpu.get("total_mib") if gpu else None,
        limit_mib=budget.get("limit_mib") if budget else None,
        budget_mib=budget.get("budget_mib") if budget else None,
        emulated=bool(budget and budget.get("emulated_smaller_card")))
    bench = benchmarks.get(src.benchmark)
    if bench is None:  # the schema names every benchmark; one it names that this kitctl lacks
        raise ArtifactError(f"{path}: benchmark {src.benchmark!r} is not one this kitctl knows")
    src.config = RecordedConfig.of_doc(doc, bench.recorded)
    if bench.load_rows is not None:
        bench.load_rows(src, doc)
    return src


def _from_reference(path: Path, doc: dict[str, Any]) -> Source:
    try:
        cells = reference.cells(doc)
        gpu = (doc.get("machine") or {}).get("gpu") or {}
        if not isinstance(gpu, dict):
            raise reference.ReferenceFormatError("reference machine.gpu is not an object")
        total = gpu.get("memory_total_mib")
        cap = reference.cap_mib(doc)
        src = Source(
            path=path, kind=REFERENCE, doc=doc, benchmark=reference.BENCHMARK, state="reference",
            created=_stamp_iso(doc.get("run_id")) or doc.get("created_utc"), gpu_name=gpu.get("name"),
            card_total_mib=float(total) if isinstance(total, (int, float)) else None,
            limit_mib=float(total) if isinstance(total, (int, float)) else None,
            budget_mib=cap, emulated=False)
        src.rows = reference.rows(doc)
        src.points = {(engine, p): reference.trial_points(e) for engine, p, _, e in cells}
    except reference.ReferenceFormatError as exc:
        raise ArtifactError(f"{path}: {exc}") from None
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise ArtifactError(f"{path}: malformed reference max-batch JSON ({type(exc).__name__}: {exc})") from None
    return src


def load_source(path: Path | str) -> Source:
    """Read one result file; ArtifactError (one line) when it is unreadable or of no known kind."""
    path = Path(path)
    doc = _read_json(path)
    if isinstance(doc, dict) and doc.get("kind") == "kitctl-artifact":
        return _from_kitctl(path, doc)
    if reference.is_reference(doc):
        return _from_reference(path, doc)
    raise UnknownKind(f"{path} is neither a kitctl artifact nor a reference max-batch JSON "
                        f"(no \"kind\": \"kitctl-artifact\" nor \"benchmark_id\")")
