"""datasize's recorded results, typed: a cell per format × encoding × max side (`DatasizeCell`) with the measured
dataset (`DatasetSize`). The run writes them, the end table and the report read them; core/typed.py turns them to
and from the artifact's JSON, and tests/test_typed_results.py checks them against the JSON Schema."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.typed import Record, from_json, record_fields

@dataclass(frozen=True)
class DatasetSize(Record):
    """One written dataset: its images (and of them JPEGs), payload and file bytes (per image too), the
    ImageNet-sized extrapolation the trial made (payload and file GB), how long the write took and how it was
    written (workers, compress probability, JPEG quality, ffcv's write mode)."""
    images: int | None = None
    jpeg_images: int | None = None
    payload_bytes: int | None = None
    file_bytes: int | None = None
    files: int | None = None
    payload_bytes_per_image: float | None = None
    file_bytes_per_image: float | None = None
    imagenet_equivalent_gb: dict[str, Any] | None = None
    write_seconds: float | None = None
    write_workers: int | None = None
    compress_probability: float | None = None
    jpeg_quality: int | None = None
    write_mode: str | None = None

    @classmethod
    def of_result(cls, result: dict[str, Any]) -> DatasetSize:
        """From the trial's result line (the keys SIZE_KEYS names, absent ones null)."""
        return from_json(cls, {k: result.get(k) for k in SIZE_KEYS})


# What the trial measured of one dataset, in the artifact's order: the record's fields.
SIZE_KEYS = tuple(f.name for f in record_fields(DatasetSize))


@dataclass(frozen=True)
class DatasizeCell(Record):
    """One format × encoding × max side: how its trial ended (status, exit code, seconds, error, stderr's tail),
    what it measured (None where it failed) and the versions of what wrote it."""
    format: str
    encoding: str
    side: int
    status: str
    exit_code: int | None = None
    elapsed_s: float | None = None
    error: str | None = None
    stderr_tail: str = ""
    size: DatasetSize | None = None
    versions: dict[str, Any] | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return self.format, self.encoding, self.side

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def cells(doc: dict[str, Any]) -> list[DatasizeCell]:
    """A datasize artifact's cells, typed (any recorded version)."""
    return [from_json(DatasizeCell, c) for c in doc["results"]]
